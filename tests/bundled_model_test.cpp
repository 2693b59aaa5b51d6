// The bundled model (assets/model) against the PyTorch module it was trained with.
// Fixture: tests/fixtures/bundled-model.json, made by assets/training/make_fixture.py
// from the committed weights (which also checks the Hugging Face transcription).
// And the model card's numbers against the files they describe.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cache/kv_cache.h"
#include "cache/kv_storage.h"
#include "markdown_table.h"
#include "model/config.h"
#include "model/qwen3.h"
#include "model/weights.h"
#include "test_paths.h"
#include "tokenizer/tokenizer.h"
#include "util/file.h"
#include "util/format.h"
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
  ASSERT_FALSE(f["cases"].empty());
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

// The card (assets/model/README.md) and the README's summary of it quote what the
// files hold: the shape from config.json, the tokenizer's sizes, the weights' bytes,
// and the training run as train.py recorded it in training.json. A model trained
// again, or a card edited by hand, cannot leave a stale number behind.
TEST(BundledModel, CardSaysWhatItsFilesHold) {
  const std::string card = read_file(kModel + "/README.md");
  const std::string readme = read_file(test::source_path("README.md"));
  const ModelConfig c = load_config(kModel);
  const auto tokenizer = nlohmann::json::parse(read_file(kModel + "/tokenizer.json"));
  const auto training = nlohmann::json::parse(read_file(kModel + "/training.json"));
  const auto args = training["args"];
  const auto in_card = [&](const std::string& s) { EXPECT_NE(card.find(s), std::string::npos) << "card: " << s; };
  const auto in_readme = [&](const std::string& s) { EXPECT_NE(readme.find(s), std::string::npos) << "README: " << s; };

  ASSERT_TRUE(c.tie_word_embeddings);
  in_card("| Architecture | Qwen3ForCausalLM: " + std::to_string(c.num_layers) + " layers, hidden " +
          std::to_string(c.hidden_size) + ", " + std::to_string(c.num_heads) + " query heads and " +
          std::to_string(c.num_kv_heads) + " KV heads of dim " + std::to_string(c.head_dim) + " (GQA), SwiGLU " +
          std::to_string(c.intermediate_size) + ", RMSNorm with per-head q/k norm, RoPE theta " +
          commas(int64_t(c.rope_theta)) + ", tied embeddings |");
  EXPECT_EQ(training["parameters"].get<int64_t>(), c.parameter_count());
  in_card("| Parameters | " + commas(c.parameter_count()) + " |");
  const int64_t pieces = int64_t(tokenizer["model"]["vocab"].size()), merges = int64_t(tokenizer["model"]["merges"].size());
  ASSERT_EQ(tokenizer["added_tokens"].size(), 1u);
  EXPECT_EQ(pieces + 1, c.vocab_size);
  const std::string added = tokenizer["added_tokens"][0]["content"];
  in_card("| Vocabulary | " + commas(c.vocab_size) + ": byte-level BPE (" + commas(pieces) + " tokens, " +
          commas(merges) + " merges) + `" + test::table_cell(added) + "`");
  in_card("trained on windows of " + std::to_string(args["seq"].get<int>()) + " tokens, then " +
          commas(args["long_seq"].get<int>()) + " for the last " + percent(1 - args["long_from"].get<double>(), 0) +
          " of the steps; `max_position_embeddings` " + commas(c.max_position_embeddings) + " |");
  const double megabytes = double(std::filesystem::file_size(kModel + "/model.safetensors")) / 1e6;
  in_card("| Weights | `model.safetensors`, bf16 (" + fmt("%.1f", megabytes) + " MB) |");
  const int steps = args["steps"], tokens = args["tokens"];
  in_card("| Training | " + commas(int64_t(steps) * tokens) + " tokens seen (" + commas(steps) + " steps of " +
          commas(tokens) + "), AdamW, " + fmt("%.1f", training["minutes"].get<double>()) + " min on " +
          std::to_string(args["threads"].get<int>()) + " CPU cores |");
  in_card("| Held-out perplexity | " + fmt("%.2f", training["heldout_perplexity"].get<double>()) + " (");
  // The splits' token counts; their documents and megabytes are corpus.py's count of
  // Debian's python3.11-doc, which the tests do not install, so they stand as written.
  in_card("| train | 435 (8.66 MB, " + commas(training["train_tokens"].get<int64_t>()) + " tokens) |");
  in_card("| heldout | 19 (0.33 MB, " + commas(training["heldout_tokens"].get<int64_t>()) + " tokens) |");

  in_readme("`assets/model` is a tiny Qwen3 (" + std::to_string(c.num_layers) + " layers, " +
            fmt("%.1f", double(c.parameter_count()) / 1e6) + "M parameters, bf16, " + fmt("%.1f", megabytes) + " MB)");
  in_readme("trained for " + fmt("%.0f", training["minutes"].get<double>()) + " minutes on two CPU cores");
  in_readme("held-out\nperplexity " + fmt("%.1f", training["heldout_perplexity"].get<double>()) + " (");
  in_readme("so the full cache's is not the card's " + fmt("%.1f", training["heldout_perplexity"].get<double>()) + ".");
}

}  // namespace
}  // namespace kvscope
