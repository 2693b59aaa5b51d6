// The README quotes tables that a tutorial's doc test keeps true; these tests keep
// the README's copy equal to the tutorial's.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "test_paths.h"
#include "util/file.h"

namespace kvscope {
namespace {

// The lines starting with '|' between `begin` and the next "<!-- /" marker.
std::vector<std::string> table_rows(const std::string& text, const std::string& begin) {
  const size_t from = text.find(begin);
  EXPECT_NE(from, std::string::npos) << "no " << begin;
  const size_t to = text.find("<!-- /", from);
  std::istringstream in(text.substr(from, to - from));
  std::vector<std::string> rows;
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] == '|') rows.push_back(line);
  return rows;
}

TEST(Readme, EvalTableIsTheOneTutorial6Quotes) {
  const std::string readme = read_file(test::source_path("README.md"));
  const std::string chapter = read_file(test::source_path("tutorials/06-scoring-without-scores/README.md"));
  const std::vector<std::string> rows = table_rows(readme, "<!-- eval-table");
  ASSERT_GE(rows.size(), 3u);
  for (const std::string& row : rows)
    EXPECT_NE(chapter.find("\n" + row + "\n"), std::string::npos) << "not in tutorial 6's quoted output: " << row;
}

}  // namespace
}  // namespace kvscope
