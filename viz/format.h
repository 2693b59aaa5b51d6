// Number formatting for the screen: "16,000", "87.5%", "3.67 GB".
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

namespace kvscope::viz {

inline std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// 16000 -> "16,000".
inline std::string count(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n), out = n < 0 ? "-" : "";
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// 0.8751 -> "87.5%"; NaN (no such number at this point) -> "-".
inline std::string percent(double f, int decimals = 1) {
  if (std::isnan(f)) return "-";
  char format[16];
  std::snprintf(format, sizeof format, "%%.%df%%%%", decimals);
  return fmt(format, 100 * f);
}

// Decimal units, three significant digits: 433000000 -> "433 MB".
inline std::string bytes(double b) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  int u = 0;
  while (std::fabs(b) >= 1000 && u < 5) b /= 1000, ++u;
  if (u == 0) return fmt("%.0f B", b);
  return fmt(std::fabs(b) < 10 ? "%.2f " : std::fabs(b) < 100 ? "%.1f " : "%.0f ", b) + units[u];
}

}  // namespace kvscope::viz
