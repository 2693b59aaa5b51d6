// Option values checked before CLI11 parses them, for kvscope and kvscope-viz alike:
// comma-separated lists (--keep 0.1,0.25, --trace a,b) and numbers.
#pragma once

#include <CLI/CLI.hpp>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>

#include "util/error.h"  // number_text

namespace kvscope::cli {

// An optional sign, then one digit or more: "12", "-3", "+7"; not "1.5", "1e3" or "-".
inline bool is_whole_number_text(const std::string& text) {
  const size_t digits = !text.empty() && (text[0] == '+' || text[0] == '-') ? 1 : 0;
  return digits < text.size() && text.find_first_not_of("0123456789", digits) == std::string::npos;
}

// What is wrong with one value of a number option, or "" when nothing is. CLI11 2.3
// says only "Could not convert: --tokens = 1.5" for a whole-number option given 1.5
// or abc, and reads 99999999999999999999 into a 64-bit option as 9223372036854775807
// (its strtoll saturates unchecked), so those are caught here first. An unsigned
// option (--seed) takes up to 18446744073709551615. A number is the whole value:
// not " 5" or "5 " (strtod skipped a leading space, and "0.5, 0.25" ran).
inline std::string number_value_problem(const std::string& text, bool whole, bool is_unsigned = false) {
  if (text.empty()) return std::string("expects a ") + (whole ? "whole " : "") + "number, not an empty value";
  const bool spaced = text.find_first_of(" \t\n") != std::string::npos;
  if (spaced) return std::string("expects a ") + (whole ? "whole " : "") + "number, not \"" + text + "\"";
  if (whole) {
    if (!is_whole_number_text(text)) return "expects a whole number, not " + text;
    errno = 0;
    if (is_unsigned) {  // a negative one is the option's own check's: "must be 0 or more"
      if (text[0] != '-') (void)std::strtoull(text.c_str(), nullptr, 10);
      return errno == ERANGE ? text + " is out of range (the most is 18446744073709551615)" : "";
    }
    (void)std::strtoll(text.c_str(), nullptr, 10);
    if (errno == ERANGE)
      return text + " is out of range (" + (text[0] == '-' ? "the least is -9223372036854775808" : "the most is 9223372036854775807") + ")";
    return "";
  }
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(text.c_str(), &end);
  if (*end != '\0' || !std::isfinite(x)) return "expects a number, not " + text;
  // Under the smallest double, strtod gives 0 or a denormal and ERANGE: --kv-memory
  // 1e-400 ran as 0 (a whole-sequence pool), --temperature 1e-400 as greedy.
  if (errno == ERANGE) return text + " is too close to 0 to be told from it";
  return "";
}

// A finite number in [low, high] (above low when `above_low`, below high when
// `below_high`), else a sentence saying why not ("must be above 0, not -3"), as a
// CLI11 check. strtod reads "nan" and "inf" too; they are refused, since every
// comparison with NaN is false and a range check alone lets it through.
inline CLI::Validator number_check(double low, bool above_low, double high, const std::string& name,
                                   bool below_high = false) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        const std::string problem = number_value_problem(text, false);
        if (!problem.empty()) return problem;
        const double x = std::strtod(text.c_str(), nullptr);
        if (above_low && x <= low) return "must be above " + number_text(low) + ", not " + text;
        if (x < low) return "must be " + number_text(low) + " or more, not " + text;
        if (below_high && x >= high) return "must be below " + number_text(high) + ", not " + text;
        if (x > high) return "must be " + number_text(high) + " or less, not " + text;
        return "";
      },
      name);
}

// A file to write (--trace, --json, --out, --screenshot): "" is refused, or the run
// would go on with exit code 0 having written nothing.
inline const CLI::Validator kFileName(
    [](std::string& name) { return name.empty() ? std::string("an empty file name") : std::string(); }, "FILE");

// Whether CLI11 reads `word` as an option rather than a value: "-x" or "--xx", but
// not "-5" or "-.5" (negative numbers).
inline bool looks_like_option(const std::string& word) {
  return word.size() >= 2 && word[0] == '-' && !std::isdigit(static_cast<unsigned char>(word[1])) && word[1] != '.';
}

// What an option's values are, read from CLI11's type name ("INT",
// "UINT:NONNEGATIVE", "FLOAT", "TEXT", ...).
enum class ValueKind { Text, WholeNumber, Number };
inline ValueKind value_kind(const CLI::Option& option) {
  const std::string type = option.get_type_name();
  if (type.rfind("INT", 0) == 0 || type.rfind("UINT", 0) == 0) return ValueKind::WholeNumber;
  if (type.rfind("FLOAT", 0) == 0) return ValueKind::Number;
  return ValueKind::Text;
}

// One value of an option, checked:
//  * a comma-separated list has no empty item: CLI11 drops them, so "1,,2" would run 1
//    and 2, and "," nothing at all;
//  * each number is one: "--tokens: expects a whole number, not 1.5".
inline void check_one_value(const CLI::Option& option, const std::string& value) {
  const std::string flag = option.get_name();  // "--tokens", also when given as -n
  const ValueKind kind = value_kind(option);
  const char delimiter = option.get_delimiter();
  if (delimiter == ',') {
    if (value.empty()) throw CLI::ValidationError(flag, "an empty list");
    if (value.front() == ',' || value.back() == ',' || value.find(",,") != std::string::npos)
      throw CLI::ValidationError(flag, "an empty item in the list \"" + value + "\" (items are separated by one comma)");
  }
  if (kind == ValueKind::Text) return;
  size_t from = 0;
  while (true) {
    const size_t to = delimiter == '\0' ? std::string::npos : value.find(delimiter, from);
    const std::string problem = number_value_problem(value.substr(from, to - from), kind == ValueKind::WholeNumber,
                                                     option.get_type_name().rfind("UINT", 0) == 0);
    if (!problem.empty()) throw CLI::ValidationError(flag, problem);
    if (to == std::string::npos) return;
    from = to + 1;
  }
}

// Walks the arguments as CLI11 will (into subcommands by name) and checks the value
// of every option that takes one (check_one_value). An option that takes a list also
// takes the words after its first value, up to the next option ("--keep 0.1 0.2").
// Refused as a usage error naming the option (CLI::ValidationError, "--tokens: ..."),
// before anything runs.
inline void check_option_values(const CLI::App& app, int argc, char** argv) {
  const CLI::App* at = &app;
  const auto command_named = [&](const std::string& word) -> const CLI::App* {
    for (const CLI::App* sub : at->get_subcommands([](const CLI::App*) { return true; }))
      if (sub->get_name() == word) return sub;
    return nullptr;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (const CLI::App* sub = command_named(arg)) at = sub;
    if (!looks_like_option(arg)) continue;
    // Where an attached value starts: "--tokens=5" after the '=', "-n5" after the letter.
    const bool long_name = arg.rfind("--", 0) == 0;
    const size_t eq = long_name ? arg.find('=') : arg.size() > 2 ? 2 : std::string::npos;
    const size_t value_at = long_name ? eq + 1 : eq;
    const CLI::Option* option = at->get_option_no_throw(arg.substr(0, eq));
    if (option == nullptr || option->get_expected_min() == 0) continue;  // not an option here, or a flag
    const bool separate = eq == std::string::npos;  // "--tokens 5", not "--tokens=5" or "-n5"
    if (!separate) {
      // "--prompt=" with nothing after the '=': CLI11 would take the next word, even an
      // option ("--prompt= --chat"), as the value.
      if (value_at == arg.size())
        throw CLI::ValidationError(option->get_name(), "no value after the '='");
      check_one_value(*option, arg.substr(value_at));
      continue;
    }
    if (i + 1 == argc) continue;  // no value: CLI11 says so
    const std::string value = argv[i + 1];
    // The value left out ("--chunk --out o", "--prompt --seed 3"): CLI11 would take the
    // next option as the value. A text that really is an option's name can be given as
    // --prompt=--seed.
    if (value.rfind("--", 0) == 0) {
      const ValueKind kind = value_kind(*option);
      if (kind != ValueKind::Text)
        throw CLI::ValidationError(option->get_name(),
                                   std::string("expects a ") + (kind == ValueKind::WholeNumber ? "whole " : "") +
                                       "number, but the next word is the option " + value);
      if (at->get_option_no_throw(value.substr(0, value.find('='))) != nullptr)
        throw CLI::ValidationError(option->get_name(), "no value given: the next word is the option " + value);
      continue;
    }
    check_one_value(*option, argv[++i]);  // the value is not read as an option or a command
    if (option->get_expected_max() > 1)
      while (i + 1 < argc && !looks_like_option(argv[i + 1]) && command_named(argv[i + 1]) == nullptr)
        check_one_value(*option, argv[++i]);
  }
}

}  // namespace kvscope::cli
