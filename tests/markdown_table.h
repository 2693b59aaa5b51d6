// Markdown tables in the text kvscope prints and the README quotes: the cells of a row,
// and a check that every row of every table has its header's number of cells.
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

// The '|' that edge the cells of a table line: every one but "\|", which GitHub reads
// as a '|' inside a cell (in a code span too, so `<|endoftext|>` needs it).
inline int cell_edges(const std::string& line) {
  int edges = 0;
  for (size_t i = 0; i < line.size(); ++i) edges += line[i] == '|' && (i == 0 || line[i - 1] != '\\');
  return edges;
}

// `text` written for a table cell: each '|' as "\|".
inline std::string table_cell(const std::string& text) {
  std::string cell;
  for (char c : text) cell += c == '|' ? std::string("\\|") : std::string(1, c);
  return cell;
}

// Checks that each table in `text` (a run of lines that start with '|') has as many
// cells in every line as in its header, so that it renders as a Markdown table when
// pasted (a line with more cells loses the extra ones); returns how many tables.
inline int expect_markdown_tables(const std::string& text) {
  std::istringstream in(text);
  int header_edges = -1;  // cell edges in the current table's header; -1 outside a table
  int tables = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] != '|') {
      header_edges = -1;
      continue;
    }
    const int edges = cell_edges(line);
    if (header_edges < 0) {
      header_edges = edges;
      ++tables;
    }
    EXPECT_EQ(edges, header_edges) << "a line whose cells do not match its table's header:\n" << line;
  }
  return tables;
}

}  // namespace kvscope::test
