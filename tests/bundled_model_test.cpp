// The bundled model (assets/model) against the PyTorch module it was trained with.
// Fixture: tests/fixtures/bundled-model.json, made by assets/training/make_fixture.py
// from the committed weights (which also checks the Hugging Face transcription).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "cache/kv_cache.h"
#include "cache/kv_storage.h"
#include "model/qwen3.h"
#include "model/weights.h"
#include "test_paths.h"
#include "tokenizer/tokenizer.h"
#include "util/file.h"
#include "util/max_abs_diff.h"

namespace kvscope {
namespace {

const std::string kModel = test::source_path("assets/model");

nlohmann::json fixture() {
  return nlohmann::json::parse(read_file(test::source_path("tests/fixtures/bundled-model.json")));
}

// max |logits[columns[i]] - expected[i]|
double max_abs_diff(const float* logits, const std::vector<int>& columns, const nlohmann::json& expected) {
  std::vector<double> got, want;
  for (size_t i = 0; i < columns.size(); ++i) {
    got.push_back(logits[columns[i]]);
    want.push_back(expected[i].get<double>());
  }
  return kvscope::max_abs_diff(got, want);  // a NaN logit counts as infinitely far
}

TEST(BundledModel, TokenizerGivesTheIdsTheTrainingDataWasMadeWith) {
  const Tokenizer tokenizer = Tokenizer::load(kModel + "/tokenizer.json");
  const auto cases = fixture()["tokenizer_cases"];
  ASSERT_GE(cases.size(), 8u);
  for (const auto& c : cases) {
    const std::string text = c["text"];
    EXPECT_EQ(tokenizer.encode(text), c["ids"].get<std::vector<int>>()) << text;
    EXPECT_EQ(tokenizer.decode(c["ids"].get<std::vector<int>>()), c["nfc"].get<std::string>())
        << "decode(encode(text)) != NFC(text)";
  }
}

TEST(BundledModel, LogitsMatchTheTrainingScriptsPyTorchForward) {
  const Model model = load_model(kModel);   // bf16 as stored
  const auto f = fixture();
  const std::vector<int> columns = f["columns"];
  ASSERT_FALSE(columns.empty());
  const int vocab = model.config.vocab_size;
  const double kTolerance = 1e-4;
  for (const auto& c : f["cases"]) {
    const std::vector<int> prompt = c["prompt_ids"], fed = c["decode_ids"];
    ASSERT_EQ(fed.size(), 32u);
    const int n = int(prompt.size() + fed.size());
    PagedKvCache cache((n + 15) / 16, 16, MemoryStrategy::HolesOnly);
    KvStorage kv(model.config, cache.num_blocks(), 16);
    const int seq = cache.add_sequence();
    RunState state;
    ForwardOptions all;
    all.all_logits = true;
    const float* logits = forward(model, cache, kv, seq, state, prompt.data(), int(prompt.size()), all);
    for (size_t t = 0; t < prompt.size(); ++t)
      EXPECT_LE(max_abs_diff(logits + t * vocab, columns, c["prefill_logits"][t]), kTolerance) << "prefill " << t;
    std::vector<float> last(logits + (prompt.size() - 1) * vocab, logits + prompt.size() * vocab);
    for (size_t step = 0; step < fed.size(); ++step) {
      // Greedy decoding picks the same token as PyTorch (unless the top two are within 1e-3).
      std::vector<float> sorted = last;
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
      if (sorted[0] - sorted[1] > 1e-3f) {
        EXPECT_EQ(int(std::max_element(last.begin(), last.end()) - last.begin()), fed[step]) << "step " << step;
      }
      logits = forward(model, cache, kv, seq, state, &fed[step], 1);
      EXPECT_LE(max_abs_diff(logits, columns, c["decode_logits"][step]), kTolerance) << "decode step " << step;
      last.assign(logits, logits + vocab);
    }
  }
}

}  // namespace
}  // namespace kvscope
