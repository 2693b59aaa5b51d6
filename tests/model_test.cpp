// The C++ Qwen3 forward pass against the PyTorch transcription of Hugging Face's
// module (tests/reference/qwen3_reference.py). Fixtures: tests/fixtures/<model>.json,
// made by tests/reference/make_fixtures.py on the checkpoints in tests/models/.
//
// Each case: a prompt's logits at every position (one batched prefill), then 32
// one-token decode steps fed the reference's own greedy tokens (teacher forcing),
// each step's logits compared. Bound: max |C++ - PyTorch| <= 1e-4.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "model/qwen3.h"
#include "model/weights.h"
#include "test_paths.h"
#include "util/error.h"
#include "util/file.h"

namespace kvscope {
namespace {

constexpr float kTolerance = 1e-4f;

float max_abs_diff(const float* got, const nlohmann::json& want) {
  float worst = 0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i].get<float>()));
  return worst;
}

void check_against_fixture(const std::string& name, WeightFormat format) {
  Model model = load_model(test::tiny_model(name), format);
  auto fixture = nlohmann::json::parse(read_file(test::source_path("tests/fixtures/" + name + ".json")));
  ASSERT_FALSE(fixture["cases"].empty());
  const int vocab = model.config.vocab_size;

  for (const auto& c : fixture["cases"]) {
    std::vector<int> prompt = c["prompt_ids"].get<std::vector<int>>();
    std::vector<int> fed = c["decode_ids"].get<std::vector<int>>();
    ASSERT_EQ(c["prefill_logits"].size(), prompt.size());
    ASSERT_EQ(c["decode_logits"].size(), fed.size());
    ASSERT_EQ(fed.size(), 32u);

    KvCache cache(model.config, int(prompt.size() + fed.size()));
    RunState state;
    const float* logits = forward(model, cache, state, prompt.data(), int(prompt.size()), 0, /*all_logits=*/true);
    for (size_t t = 0; t < prompt.size(); ++t) {
      ASSERT_EQ(c["prefill_logits"][t].size(), size_t(vocab));
      EXPECT_LE(max_abs_diff(logits + t * vocab, c["prefill_logits"][t]), kTolerance)
          << name << ": prefill position " << t << " of a " << prompt.size() << "-token prompt";
    }
    int pos = int(prompt.size());
    for (size_t step = 0; step < fed.size(); ++step) {
      logits = forward(model, cache, state, &fed[step], 1, pos++);
      EXPECT_LE(max_abs_diff(logits, c["decode_logits"][step]), kTolerance) << name << ": decode step " << step;
    }
  }
}

TEST(ModelVsPyTorch, TiedF32) { check_against_fixture("tiny-tied", WeightFormat::AsStored); }
TEST(ModelVsPyTorch, UntiedF32) { check_against_fixture("tiny-untied", WeightFormat::AsStored); }
TEST(ModelVsPyTorch, TiedWithLmHeadInFile) { check_against_fixture("tiny-tied-with-head", WeightFormat::AsStored); }
TEST(ModelVsPyTorch, Bf16ShardedKeptInBf16) { check_against_fixture("tiny-bf16-sharded", WeightFormat::AsStored); }
TEST(ModelVsPyTorch, Bf16ShardedWidenedToF32) { check_against_fixture("tiny-bf16-sharded", WeightFormat::F32); }
TEST(ModelVsPyTorch, F16) { check_against_fixture("tiny-f16", WeightFormat::AsStored); }

TEST(Model, HeadDimIsReadFromConfigNotDerived) {
  Model m = load_model(test::tiny_model("tiny-tied"));
  EXPECT_NE(m.config.head_dim, m.config.hidden_size / m.config.num_heads);
  EXPECT_EQ(m.weights.layers[0].q_proj.rows, m.config.num_heads * m.config.head_dim);
}

TEST(Model, TiedHeadSharesTheEmbeddingBytes) {
  Model m = load_model(test::tiny_model("tiny-tied-with-head"));
  EXPECT_EQ(m.weights.lm_head.data, m.weights.embed.data);
  Model u = load_model(test::tiny_model("tiny-untied"));
  EXPECT_NE(u.weights.lm_head.data, u.weights.embed.data);
}

TEST(Model, F32AndBf16ViewsAreZeroCopy) {
  Model m = load_model(test::tiny_model("tiny-bf16-sharded"));
  EXPECT_EQ(m.weights.layers[0].q_proj.dtype, DType::BF16);
  EXPECT_TRUE(m.weights.owned_bf16.empty());
  Model f = load_model(test::tiny_model("tiny-f16"));  // F16 is widened
  EXPECT_EQ(f.weights.layers[0].q_proj.dtype, DType::F32);
}

TEST(Model, PrefillEqualsTokenByTokenDecode) {
  Model m = load_model(test::tiny_model("tiny-untied"));
  const std::vector<int> tokens = {5, 77, 300, 12, 9, 150, 42, 8};
  const int n = int(tokens.size()), vocab = m.config.vocab_size;
  KvCache batched(m.config, n), stepwise(m.config, n);
  RunState s1, s2;
  std::vector<float> all(forward(m, batched, s1, tokens.data(), n, 0, true),
                         forward(m, batched, s1, tokens.data(), n, 0, true) + size_t(n) * vocab);
  for (int t = 0; t < n; ++t) {
    const float* one = forward(m, stepwise, s2, &tokens[t], 1, t);
    for (int i = 0; i < vocab; ++i) ASSERT_NEAR(one[i], all[size_t(t) * vocab + i], 1e-4) << "token " << t;
  }
}

TEST(Model, ForwardRejectsBadTokensAndFullCache) {
  Model m = load_model(test::tiny_model("tiny-tied"));
  KvCache cache(m.config, 4);
  RunState s;
  int bad = m.config.vocab_size;
  EXPECT_THROW(forward(m, cache, s, &bad, 1, 0), Error);
  std::vector<int> five(5, 1);
  EXPECT_THROW(forward(m, cache, s, five.data(), 5, 0), Error);
}

}  // namespace
}  // namespace kvscope
