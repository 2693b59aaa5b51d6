// CLI11's usage errors in the words of the rest of kvscope, for kvscope and
// kvscope-viz alike.
#pragma once

#include <CLI/CLI.hpp>
#include <regex>
#include <string>

namespace kvscope::cli {

// An option that takes one value, given twice ("--tokens 5 --tokens 6"): CLI11
// says "--tokens: At Most 1 required but received 2"; this says
// "--tokens: given 2 times; it takes one value". Other messages pass unchanged.
inline std::string parse_error_text(const CLI::ParseError& e) {
  static const std::regex at_most_one("^(.*): At Most 1 required but received ([0-9]+)$");
  const std::string what = e.what();
  std::smatch m;
  if (std::regex_match(what, m, at_most_one)) return m[1].str() + ": given " + m[2].str() + " times; it takes one value";
  return what;
}

}  // namespace kvscope::cli
