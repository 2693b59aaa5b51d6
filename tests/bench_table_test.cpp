// The benchmark tables' shape (not their timings, which belong to the tables):
// which rows a command prints for the options given.
#include <gtest/gtest.h>

#include <cctype>
#include <string>
#include <vector>

#include "markdown_table.h"
#include "run_kvscope.h"
#include "test_paths.h"

namespace kvscope {
namespace {

// The table rows of `output`: its lines that start with "| " and a digit.
int rows(const std::string& output) {
  int n = 0;
  for (size_t at = output.find("\n| "); at != std::string::npos; at = output.find("\n| ", at + 1))
    n += at + 3 < output.size() && std::isdigit(static_cast<unsigned char>(output[at + 3]));
  return n;
}

// A decode row (1 query) and a chunk row per context; once, with one query (or a
// context of one token), the chunk row was the decode row again.
TEST(BenchAttention, OneRowPerQueryCountAndContext) {
  const test::ProgramRun two = test::run_kvscope("bench attention --contexts 16,32 --queries 8 --repeats 1");
  ASSERT_EQ(two.code, 0) << two.output;
  EXPECT_EQ(rows(two.output), 4) << two.output;
  const test::ProgramRun one = test::run_kvscope("bench attention --contexts 1,16 --queries 1 --repeats 1");
  ASSERT_EQ(one.code, 0) << one.output;
  EXPECT_EQ(rows(one.output), 2) << one.output;
}

// The row's columns up to its first timing: block size, evicted, moves, bytes.
std::string plan_cells(const std::string& output) {
  const size_t row = output.find("\n| 16 | 50.0% | ");
  if (row == std::string::npos) return "";
  size_t end = row + 1;
  for (int bar = 0; bar < 4 && end != std::string::npos; ++bar) end = output.find('|', end + 1);
  return end == std::string::npos ? "" : output.substr(row + 1, end - row);
}

// Every run of a row times one plan: the best time and the bytes it is divided
// into are the same eviction's. (Each run once drew its own: 125 moves for one run,
// 124 for two, and the row divided the last run's bytes by the fastest run's time.)
TEST(BenchCompaction, EveryRunOfARowCompactsTheSamePlan) {
  std::string first;
  for (int repeats : {1, 2, 3}) {
    const test::ProgramRun r = test::run_kvscope("bench compaction --tokens 256 --evict 0.5 --repeats " +
                                                 std::to_string(repeats) + " 2>/dev/null");
    ASSERT_EQ(r.code, 0) << r.output;
    const std::string cells = plan_cells(r.output);
    ASSERT_NE(cells, "") << r.output;
    if (first.empty()) first = cells;
    EXPECT_EQ(cells, first) << repeats << " runs";
  }
}

// A cell that holds '|' (as "max |flash - eager|" once did) splits in two.
TEST(BenchTables, EveryTableIsMarkdown) {
  const std::string config = test::tiny_model("tiny-untied") + "/config.json";
  const std::vector<std::string> commands = {
      "bench attention --contexts 16 --queries 4 --repeats 1",
      "bench compaction --tokens 64 --repeats 1",
      "bench decode --prompt-tokens 8 --decode-tokens 2 --threads 1 --bandwidth-gib 0.01 --config " + config};
  for (const std::string& args : commands) {
    SCOPED_TRACE(args);
    const test::ProgramRun r = test::run_kvscope(args);
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_GT(test::expect_markdown_tables(r.output), 0) << r.output;
  }
}

}  // namespace
}  // namespace kvscope
