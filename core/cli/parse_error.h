// CLI11's usage errors in the words of the rest of kvscope, for kvscope and
// kvscope-viz alike.
#pragma once

#include <CLI/CLI.hpp>
#include <regex>
#include <string>
#include <vector>

namespace kvscope::cli {

// Four of CLI11's messages said another way; others pass unchanged.
//  * An option that takes one value, given twice ("--tokens 5 --tokens 6"): CLI11
//    says "--tokens: At Most 1 required but received 2"; this says
//    "--tokens: given 2 times; it takes one value".
//  * Arguments no option takes ("simulate --tokns 100"): CLI11 2.3 lists them last
//    first ("100 --tokns"); this lists them as they were typed ("--tokns 100"),
//    read from the app that was parsed.
//  * A whole number too large for its option ("--frames 99999999999"): CLI11 says
//    "Could not convert: --frames = 99999999999"; this says "--frames: 99999999999 is
//    out of range". (Values that are not whole numbers are refused before parsing:
//    cli/option_values.h.)
//  * An option at the end with no value ("simulate --tokens"): CLI11 says "--tokens: 1
//    required INT missing"; this says "--tokens: no value given".
inline std::string parse_error_text(const CLI::ParseError& e, const CLI::App& app) {
  static const std::regex at_most_one("^(.*): At Most 1 required but received ([0-9]+)$");
  static const std::regex too_large("^Could not convert: (.*) = ([+-]?[0-9]+)$");
  static const std::regex missing("^(.*): 1 required .* missing$");
  const std::string what = e.what();
  std::smatch m;
  if (std::regex_match(what, m, at_most_one)) return m[1].str() + ": given " + m[2].str() + " times; it takes one value";
  if (std::regex_match(what, m, missing)) return m[1].str() + ": no value given";
  if (std::regex_match(what, m, too_large)) return m[1].str() + ": " + m[2].str() + " is out of range";
  if (dynamic_cast<const CLI::ExtrasError*>(&e)) {
    const std::vector<std::string> extras = app.remaining(true);  // in the order typed
    if (extras.empty()) return what;
    std::string typed;
    for (const std::string& x : extras) typed += (typed.empty() ? "" : " ") + x;
    return std::string(extras.size() == 1 ? "The following argument was not expected: "
                                          : "The following arguments were not expected: ") + typed;
  }
  return what;
}

}  // namespace kvscope::cli
