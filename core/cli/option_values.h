// Comma-separated list options (--keep 0.1,0.25, --trace a,b) checked before
// CLI11 parses them, for kvscope and kvscope-viz alike.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "util/error.h"

namespace kvscope::cli {

// CLI11 drops the empty items of a comma-separated list: "1,,2" would run 1 and 2,
// and "," nothing at all, so the next option was taken for the value. Refused here,
// before parsing, for every option that takes such a list.
inline void check_comma_lists(const CLI::App& app, int argc, char** argv) {
  const CLI::App* at = &app;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    for (const CLI::App* sub : at->get_subcommands([](const CLI::App*) { return true; }))
      if (sub->get_name() == arg) at = sub;
    if (arg.rfind("--", 0) != 0) continue;
    const size_t eq = arg.find('=');
    const CLI::Option* option = at->get_option_no_throw(arg.substr(0, eq));
    if (option == nullptr || option->get_delimiter() != ',') continue;
    if (eq == std::string::npos && (i + 1 == argc || std::string(argv[i + 1]).rfind("--", 0) == 0))
      continue;  // no value: CLI11 says so
    const std::string list = eq == std::string::npos ? argv[i + 1] : arg.substr(eq + 1);
    if (list.empty()) throw Error(arg.substr(0, eq) + ": an empty list");
    if (list.front() == ',' || list.back() == ',' || list.find(",,") != std::string::npos)
      throw Error(arg.substr(0, eq) + ": an empty item in the list \"" + list + "\" (items are separated by one comma)");
  }
}

}  // namespace kvscope::cli
