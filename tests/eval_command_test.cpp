// What `kvscope eval` prints and writes (core/cli/eval_command.cpp): the --json file
// holds the table's numbers under their names, and the notes under the table appear
// when, and only when, they apply. The measurements themselves are eval_test.cpp's.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "markdown_table.h"
#include "run_kvscope.h"
#include "test_paths.h"
#include "util/file.h"
#include "util/format.h"

namespace kvscope {
namespace {

// `kvscope eval ARGS` on the tiny checkpoint: one window of 64 tokens, 2 to continue.
test::ProgramRun run_eval(const std::string& args) {
  return test::run_shell(test::binary_path("kvscope") + " eval --model '" + test::tiny_model("tiny-tied") +
                         "' --windows 1 --context 64 --continuation 2 --keep 0.5 --recent 8 " + args + " 2>/dev/null");
}

// The numbers `eval --json` writes are the ones its table prints, each under its own
// name (nothing read the file back: the holes-only and compacted columns, or the
// context and the continuation, could have traded places), and the run says it wrote it.
TEST(EvalCommand, TheJsonHoldsTheTablesNumbersUnderTheirNames) {
  const std::string json = test::binary_path("eval_json_" + std::to_string(::getpid()) + ".json");
  const test::ProgramRun r = run_eval("--policies h2o --json " + json);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("\nwrote " + json + "\n"), std::string::npos) << r.output;
  const nlohmann::json j = nlohmann::json::parse(read_file(json));
  std::remove(json.c_str());
  EXPECT_EQ(j["windows"], 1);
  EXPECT_EQ(j["context"], 64);
  EXPECT_EQ(j["continuation"], 2);
  EXPECT_EQ(j["block_size"], 16);
  EXPECT_EQ(j["slack"], 16);
  EXPECT_EQ(j["sinks"], 4);
  EXPECT_EQ(j["recent"], 8);
  ASSERT_EQ(j["rows"].size(), 2u);
  const nlohmann::json& h2o = j["rows"][1];
  EXPECT_EQ(h2o["policy"], "h2o");
  EXPECT_EQ(h2o["keep"], 0.5);
  EXPECT_EQ(h2o["budget"], 32);
  // | policy | kept | perplexity | vs full | top-1 | greedy | holes only | compacted |
  const std::vector<std::string> cells = test::table_row(r.output, "| h2o | ");
  ASSERT_EQ(cells.size(), 8u) << r.output;
  EXPECT_EQ(cells[1], "50.0% (32)");
  EXPECT_EQ(cells[2], fmt("%.3f", h2o["perplexity"].get<double>()));
  EXPECT_EQ(cells[4], percent(h2o["top1_agreement"].get<double>()));
  EXPECT_EQ(cells[5], percent(h2o["greedy_match"].get<double>()));
  EXPECT_EQ(cells[6], percent(h2o["blocks_freed_holes"].get<double>()));
  EXPECT_EQ(cells[7], percent(h2o["blocks_freed_compact"].get<double>()));
  // The columns differ here (H2O's survivors are scattered), so a swap would show.
  EXPECT_NE(cells[6], cells[7]);
}

// "--windows N asked for more" is said only when the text holds fewer than N
// windows: asking for exactly as many as were found gets no note.
TEST(EvalCommand, WindowsAsManyAsFoundGetNoNote) {
  const test::ProgramRun r = run_eval("--policies streaming");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("\n1 window of 64 tokens, "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("asked for more"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace kvscope
