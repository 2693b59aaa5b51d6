// Markdown tables in the text kvscope prints and the README quotes: the cells of a row,
// and a check that every row of every table has its header's number of cells.
#pragma once

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

namespace kvscope::test {

// Whether line[i] edges a cell: a '|' not written "\|", which GitHub reads as a '|'
// inside a cell (in a code span too, so `<|endoftext|>` needs it).
inline bool is_cell_edge(const std::string& line, size_t i) {
  return line[i] == '|' && (i == 0 || line[i - 1] != '\\');
}

// How many cell edges a table line has ("| a | b |" has 3).
inline int cell_edges(const std::string& line) {
  int edges = 0;
  for (size_t i = 0; i < line.size(); ++i) edges += is_cell_edge(line, i);
  return edges;
}

// The cells between the cell edges of a table line ("| a | `x\|y` |" -> "a", "`x\|y`"),
// each trimmed of the one space on each side, as written (a "\|" stays "\|").
inline std::vector<std::string> table_cells(const std::string& line) {
  std::vector<std::string> cells;
  size_t begin = std::string::npos;  // where the open cell starts; npos before the first edge
  for (size_t i = 0; i < line.size(); ++i) {
    if (!is_cell_edge(line, i)) continue;
    if (begin != std::string::npos) {
      std::string cell = line.substr(begin, i - begin);
      if (!cell.empty() && cell.front() == ' ') cell.erase(0, 1);
      if (!cell.empty() && cell.back() == ' ') cell.pop_back();
      cells.push_back(cell);
    }
    begin = i + 1;
  }
  return cells;
}

// The cells of the first line of `text` that starts with `start` ("| bf16 | 2 |");
// none, and a test failure, when there is none.
inline std::vector<std::string> table_row(const std::string& text, const std::string& start) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(start, 0) == 0) return table_cells(line);
  }
  ADD_FAILURE() << "no row " << start << " in\n" << text;
  return {};
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
