// Sampling and the generation loop.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "engine/generate.h"
#include "sample/sampler.h"
#include "test_paths.h"
#include "util/error.h"
#include "util/file.h"

namespace kvscope {
namespace {

std::vector<int> run(const Model& m, const std::vector<int>& prompt, GenerateOptions o, GenerateStats* stats = nullptr) {
  std::vector<int> out;
  GenerateStats s = generate(m, prompt, o, [&](int t) { out.push_back(t); });
  if (stats) *stats = s;
  return out;
}

TEST(Generate, GreedyReproducesThePyTorchContinuation) {
  // The fixture's decode_ids are PyTorch's own greedy tokens after the prompt.
  Model m = load_model(test::tiny_model("tiny-untied"));
  auto fixture = nlohmann::json::parse(read_file(test::source_path("tests/fixtures/tiny-untied.json")));
  ASSERT_FALSE(fixture["cases"].empty());
  for (const auto& c : fixture["cases"]) {
    GenerateOptions o;
    o.max_new_tokens = int(c["decode_ids"].size());
    o.sampler.temperature = 0;
    EXPECT_EQ(run(m, c["prompt_ids"].get<std::vector<int>>(), o), c["decode_ids"].get<std::vector<int>>());
  }
}

TEST(Generate, SameSeedSameText_OtherSeedOtherText) {
  Model m = load_model(test::tiny_model("tiny-tied"));
  GenerateOptions o;
  o.max_new_tokens = 24;
  o.sampler = {1.0f, 0, 1.0f, 7};
  const std::vector<int> prompt = {10, 20, 30};
  const auto a = run(m, prompt, o), b = run(m, prompt, o);
  EXPECT_EQ(a, b);
  o.sampler.seed = 8;
  EXPECT_NE(run(m, prompt, o), a);
}

TEST(Generate, StopsAtAStopIdAndCountsIt) {
  Model m = load_model(test::tiny_model("tiny-untied"));
  GenerateOptions o;
  o.max_new_tokens = 32;
  o.sampler.temperature = 0;
  const std::vector<int> prompt = {1, 2, 3, 4};
  const auto all = run(m, prompt, o);
  o.stop_ids = {all[3]};
  GenerateStats stats;
  const auto stopped = run(m, prompt, o, &stats);
  const size_t first = std::find(all.begin(), all.end(), all[3]) - all.begin();
  EXPECT_EQ(stopped, std::vector<int>(all.begin(), all.begin() + first + 1));
  EXPECT_TRUE(stats.stopped);
  EXPECT_EQ(stats.new_tokens, int(first) + 1);
  EXPECT_EQ(stats.prompt_tokens, 4);
}

TEST(Generate, VocabLimitIsRespected) {
  Model m = load_model(test::tiny_model("tiny-tied"));
  GenerateOptions o;
  o.max_new_tokens = 40;
  o.sampler = {2.0f, 0, 1.0f, 3};
  o.vocab_limit = 50;
  const std::vector<int> out = run(m, {5, 6}, o);
  ASSERT_EQ(out.size(), 40u);
  for (int t : out) EXPECT_LT(t, 50);
}

TEST(Generate, RefusesMoreTokensThanTheModelHasPositions) {
  Model m = load_model(test::tiny_model("tiny-tied"));  // max_position_embeddings 512
  GenerateOptions o;
  o.max_new_tokens = 600;
  EXPECT_THROW(run(m, {1}, o), Error);
  // The boundary, as the scheduler counts it: the last new token is sampled, never
  // fed, so 2 prompt + 511 new tokens take positions 0..511, and one more is refused.
  o.max_new_tokens = 511;
  o.sampler.temperature = 0;
  EXPECT_EQ(run(m, {1, 2}, o).size(), 511u);
  o.max_new_tokens = 512;
  EXPECT_THROW(run(m, {1, 2}, o), Error);
  // No new tokens: the prompt alone is too long, and the message says no more than that.
  o.max_new_tokens = 0;
  try {
    run(m, std::vector<int>(513, 1), o);
    ADD_FAILURE() << "a 513-token prompt ran on 512 positions";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "generate: 513 prompt + 0 new tokens need 513 positions, more than the model's "
                           "max_position_embeddings (512)");
  }
  o.max_new_tokens = 1;  // one new token, in the singular
  try {
    run(m, std::vector<int>(513, 1), o);
    ADD_FAILURE() << "a 513-token prompt ran on 512 positions";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "generate: 513 prompt + 1 new token need 513 positions (the last new token is never fed), "
                           "more than the model's max_position_embeddings (512)");
  }
  EXPECT_THROW(run(m, {}, GenerateOptions{}), Error);
}

TEST(Sampler, GreedyTopK1AndTinyTopPAllPickTheArgmax) {
  const std::vector<float> logits = {0.1f, 2.5f, -1.0f, 2.4f, 0.0f};
  EXPECT_EQ(Sampler({0.0f, 0, 1.0f, 1}).sample(logits.data(), 5), 1);
  Sampler k1({1.0f, 1, 1.0f, 1}), p0({1.0f, 0, 1e-6f, 2}), p_below_floats({1.0, 0, 1e-46, 3});
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(k1.sample(logits.data(), 5), 1);
    EXPECT_EQ(p0.sample(logits.data(), 5), 1);
    EXPECT_EQ(p_below_floats.sample(logits.data(), 5), 1);
  }
}

TEST(Sampler, DrawsFollowTheSoftmaxAtTheTemperature) {
  // softmax(logits / T): at T = 1, 0.090 0.245 0.665; at T = 0.5, 0.016 0.117 0.867
  // (sharper); at T = 2, 0.186 0.307 0.506 (flatter). Each probability within 0.01
  // over 20,000 draws (its standard error is at most 0.0035).
  const std::vector<float> logits = {0.0f, 1.0f, 2.0f};
  for (float t : {1.0f, 0.5f, 2.0f}) {
    Sampler s({t, 0, 1.0f, 123});
    std::map<int, int> counts;
    const int n = 20000;
    for (int i = 0; i < n; ++i) ++counts[s.sample(logits.data(), 3)];
    double z = 0;
    for (float l : logits) z += std::exp(double(l) / t);
    for (int id = 0; id < 3; ++id)
      EXPECT_NEAR(counts[id] / double(n), std::exp(double(logits[size_t(id)]) / t) / z, 0.01) << "T " << t << ", id " << id;
  }
}

TEST(Sampler, TopKAndTopPCutTheTail) {
  const std::vector<float> logits = {3.0f, 2.9f, 0.0f, -1.0f};
  Sampler k2({1.0f, 2, 1.0f, 5});
  // top_p = 0.9: the first two hold ~0.93 of the mass, so the rest never appear.
  Sampler p({1.0f, 0, 0.9f, 6});
  // Within the two kept, the draws follow their renormalised softmax: id 1 has
  // e^2.9 / (e^3 + e^2.9) = 0.475 (a sampler that fell back to the argmax passed
  // the old test). 2,000 draws: a standard error of 0.011, checked within 0.04.
  const int n = 2000;
  int second_k = 0, second_p = 0;
  for (int i = 0; i < n; ++i) {
    const int a = k2.sample(logits.data(), 4), b = p.sample(logits.data(), 4);
    ASSERT_LT(a, 2);
    ASSERT_LT(b, 2);
    second_k += a == 1, second_p += b == 1;
  }
  const double share = std::exp(2.9) / (std::exp(3.0) + std::exp(2.9));
  EXPECT_NEAR(second_k / double(n), share, 0.04);
  EXPECT_NEAR(second_p / double(n), share, 0.04);
}

// Ties: the lower id first, as PyTorch's argmax. Four equal logits at top_p 0.5: the
// first two reach exactly half the mass, so the nucleus is ids 0 and 1 (">" instead of
// ">=" would let id 2 in), drawn half and half (a draw scaled by all four's mass, not
// the kept two's, would give id 1 three quarters).
TEST(Sampler, TiesGoToTheLowerIdAndTheNucleusMayEndExactlyAtTopP) {
  EXPECT_EQ(argmax(std::vector<float>{1.0f, 3.0f, 3.0f}.data(), 3), 1);
  const std::vector<float> even = {0.0f, 0.0f, 0.0f, 0.0f};
  Sampler k1({1.0, 1, 1.0, 7}), half({1.0, 0, 0.5, 8});
  const int n = 2000;
  int second = 0;
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(k1.sample(even.data(), 4), 0);
    const int id = half.sample(even.data(), 4);
    ASSERT_LT(id, 2) << "outside the nucleus";
    second += id == 1;
  }
  EXPECT_NEAR(second / double(n), 0.5, 0.04);  // standard error 0.011
}

TEST(Sampler, RejectsBadSettings) {
  EXPECT_THROW(Sampler({-1.0f, 0, 1.0f, 0}), Error);
  EXPECT_THROW(Sampler({1.0f, -3, 1.0f, 0}), Error);
  EXPECT_THROW(Sampler({1.0f, 0, 0.0f, 0}), Error);
  EXPECT_THROW(Sampler({1.0f, 0, 1.5f, 0}), Error);
}

}  // namespace
}  // namespace kvscope
