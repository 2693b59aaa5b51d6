// The README quotes tables that a tutorial's doc test keeps true; these tests keep
// the README's copy equal to the tutorial's, and every test the docs cite real.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <set>
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

// The docs say "checked by BadInput.PromptThatIsNotUtf8" (or "BrokenCheckpoint.*" for
// a suite): each such name must be a test of this binary, so a renamed or deleted
// test cannot leave a claim that nothing checks. Parameterised tests count by their
// base names ("Strategies/SoakTest" is SoakTest; "Law.X/1" is Law.X). The app's
// ctests (`viz_...`) must be declared in viz/CMakeLists.txt.
TEST(Readme, EveryTestTheDocsCiteExists) {
  std::set<std::string> suites, tests;
  const ::testing::UnitTest& all = *::testing::UnitTest::GetInstance();
  for (int i = 0; i < all.total_test_suite_count(); ++i) {
    const ::testing::TestSuite& s = *all.GetTestSuite(i);
    const std::string suite = std::string(s.name()).substr(std::string(s.name()).rfind('/') + 1);
    suites.insert(suite);
    for (int j = 0; j < s.total_test_count(); ++j) {
      const std::string name = s.GetTestInfo(j)->name();
      tests.insert(suite + "." + name.substr(0, name.find('/')));
    }
  }
  std::vector<std::string> docs = {"README.md", "viz/README.md", "tutorials/README.md", "assets/model/README.md"};
  for (const auto& entry : std::filesystem::directory_iterator(test::source_path("tutorials")))
    if (std::filesystem::exists(entry.path() / "README.md"))
      docs.push_back("tutorials/" + entry.path().filename().string() + "/README.md");
  const std::regex cited("`([A-Z][A-Za-z0-9]*)\\.([A-Z][A-Za-z0-9_]*|\\*)`");  // `Suite.Name` or `Suite.*`
  const std::regex cited_ctest("`(viz_[a-z_]+)`");
  const std::string viz_cmake = read_file(test::source_path("viz/CMakeLists.txt"));
  int count = 0;
  for (const std::string& doc : docs) {
    const std::string text = read_file(test::source_path(doc));
    for (std::sregex_iterator m(text.begin(), text.end(), cited_ctest), end; m != end; ++m, ++count)
      EXPECT_TRUE(std::regex_search(viz_cmake, std::regex("add_test\\(NAME " + (*m)[1].str() + "\\s")))
          << doc << " cites " << m->str() << ": no such test in viz/CMakeLists.txt";
    for (std::sregex_iterator m(text.begin(), text.end(), cited), end; m != end; ++m, ++count) {
      const std::string suite = (*m)[1], name = (*m)[2];
      if (name == "*")
        EXPECT_TRUE(suites.count(suite)) << doc << " cites " << m->str() << ": no such test suite";
      else
        EXPECT_TRUE(tests.count(suite + "." + name)) << doc << " cites " << m->str() << ": no such test";
    }
  }
  EXPECT_GE(count, 30) << "the pattern no longer finds the citations (the README alone has over 30)";
}

}  // namespace
}  // namespace kvscope
