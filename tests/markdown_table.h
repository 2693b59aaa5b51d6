// The cells of a Markdown table row, for tests that read the tables kvscope prints
// and the README quotes.
#pragma once

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

namespace kvscope::test {

// The cells of the first line of `text` that starts with `start` ("| bf16 | 2 |"),
// trimmed of the one space on each side; none, and a test failure, when there is none.
inline std::vector<std::string> table_row(const std::string& text, const std::string& start) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(start, 0) != 0) continue;
    std::vector<std::string> cells;
    std::istringstream row(line.substr(1));
    for (std::string c; std::getline(row, c, '|');) cells.push_back(c.substr(1, c.size() - 2));
    return cells;
  }
  ADD_FAILURE() << "no row " << start << " in\n" << text;
  return {};
}

}  // namespace kvscope::test
