// Numbers as people read them, on the screen and in the command-line tables:
// "16,000", "87.5%", "3.67 GB", "1 block".
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

namespace kvscope {

// snprintf of one number: fmt("%.2f", 0.5) -> "0.50".
inline std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// 16000 -> "16,000".
inline std::string commas(int64_t n) {
  const uint64_t magnitude = n < 0 ? 0 - uint64_t(n) : uint64_t(n);  // INT64_MIN has no positive int64
  std::string digits = std::to_string(magnitude), out = n < 0 ? "-" : "";
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// A count and its noun, which takes an "s" unless the count is 1: plural(1, "block")
// -> "1 block", plural(16000, "token") -> "16000 tokens". Every noun counted here
// is a regular one.
inline std::string plural(int64_t n, const std::string& noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

// The article before a number as it is read aloud: "an" for 8, 11, 18, 80, 800,
// 8000, 11000 ("eight", "eleven", "eighteen", "eighty", "eight thousand", "eleven
// thousand"), else "a": a_or_an("80") + " 80 GB GPU" -> "an 80 GB GPU".
inline const char* a_or_an(const std::string& number) {
  if (number.rfind("8", 0) == 0) return "an";
  const size_t whole = number.find_first_not_of("0123456789");  // the digits before any '.' or 'e'
  const size_t digits = whole == std::string::npos ? number.size() : whole;
  const bool eleven_or_eighteen = number.rfind("11", 0) == 0 || number.rfind("18", 0) == 0;
  return eleven_or_eighteen && digits % 3 == 2 ? "an" : "a";  // 11, 11000, 11000000; not 110 or 1100
}

// A parameter count in millions or, from 1e8, billions: 1312128 -> "1.31M",
// 596049920 -> "0.60B" (a test model's 1.3M would read "0.00B").
inline std::string params_text(int64_t n) {
  return n >= 100000000 ? fmt("%.2fB", double(n) / 1e9) : fmt("%.2fM", double(n) / 1e6);
}

// 0.8751 -> "87.5%"; NaN (no such number at this point) -> "-".
inline std::string percent(double f, int decimals = 1) {
  if (std::isnan(f)) return "-";
  char format[16];
  std::snprintf(format, sizeof format, "%%.%df%%%%", decimals);
  return fmt(format, 100 * f);
}

// Bytes as KiB: "256 KiB" when exact, "2.25 KiB" otherwise.
inline std::string kib(int64_t bytes) {
  if (bytes % 1024 == 0) return std::to_string(bytes / 1024) + " KiB";
  return fmt("%.2f KiB", double(bytes) / 1024);
}

// Decimal units, three significant digits: 433000000 -> "433 MB". The digits are
// rounded before the unit is chosen, so 999.6e6 is "1.00 GB", not "1000 MB".
inline std::string bytes(double b) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  if (std::fabs(b) >= 1) {
    const double step = std::pow(10.0, std::floor(std::log10(std::fabs(b))) - 2);  // the third digit's place
    b = std::round(b / step) * step;
  }
  int u = 0;
  while (std::fabs(b) >= 1000 && u < 5) b /= 1000, ++u;
  if (u == 0) return fmt("%.0f B", b);
  return fmt(std::fabs(b) < 10 ? "%.2f " : std::fabs(b) < 100 ? "%.1f " : "%.0f ", b) + units[u];
}

// Whether `text` ends with `tail`.
inline bool ends_with(const std::string& text, const std::string& tail) {
  return text.size() >= tail.size() && text.compare(text.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace kvscope
