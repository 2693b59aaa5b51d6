// The README quotes tables that a tutorial's doc test keeps true; these tests keep
// the README's copy equal to the tutorial's, the commands it quotes printing what
// it shows, and every test the docs cite real.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "documents.h"
#include "markdown_table.h"
#include "run_kvscope.h"
#include "test_paths.h"
#include "util/file.h"
#include "util/format.h"

namespace kvscope {
namespace {

// The Markdown documents a reader opens (tutorials/documents.h: the doc test's list too).
std::vector<std::string> documents() { return docs::documents(test::source_path("")); }

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

// Each benchmark block of the README's "Benchmarks" is a run kept in a record file
// (the command, the machine, the date, the load, and the output indented by 4): every
// line of the block, in the record's output (in its "## The run the README quotes",
// where it has more than one), and the README dates it as the record does. So a number
// in the block has a record, and a new run means a new record.
TEST(Readme, EachBenchmarkBlockIsItsRecordsOutput) {
  const std::string readme = read_file(test::source_path("README.md"));
  const std::pair<const char*, const char*> records[] = {
      {"kvscope bench decode:", "assets/benchmarks/bench-decode.md"},
      {"kvscope bench attention:", "tutorials/05-the-scores-flashattention-never-keeps/bench-attention.md"},
      {"kvscope bench compaction:", "assets/benchmarks/bench-compaction.md"},
  };
  for (const auto& [head, path] : records) {
    std::string record = read_file(test::source_path(path));
    const size_t recorded = record.find("\n- recorded: ");
    ASSERT_NE(recorded, std::string::npos) << path << " says not when it was recorded";
    const std::string date = record.substr(recorded + 13, 10);  // "2026-12-07"
    const size_t quoted = record.find("\n## The run the README quotes\n");
    if (quoted != std::string::npos) record = record.substr(quoted, record.find("\n## ", quoted + 1) - quoted);
    const size_t from = readme.find(std::string("```\n") + head);
    ASSERT_NE(from, std::string::npos) << "README.md quotes no " << head << " output";
    const size_t paragraph = readme.rfind("\n\n**", from);  // the bold words that introduce the block
    ASSERT_NE(paragraph, std::string::npos);
    EXPECT_NE(readme.substr(paragraph, from - paragraph).find(date), std::string::npos)
        << "README.md's " << head << " block is not dated " << date << ", as " << path << " is";
    const size_t to = readme.find("\n```", from + 4);
    ASSERT_NE(to, std::string::npos);
    std::istringstream block(readme.substr(from + 4, to - from - 4));
    std::string indented;  // the README's block as the record indents it
    for (std::string line; std::getline(block, line);) indented += line.empty() ? "\n" : "    " + line + "\n";
    EXPECT_GE(indented.size(), 500u) << head;
    EXPECT_NE(record.find("\n" + indented), std::string::npos)
        << "README.md's " << head << " block differs from " << path << "'s output:\n" << indented;
  }
}

// A command the README quotes, `$ build/kvscope ...` on the first line of a fenced
// block, and the lines after it: what the command prints.
struct QuotedCommand {
  std::string command;
  std::vector<std::string> output;
};

std::vector<QuotedCommand> quoted_commands(const std::string& text) {
  std::vector<QuotedCommand> quoted;
  std::istringstream in(text);
  bool in_block = false, first_line = false, quoting = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("```", 0) == 0) {
      in_block = !in_block;
      first_line = in_block;
      quoting = false;
      continue;
    }
    if (first_line && line.rfind("$ build/kvscope ", 0) == 0) {
      quoted.push_back({line.substr(2), {}});
      quoting = true;
    } else if (quoting) {
      quoted.back().output.push_back(line);
    }
    first_line = false;
  }
  return quoted;
}

// `line` with every speed ("3100.0 tokens/s") written as "N tokens/s": a timing,
// which no rerun repeats.
std::string without_speeds(const std::string& line) {
  const std::string unit = " tokens/s";
  std::string out;
  size_t from = 0;  // line[from, ...) is not yet in out
  for (size_t at = line.find(unit); at != std::string::npos; at = line.find(unit, at + 1)) {
    size_t number = at;
    while (number > from && (std::isdigit(static_cast<unsigned char>(line[number - 1])) || line[number - 1] == '.'))
      --number;
    out += line.substr(from, number - from) + "N";
    from = at;
  }
  return out + line.substr(from);
}

// Each `$ build/kvscope ...` block of the README, rerun from the repository root:
// the lines it prints must be the lines quoted, speeds aside.
TEST(Readme, QuotedCommandsPrintWhatTheReadmeShows) {
  const std::vector<QuotedCommand> quoted = quoted_commands(read_file(test::source_path("README.md")));
  ASSERT_GE(quoted.size(), 2u) << "the README quotes a sample of the bundled model and a summary of eviction";
  for (const QuotedCommand& q : quoted) {
    const std::string command = test::binary_path("kvscope") + q.command.substr(std::string("build/kvscope").size());
    const test::ProgramRun r = test::run_shell("cd '" + test::source_path("") + "' && " + command);
    ASSERT_EQ(r.code, 0) << q.command << "\n" << r.output;
    std::vector<std::string> printed;
    std::istringstream lines(r.output);
    for (std::string line; std::getline(lines, line);) printed.push_back(without_speeds(line));
    std::vector<std::string> expected;
    for (const std::string& line : q.output) expected.push_back(without_speeds(line));
    EXPECT_EQ(printed, expected) << "$ " << q.command << "\nprints:\n" << r.output;
  }
}

// The README says how many ways break_kernels.py breaks the CUDA code: one per
// entry of its BREAKAGES, each a line that starts with '    ("kernels/'.
TEST(Readme, BreakKernelsCountIsTheScripts) {
  std::string readme = read_file(test::source_path("README.md"));
  std::replace(readme.begin(), readme.end(), '\n', ' ');  // the prose wraps anywhere
  const std::string script = read_file(test::source_path("tests/cuda_on_cpu/break_kernels.py"));
  int breakages = 0;
  for (size_t at = script.find("\n    (\"kernels/"); at != std::string::npos;
       at = script.find("\n    (\"kernels/", at + 1))
    ++breakages;
  EXPECT_GE(breakages, 30);
  const std::string claim = "breaks the CUDA code in " + std::to_string(breakages) + " such ways";
  EXPECT_NE(readme.find(claim), std::string::npos) << "README.md does not say: " << claim;
}

// "Where things are" lists every folder of the source: a newcomer looks there first.
TEST(Readme, WhereThingsAreNamesEveryFolder) {
  const std::string readme = read_file(test::source_path("README.md"));
  const size_t heading = readme.find("## Where things are");
  ASSERT_NE(heading, std::string::npos);
  const size_t open = readme.find("```\n", heading), close = readme.find("```\n", open + 4);
  ASSERT_NE(close, std::string::npos);
  const std::string listing = readme.substr(open, close - open);
  int folders = 0;
  for (const std::string top : {"core", "kernels", "viz", "tutorials", "tests", "assets"}) {
    const std::string line_start = std::string("\n").append(top).append("/");  // "\ncore/"
    EXPECT_NE(listing.find(line_start), std::string::npos) << top << "/ is not in the listing";
    if (top == "tutorials") continue;  // the chapters have a table of their own
    for (const auto& entry : std::filesystem::directory_iterator(test::source_path(top))) {
      if (!entry.is_directory()) continue;
      const std::string name = entry.path().filename().string();
      ++folders;
      // core/ and assets/ list each folder on a line of its own; tests/ names them in its line.
      const std::string shown = top == "tests" ? std::string(" ").append(name).append("/") : line_start + name + "/";
      EXPECT_NE(listing.find(shown), std::string::npos) << top << "/" << name << "/ is not in the listing";
    }
  }
  EXPECT_GE(folders, 15);
}

// Every chapter (tutorials/NN-name/, titled "# N · Title") is listed by its title in
// the README's list and in the tutorials' table, and the status box counts them.
TEST(Readme, EveryTutorialChapterIsListed) {
  const std::string readme = read_file(test::source_path("README.md"));
  const std::string index = read_file(test::source_path("tutorials/README.md"));
  std::set<std::string> chapters;  // sorted by their number
  for (const auto& entry : std::filesystem::directory_iterator(test::source_path("tutorials"))) {
    const std::string name = entry.path().filename().string();  // a chapter is NN-name/ (tutorials/CMakeLists.txt)
    const bool numbered = name.size() > 3 && std::isdigit(static_cast<unsigned char>(name[0])) &&
                          std::isdigit(static_cast<unsigned char>(name[1])) && name[2] == '-';
    if (numbered && std::filesystem::exists(entry.path() / "main.cpp")) chapters.insert(name);
  }
  ASSERT_GE(chapters.size(), 8u);
  for (const std::string& chapter : chapters) {
    const std::string text = read_file(test::source_path("tutorials/" + chapter + "/README.md"));
    const std::string number = std::to_string(std::stoi(chapter.substr(0, 2)));
    const std::string heading = "# " + number + " \u00b7 ";  // "# 3 · "
    ASSERT_EQ(text.rfind(heading, 0), 0u) << chapter << " does not begin with '" << heading << "'";
    const std::string title = text.substr(heading.size(), text.find('\n') - heading.size());
    EXPECT_NE(readme.find(number + ". [" + title + "](tutorials/" + chapter + "/README.md)"), std::string::npos)
        << "README.md does not list " << chapter << " as " << title;
    EXPECT_NE(index.find("| " + number + " | [" + title + "](" + chapter + "/README.md) |"), std::string::npos)
        << "tutorials/README.md does not list " << chapter << " as " << title;
  }
  EXPECT_NE(readme.find("tutorials 1-" + std::to_string(chapters.size()) + ","), std::string::npos)
      << "the status box does not count " << chapters.size() << " tutorials";
}

// The prose of "Benchmarks" reads its numbers off the tables it sits under: a new
// record must bring new prose.
TEST(Readme, BenchmarkProseQuotesItsTables) {
  std::string readme = read_file(test::source_path("README.md"));
  const auto cell = [&](const std::string& row, size_t column) { return test::table_row(readme, row).at(column); };
  const auto ratio = [&](const std::string& a, const std::string& b, size_t column) {
    return std::stod(cell(a, column)) / std::stod(cell(b, column));
  };
  // bench decode: decode / limit (column 6) and prefill tokens/s (column 2).
  const std::string decode = "one thread at " + cell("| bf16 | 1 |", 6) + " (bf16) and " + cell("| f32 | 1 |", 6) +
                             " (f32) of it";
  const std::string two = "at 2 threads " + cell("| f32 | 2 |", 6) + " of it with f32 weights and " +
                          cell("| bf16 | 2 |", 6) + " of the (twice higher) bf16 limit";
  const std::string prefill = "two threads run it " + fmt("%.1f", ratio("| bf16 | 2 |", "| bf16 | 1 |", 2)) +
                              "x (bf16) and " + fmt("%.1f", ratio("| f32 | 2 |", "| f32 | 1 |", 2)) + "x (f32)";
  // bench attention: eager / flash (column 4), eager's extra memory (column 6) and the
  // flash path's (column 5), its most in any row.
  double flash_memory = 0;
  for (const char* context : {"1024", "4096", "16384"})
    for (const char* queries : {"1", "256"})
      flash_memory = std::max(flash_memory, std::stod(cell("| " + std::string(context) + " | " + queries + " |", 5)));
  const std::string attention = "at 16K tokens and 256 queries eager takes " + cell("| 16384 | 256 |", 4) +
                                " flash's time and holds " + cell("| 16384 | 256 |", 6) + ", where flash holds " +
                                fmt("%.1f", flash_memory) + " MB or less in every row";
  std::replace(readme.begin(), readme.end(), '\n', ' ');  // the prose wraps anywhere
  for (const std::string& s : {decode, two, prefill, attention})
    EXPECT_NE(readme.find(s), std::string::npos) << "README: " << s;
}

// The text of every `code span`: from each backtick to the next, the spans `accept`
// takes (a span it refuses may hold the opening backtick of the next one, as in
// "``` `Suite.Name`": the search goes on from the backtick after it).
std::vector<std::string> code_spans(const std::string& text, bool (*accept)(const std::string&)) {
  std::vector<std::string> spans;
  for (size_t open = text.find('`'); open != std::string::npos;) {
    const size_t close = text.find('`', open + 1);
    if (close == std::string::npos) break;
    const std::string span = text.substr(open + 1, close - open - 1);
    const bool taken = accept(span);
    if (taken) spans.push_back(span);
    open = text.find('`', taken ? close + 1 : open + 1);
  }
  return spans;
}

// An upper-case letter, then letters and digits (and '_' when `underscore`).
bool is_name(const std::string& s, bool underscore) {
  if (s.empty() || !std::isupper(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && !(underscore && c == '_')) return false;
  return true;
}

// "Suite.Name" or "Suite.*".
bool is_test_citation(const std::string& s) {
  const size_t dot = s.find('.');
  if (dot == std::string::npos) return false;
  const std::string name = s.substr(dot + 1);
  return is_name(s.substr(0, dot), false) && (name == "*" || is_name(name, true));
}

// "viz_" and lower-case letters and '_': an app ctest.
bool is_viz_ctest(const std::string& s) {
  if (s.rfind("viz_", 0) != 0 || s.size() == 4) return false;
  for (char c : s.substr(4))
    if (!std::islower(static_cast<unsigned char>(c)) && c != '_') return false;
  return true;
}

// "add_test(NAME viz_x", or "viz_verify_test(viz_x" (a --verify screenshot, declared by
// that CMake function), then a space or a newline, somewhere in the CMake text.
bool declares_test(const std::string& cmake, const std::string& name) {
  for (const std::string& head : {"add_test(NAME " + name, "viz_verify_test(" + name})
    for (size_t at = cmake.find(head); at != std::string::npos; at = cmake.find(head, at + 1))
      if (at + head.size() < cmake.size() && std::isspace(static_cast<unsigned char>(cmake[at + head.size()])))
        return true;
  return false;
}

// Built without CUDA, a GPU suite holds only BuiltWithoutCuda (tests/gpu_*_test.cpp):
// whether it has `name` is then read from those sources, TEST(suite, name).
bool declared_in_gpu_sources(const std::string& suite, const std::string& name) {
  for (const auto& entry : std::filesystem::directory_iterator(test::source_path("tests"))) {
    const std::string file = entry.path().filename().string();
    if (file.rfind("gpu_", 0) == 0 && entry.path().extension() == ".cpp" &&
        read_file(entry.path().string()).find("TEST(" + suite + ", " + name + ")") != std::string::npos)
      return true;
  }
  return false;
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
  const std::string viz_cmake = read_file(test::source_path("viz/CMakeLists.txt"));
  int count = 0;
  for (const std::string& doc : documents()) {
    const std::string text = read_file(test::source_path(doc));
    for (const std::string& ctest : code_spans(text, is_viz_ctest)) {
      ++count;
      EXPECT_TRUE(declares_test(viz_cmake, ctest)) << doc << " cites `" << ctest << "`: no such test in viz/CMakeLists.txt";
    }
    for (const std::string& cited : code_spans(text, is_test_citation)) {
      ++count;
      const std::string suite = cited.substr(0, cited.find('.')), name = cited.substr(cited.find('.') + 1);
      if (name == "*")
        EXPECT_TRUE(suites.count(suite)) << doc << " cites `" << cited << "`: no such test suite";
      else
        EXPECT_TRUE(tests.count(cited) ||
                    (tests.count(suite + ".BuiltWithoutCuda") && declared_in_gpu_sources(suite, name)))
            << doc << " cites `" << cited << "`: no such test";
    }
  }
  EXPECT_GE(count, 30) << "the pattern no longer finds the citations (the README alone has over 30)";
}

// The one list of pages: every .md a reader opens, the checker's stale fixture aside;
// the doc test runs a chapter's page alone and checks the rest with --other-pages.
TEST(Docs, TheDocumentsAreEveryPageButTheCheckersFixture) {
  const std::vector<std::string> docs = documents();
  const auto listed = [&](const std::string& doc) { return std::count(docs.begin(), docs.end(), doc) == 1; };
  EXPECT_EQ(docs.front(), "README.md");
  EXPECT_TRUE(listed("viz/README.md"));
  EXPECT_TRUE(listed("assets/model/README.md"));
  EXPECT_TRUE(listed("tutorials/05-the-scores-flashattention-never-keeps/bench-attention.md"));
  EXPECT_FALSE(listed("tutorials/doc_check_fixtures/stale.md"));
  EXPECT_TRUE(docs::is_chapter_page("tutorials/README.md"));
  EXPECT_TRUE(docs::is_chapter_page("tutorials/03-evict-87-reclaim-12/README.md"));
  EXPECT_FALSE(docs::is_chapter_page("tutorials/05-the-scores-flashattention-never-keeps/bench-attention.md"));
  EXPECT_FALSE(docs::is_chapter_page("viz/README.md"));
  EXPECT_FALSE(docs::is_chapter_page("README.md"));
  // Exactly two digits and a dash, as tutorials/CMakeLists.txt globs a chapter ([0-9][0-9]-*):
  // a folder the glob misses must not be left out of --other-pages too.
  EXPECT_FALSE(docs::is_chapter_page("tutorials/3a-notes/README.md"));
  EXPECT_FALSE(docs::is_chapter_page("tutorials/100-notes/README.md"));
}

// A row splits where GitHub splits it: at every '|' but "\|", which stays in its cell.
TEST(MarkdownTable, ARowSplitsOnlyAtItsCellEdges) {
  const std::string table = "| token | id |\n|---|---|\n| `<\\|endoftext\\|>` | 151643 |\n";
  EXPECT_EQ(test::table_row(table, "| token"), (std::vector<std::string>{"token", "id"}));
  EXPECT_EQ(test::table_row(table, "| `<"), (std::vector<std::string>{"`<\\|endoftext\\|>`", "151643"}));
  EXPECT_EQ(test::cell_edges("| `<\\|endoftext\\|>` | 151643 |"), 3);
  EXPECT_EQ(test::table_cells("| a || c |"), (std::vector<std::string>{"a", "", "c"}));
}

// Every table in the documents renders: GitHub drops a line's cells past its header's
// count, so a '|' inside a cell must be written "\|". Fenced blocks are quoted
// program output, shown as text.
TEST(Docs, EveryTableHasItsHeadersCells) {
  int tables = 0;
  for (const std::string& doc : documents()) {
    SCOPED_TRACE(doc);
    std::istringstream in(read_file(test::source_path(doc)));
    std::string prose;
    bool fenced = false;
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("```", 0) == 0) fenced = !fenced;
      prose += fenced ? "\n" : line + "\n";
    }
    tables += test::expect_markdown_tables(prose);
  }
  EXPECT_GE(tables, 8) << "README.md alone has 4 tables outside its fenced blocks";
}

}  // namespace
}  // namespace kvscope
