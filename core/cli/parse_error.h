// CLI11's usage errors in the words of the rest of kvscope, for kvscope and
// kvscope-viz alike.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <utility>
#include <vector>

#include "cli/option_values.h"  // is_whole_number_text
#include "util/format.h"         // ends_with

namespace kvscope::cli {

// `text` cut at the last `marker`: {before, after}; {"", ""} when there is none.
inline std::pair<std::string, std::string> split_at_last(const std::string& text, const std::string& marker) {
  const size_t at = text.rfind(marker);
  if (at == std::string::npos) return {"", ""};
  return {text.substr(0, at), text.substr(at + marker.size())};
}

// The arguments no option took, as they were typed, in CLI11's words.
inline std::string not_expected(const std::vector<std::string>& extras) {
  std::string typed;
  for (const std::string& x : extras) typed += (typed.empty() ? "" : " ") + x;
  return std::string(extras.size() == 1 ? "The following argument was not expected: "
                                        : "The following arguments were not expected: ") + typed;
}

// A required option or command missing, and the first word left over looks like
// an option: that word is the likelier mistake ("--promt hi" for "--prompt hi").
// A first word that does not ("generat --prompt hi") is a command's name, misspelt.
inline bool misspelt_option(const CLI::ParseError& e, const CLI::App& app) {
  const std::vector<std::string> extras = app.remaining(true);
  return dynamic_cast<const CLI::RequiredError*>(&e) && !extras.empty() && looks_like_option(extras.front());
}

// Four of CLI11's messages said another way, and one put first; others pass unchanged.
//  * An option that takes one value, given twice ("--tokens 5 --tokens 6"): CLI11
//    says "--tokens: At Most 1 required but received 2"; this says
//    "--tokens: given 2 times; it takes one value".
//  * Arguments no option takes ("simulate --tokns 100"): CLI11 2.3 lists them last
//    first ("100 --tokns"); this lists them as they were typed ("--tokns 100"),
//    read from the app that was parsed.
//  * A whole number too large for its option ("eval --context 99999999999"): CLI11
//    says "Could not convert: --context = 99999999999"; this says "--context:
//    99999999999 is out of range". (Values that are not whole numbers are refused before parsing:
//    cli/option_values.h.)
//  * An option at the end with no value ("simulate --tokens"): CLI11 says "--tokens: 1
//    required INT missing"; this says "--tokens: no value given".
//  * A misspelt option beside a required one ("generate --promt hi"): CLI11 checks
//    what is required before what is left over, and says "--prompt is required"
//    of an option that was typed; this names the word it did not know.
inline std::string parse_error_text(const CLI::ParseError& e, const CLI::App& app) {
  const std::string what = e.what();
  if (misspelt_option(e, app)) return not_expected(app.remaining(true));
  // "NAME: At Most 1 required but received N"
  if (const auto [name, n] = split_at_last(what, ": At Most 1 required but received "); is_whole_number_text(n))
    return name + ": given " + n + " times; it takes one value";
  // "NAME: 1 required TYPE missing"
  if (const auto [name, type] = split_at_last(what, ": 1 required "); !name.empty() && ends_with(type, " missing"))
    return name + ": no value given";
  // "Could not convert: NAME = VALUE", VALUE a whole number
  if (const auto [head, value] = split_at_last(what, " = ");
      head.rfind("Could not convert: ", 0) == 0 && is_whole_number_text(value))
    return head.substr(std::string("Could not convert: ").size()) + ": " + value + " is out of range";
  if (dynamic_cast<const CLI::ExtrasError*>(&e)) {
    const std::vector<std::string> extras = app.remaining(true);  // in the order typed
    return extras.empty() ? what : not_expected(extras);
  }
  return what;
}

}  // namespace kvscope::cli
