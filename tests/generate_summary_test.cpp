// The lines `kvscope generate` ends with: how the weights are held, and what
// eviction did under each memory strategy. Only compaction moves K/V; the other two
// say why nothing moved rather than print "compaction moved 0.00 MB" under a
// strategy that never compacts.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cache/trace.h"
#include "own_temp_dir.h"
#include "run_kvscope.h"

namespace kvscope {
namespace {

using test::ProgramRun;
using test::run_kvscope;
using test::tiny_model;

ProgramRun generate_with(const std::string& strategy) {
  return run_kvscope("generate --prompt hi -n 120 --temperature 0 --budget 64 --slack 16 --strategy " + strategy);
}

TEST(GenerateSummary, CompactionSaysHowMuchItMoved) {
  const ProgramRun r = generate_with("compact");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("\n  compaction moved "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("nothing moved"), std::string::npos) << r.output;
}

TEST(GenerateSummary, HolesAndReuseSayWhyNothingMoved) {
  const ProgramRun holes = generate_with("holes");
  ASSERT_EQ(holes.code, 0) << holes.output;
  EXPECT_NE(holes.output.find(", holes, budget 64 (+16 slack), "), std::string::npos) << holes.output;
  EXPECT_NE(holes.output.find("\n  nothing moved: under holes the survivors stay in their slots\n"), std::string::npos)
      << holes.output;
  EXPECT_EQ(holes.output.find("compaction moved"), std::string::npos) << holes.output;

  const ProgramRun reuse = generate_with("reuse");
  ASSERT_EQ(reuse.code, 0) << reuse.output;
  EXPECT_NE(reuse.output.find("\n  nothing moved: under reuse new tokens fill the holes\n"), std::string::npos)
      << reuse.output;
  EXPECT_EQ(reuse.output.find("compaction moved"), std::string::npos) << reuse.output;
}

// One new token is sampled from the prompt's pass, with no decode step: its speed was
// printed as "0.0 tokens/s".
TEST(GenerateSummary, OneNewTokenHasNoDecodeSpeed) {
  const ProgramRun one = run_kvscope("generate --prompt hi -n 1 --temperature 0");
  ASSERT_EQ(one.code, 0) << one.output;
  EXPECT_NE(one.output.find(" | decode: 1 token, no decode step to time\n"), std::string::npos) << one.output;
  const ProgramRun two = run_kvscope("generate --prompt hi -n 2 --temperature 0");
  ASSERT_EQ(two.code, 0) << two.output;
  const size_t at = two.output.find(" | decode: 2 tokens, ");
  ASSERT_NE(at, std::string::npos) << two.output;
  EXPECT_GT(std::atof(two.output.c_str() + at + 21), 0) << two.output;
}

// The pool holds the tokens the run feeds, prompt + n - 1 (the last new token is
// never fed), not one more: with blocks of one slot, as many blocks as tokens cached.
TEST(GenerateSummary, ThePoolHoldsTheTokensFedAndNoMore) {
  const std::string trace = test::own_temp_dir() + "pool.trace";
  const ProgramRun r = run_kvscope("generate --prompt hi -n 3 --temperature 0 --block-size 1 --trace " + trace);
  ASSERT_EQ(r.code, 0) << r.output;
  const size_t at = r.output.find("cache: no eviction, block size 1: ");
  ASSERT_NE(at, std::string::npos) << r.output;
  const int cached = std::atoi(r.output.c_str() + at + 34);
  EXPECT_NE(r.output.find(std::to_string(cached) + " tokens cached in " + std::to_string(cached) + " blocks"),
            std::string::npos) << r.output;
  EXPECT_EQ(read_trace(trace).header.num_blocks, cached);
  std::remove(trace.c_str());
}

// The line "weights: matrices ..., X MB" of a run with --weights FORMAT: the text
// before ", X MB", and X.
struct WeightsLine {
  std::string text;
  double mb = 0;
};

WeightsLine weights_line(const std::string& model_flag, const std::string& format) {
  const ProgramRun r = run_kvscope("generate " + model_flag + " --prompt hi -n 2 --weights " + format);
  EXPECT_EQ(r.code, 0) << r.output;
  const size_t start = r.output.find("\nweights: "), comma = r.output.rfind(", ", r.output.find(" MB\n", start));
  if (start == std::string::npos || comma == std::string::npos || comma < start) {
    ADD_FAILURE() << "no weights line in:\n" << r.output;
    return {};
  }
  return {r.output.substr(start + 1, comma - start - 1), std::atof(r.output.c_str() + comma + 2)};
}

TEST(GenerateSummary, SaysHowTheWeightsAreHeld) {
  // The bundled model is stored in BF16.
  const WeightsLine stored = weights_line("", "stored"), f32 = weights_line("", "f32"), bf16 = weights_line("", "bf16");
  EXPECT_EQ(stored.text, "weights: matrices in BF16 as stored");
  EXPECT_EQ(f32.text, "weights: matrices stored in BF16, held in F32 (--weights f32)");
  EXPECT_EQ(bf16.text, "weights: matrices in BF16 as stored (--weights bf16)");
  EXPECT_GT(stored.mb, 0);
  EXPECT_NEAR(f32.mb, 2 * stored.mb, 0.011);  // 4 bytes a weight against 2, each rounded to 0.01 MB
  EXPECT_EQ(bf16.mb, stored.mb);

  // F16 is widened to F32 even as stored; an F32 checkpoint can be rounded to BF16.
  const std::string f16_model = "--model " + tiny_model("tiny-f16");
  EXPECT_EQ(weights_line(f16_model, "stored").text, "weights: matrices stored in F16, held in F32");
  EXPECT_EQ(weights_line(f16_model, "bf16").text, "weights: matrices stored in F16, held in BF16 (--weights bf16)");
  const WeightsLine f32_as_stored = weights_line("--model " + tiny_model("tiny-untied"), "stored");
  const WeightsLine f32_rounded = weights_line("--model " + tiny_model("tiny-untied"), "bf16");
  EXPECT_EQ(f32_as_stored.text, "weights: matrices in F32 as stored");
  EXPECT_EQ(f32_rounded.text, "weights: matrices stored in F32, held in BF16 (--weights bf16)");
  EXPECT_NEAR(f32_rounded.mb, f32_as_stored.mb / 2, 0.006);
}

// The stop ids of generation_config.json stop a run as config.json's do (the
// README says generate reads both). Once only config.json's were read: a real
// Qwen3 model, whose generation_config.json lists <|im_end|> too, ran on past it.
TEST(GenerateSummary, GenerationConfigsStopIdsStopTheRun) {
  namespace fs = std::filesystem;
  const std::string dir = test::own_temp_dir() + "model";
  fs::remove_all(dir);
  fs::copy(tiny_model("tiny-untied"), dir);
  // The greedy run's own tokens, from its trace: the prompt's, then the new ones.
  const std::string trace = test::own_temp_dir() + "greedy.trace";
  const std::string run = "generate --model '" + dir + "' --prompt hello -n 8 --temperature 0";
  ASSERT_EQ(run_kvscope(run + " --trace " + trace).code, 0);
  const std::vector<int> ids = trace_token_ids(read_trace(trace).header, trace).at(0);
  const nlohmann::json gen = {{"eos_token_id", {378, ids.at(ids.size() - 8 + 2)}}};  // the third new token
  std::ofstream(dir + "/generation_config.json") << gen.dump();
  const ProgramRun r = run_kvscope(run);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("decode: 3 tokens, "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(stopped at end of sequence)"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace kvscope
