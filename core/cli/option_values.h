// Option values checked before CLI11 parses them, for kvscope and kvscope-viz alike:
// comma-separated lists (--keep 0.1,0.25, --trace a,b) and numbers.
#pragma once

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <regex>
#include <string>

#include "util/error.h"  // number_text

namespace kvscope::cli {

// A finite number in [low, high] (above low when `above_low`), else a sentence
// saying why not ("must be above 0, not -3"), as a CLI11 check. strtod reads "nan"
// and "inf" too; they are refused here, since every comparison with NaN is false
// and a range check alone lets it through.
inline CLI::Validator number_check(double low, bool above_low, double high, const std::string& name) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        char* end = nullptr;
        const double x = std::strtod(text.c_str(), &end);
        if (text.empty()) return "expects a number, not an empty value";
        if (text.rfind("--", 0) == 0) return "expects a number, but the next word is the option " + text;
        if (*end != '\0' || !std::isfinite(x)) return "expects a number, not " + text;
        if (above_low && x <= low) return "must be above " + number_text(low) + ", not " + text;
        if (x < low) return "must be " + number_text(low) + " or more, not " + text;
        if (x > high) return "must be " + number_text(high) + " or less, not " + text;
        return "";
      },
      name);
}

// What is wrong with one value of a number option, or "" when nothing is. CLI11 2.3
// says only "Could not convert: --tokens = 1.5" for a whole-number option given 1.5
// or abc, and reads 99999999999999999999 into a 64-bit option as 9223372036854775807
// (its strtoll saturates unchecked), so those are caught here first.
inline std::string number_value_problem(const std::string& text, bool whole) {
  static const std::regex digits("[+-]?[0-9]+");
  if (text.empty()) return std::string("expects a ") + (whole ? "whole " : "") + "number, not an empty value";
  if (whole) {
    if (!std::regex_match(text, digits)) return "expects a whole number, not " + text;
    errno = 0;
    (void)std::strtoll(text.c_str(), nullptr, 10);
    if (errno == ERANGE) return text + " is out of range";
    return "";
  }
  char* end = nullptr;
  const double x = std::strtod(text.c_str(), &end);
  if (*end != '\0' || !std::isfinite(x)) return "expects a number, not " + text;
  return "";
}

// Walks the arguments as CLI11 will (into subcommands by name) and checks the value
// of every option that takes one:
//  * a comma-separated list has no empty item: CLI11 drops them, so "1,,2" would run 1
//    and 2, and "," nothing at all;
//  * each number is one: "--tokens: expects a whole number, not 1.5".
// Refused as a usage error naming the option (CLI::ValidationError, "--tokens: ..."),
// before anything runs.
inline void check_option_values(const CLI::App& app, int argc, char** argv) {
  const CLI::App* at = &app;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    for (const CLI::App* sub : at->get_subcommands([](const CLI::App*) { return true; }))
      if (sub->get_name() == arg) at = sub;
    if (arg.size() < 2 || arg[0] != '-' || std::isdigit(static_cast<unsigned char>(arg[1]))) continue;
    // Where an attached value starts: "--tokens=5" after the '=', "-n5" after the letter.
    const bool long_name = arg.rfind("--", 0) == 0;
    const size_t eq = long_name ? arg.find('=') : arg.size() > 2 ? 2 : std::string::npos;
    const size_t value_at = long_name ? eq + 1 : eq;
    const CLI::Option* option = at->get_option_no_throw(arg.substr(0, eq));
    if (option == nullptr || option->get_expected_min() == 0) continue;  // not an option here, or a flag
    const std::string flag = option->get_name();  // "--tokens", also when given as -n
    const std::string type = option->get_type_name();  // "INT", "UINT:NONNEGATIVE", "FLOAT", "TEXT", ...
    const bool whole = type.rfind("INT", 0) == 0 || type.rfind("UINT", 0) == 0;
    const bool number = whole || type.rfind("FLOAT", 0) == 0;
    const bool separate = eq == std::string::npos;  // "--tokens 5", not "--tokens=5" or "-n5"
    if (separate && i + 1 == argc) continue;         // no value: CLI11 says so
    const std::string value = separate ? argv[i + 1] : arg.substr(value_at);
    if (separate && value.rfind("--", 0) == 0 && number)  // the value left out: CLI11 would take the option for it
      throw CLI::ValidationError(flag, std::string("expects a ") + (whole ? "whole " : "") +
                                           "number, but the next word is the option " + value);
    // A text value left out ("--prompt --seed 3"): CLI11 would take the next option as
    // the text. A text that really is an option's name can be given as --prompt=--seed.
    if (separate && value.rfind("--", 0) == 0) {
      if (at->get_option_no_throw(value.substr(0, value.find('='))) != nullptr)
        throw CLI::ValidationError(flag, "no value given: the next word is the option " + value);
      continue;
    }
    if (separate) ++i;  // the value is not read as an option or a command
    const char delimiter = option->get_delimiter();
    if (delimiter == ',') {
      if (value.empty()) throw CLI::ValidationError(flag, "an empty list");
      if (value.front() == ',' || value.back() == ',' || value.find(",,") != std::string::npos)
        throw CLI::ValidationError(flag, "an empty item in the list \"" + value + "\" (items are separated by one comma)");
    }
    if (!number) continue;
    size_t from = 0;
    while (true) {
      const size_t to = delimiter == '\0' ? std::string::npos : value.find(delimiter, from);
      const std::string problem = number_value_problem(value.substr(from, to - from), whole);
      if (!problem.empty()) throw CLI::ValidationError(flag, problem);
      if (to == std::string::npos) break;
      from = to + 1;
    }
  }
}

}  // namespace kvscope::cli
