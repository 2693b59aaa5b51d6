// The C++ Qwen3 forward pass against the PyTorch transcription of Hugging Face's
// module (tests/reference/qwen3_reference.py). Fixtures: tests/fixtures/<model>.json,
// made by tests/reference/make_fixtures.py on the checkpoints in tests/models/.
//
// Each case: a prompt's logits at every position (one batched prefill), then 32
// one-token decode steps fed the reference's own greedy tokens (teacher forcing),
// each step's logits compared. Bound: max |C++ - PyTorch| <= 1e-4.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "after_eviction.h"
#include "model/backend.h"
#include "model/bf16.h"
#include "model/ops.h"
#include "model/qwen3.h"
#include "scoped_threads.h"
#include "sample/sampler.h"
#include "model/weights.h"
#include "test_paths.h"
#include "util/error.h"
#include "util/file.h"
#include "util/max_abs_diff.h"

namespace kvscope {
namespace {

constexpr float kTolerance = 1e-4f;

float max_abs_diff(const float* got, const nlohmann::json& want) {
  const std::vector<float> w = want.get<std::vector<float>>();
  return kvscope::max_abs_diff(got, w.data(), w.size());  // a NaN counts as infinitely far
}

// A paged cache with room for n tokens, and its storage.
struct Paged {
  PagedKvCache cache;
  KvStorage kv;
  int seq;
  Paged(const ModelConfig& c, int n, int block_size = 16)
      : cache((n + block_size - 1) / block_size, block_size, MemoryStrategy::HolesOnly),
        kv(c, cache.num_blocks(), block_size),
        seq(cache.add_sequence()) {}
};

void check_against_fixture(const std::string& name, WeightFormat format, AttentionPath path = AttentionPath::Flash,
                           int block_size = 16) {
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

    Paged p(model.config, int(prompt.size() + fed.size()), block_size);
    RunState state;
    ForwardOptions all;
    all.all_logits = true;
    all.attention = path;
    ForwardOptions one;
    one.attention = path;
    const float* logits = forward(model, p.cache, p.kv, p.seq, state, prompt.data(), int(prompt.size()), all);
    for (size_t t = 0; t < prompt.size(); ++t) {
      ASSERT_EQ(c["prefill_logits"][t].size(), size_t(vocab));
      EXPECT_LE(max_abs_diff(logits + t * vocab, c["prefill_logits"][t]), kTolerance)
          << name << ": prefill position " << t << " of a " << prompt.size() << "-token prompt";
    }
    for (size_t step = 0; step < fed.size(); ++step) {
      logits = forward(model, p.cache, p.kv, p.seq, state, &fed[step], 1, one);
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
TEST(ModelVsPyTorch, EagerAttention) { check_against_fixture("tiny-untied", WeightFormat::AsStored, AttentionPath::Eager); }
TEST(ModelVsPyTorch, BlockSize1) { check_against_fixture("tiny-untied", WeightFormat::AsStored, AttentionPath::Flash, 1); }
TEST(ModelVsPyTorch, BlockSize256) { check_against_fixture("tiny-tied", WeightFormat::AsStored, AttentionPath::Eager, 256); }

// Five query heads per KV head and head_dim 64. In every other fixture the group size and
// the KV head count are both 2, so a mix-up of the two would pass there.
TEST(ModelVsPyTorch, FiveQueryHeadsPerKvHead) {
  check_against_fixture("tiny-gqa5", WeightFormat::AsStored);
  check_against_fixture("tiny-gqa5", WeightFormat::AsStored, AttentionPath::Eager);
}

// After eviction, against PyTorch (tests/after_eviction.h), on the CPU backend.
std::unique_ptr<Backend> cpu_backend(const Model& m, int num_blocks, int block_size) {
  return std::make_unique<CpuBackend>(m, num_blocks, block_size);
}
void check_after_eviction(const std::string& name, MemoryStrategy strategy, AttentionPath path) {
  test::check_after_eviction(name, strategy, path, cpu_backend);
}

TEST(ModelVsPyTorch, AfterEvictionWithHoles) {
  check_after_eviction("tiny-untied", MemoryStrategy::HolesOnly, AttentionPath::Flash);
  check_after_eviction("tiny-gqa5", MemoryStrategy::HolesOnly, AttentionPath::Eager);
}
TEST(ModelVsPyTorch, AfterEvictionReusingHoles) {
  check_after_eviction("tiny-untied", MemoryStrategy::ReuseHoles, AttentionPath::Flash);
  check_after_eviction("tiny-gqa5", MemoryStrategy::ReuseHoles, AttentionPath::Eager);
}
TEST(ModelVsPyTorch, AfterEvictionAndCompaction) {
  check_after_eviction("tiny-untied", MemoryStrategy::Compact, AttentionPath::Eager);
  check_after_eviction("tiny-gqa5", MemoryStrategy::Compact, AttentionPath::Flash);
}

// RoPE at long positions against the reference (tests/fixtures/rope-long.json, from
// make_rope_fixture.py; the model fixtures stop at position 191). Hugging Face takes the
// angle pos x inv_freq in float32: rotating by exact (double) angles instead came out
// 1.2e-3 off at position 40,959 and 1.1e-3 at 32,767 (that mutant run by hand), above
// this bound from position 4,095 on; two libms' cos and sin of one float angle differ
// by a few 1e-6.
TEST(ModelVsPyTorch, RopeAtLongPositionsRotatesAsHuggingFace) {
  const auto fixture = nlohmann::json::parse(read_file(test::source_path("tests/fixtures/rope-long.json")));
  const int heads = fixture["heads"], head_dim = fixture["head_dim"];
  const std::vector<float> x = fixture["x"].get<std::vector<float>>();
  ASSERT_EQ(x.size(), size_t(heads) * head_dim);
  ASSERT_FALSE(fixture["cases"].empty());
  for (const auto& c : fixture["cases"]) {
    std::vector<float> got = x;
    const int pos = c["pos"];
    rope(got.data(), heads, head_dim, pos, c["theta"].get<double>());
    EXPECT_LE(max_abs_diff(got.data(), c["rotated"]), 1e-4f) << "theta " << c["theta"] << ", position " << pos;
  }
}

// RMSNorm is x / sqrt(mean(x^2) + eps) * w, with eps inside the root: a row of zeros
// gives zeros, not 0/0, and eps = 1 on a row of ones doubles what is under the root.
// (Only the bundled model's fixture noticed eps dropped; the tiny ones never come near 0.)
TEST(Ops, RmsNormPutsEpsUnderTheRoot) {
  const float x[] = {0, 0, 0, 0, 1, 1, 1, 1, 3, -4, 0, 0};  // [3 rows, 4]
  const float w[] = {1, 2, 1, 0.5f};
  float out[12];
  rmsnorm(out, x, w, 3, 4, 1.0f);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], 0.0f) << i;
  const float ones = 1 / std::sqrt(1.0f + 1.0f);  // mean square 1, eps 1
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(out[4 + i], ones * w[i]) << i;
  const float third = 1 / std::sqrt(25.0f / 4 + 1.0f);
  EXPECT_FLOAT_EQ(out[8], 3 * third);
  EXPECT_FLOAT_EQ(out[9], -8 * third);
  rmsnorm(out, x, w, 1, 4, 1e-6f);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], 0.0f) << "eps 1e-6, " << i;
}

// The queries TriAttention calibrates on (ForwardOptions::queries): after q_norm and
// before RoPE, against the reference's (tests/fixtures/tiny-tied-queries.json). Taken
// after RoPE, or before q_norm, they would differ by far more than the tolerance.
TEST(ModelVsPyTorch, QueriesAfterQNormBeforeRope) {
  const Model model = load_model(test::tiny_model("tiny-tied"));
  const auto fixture = nlohmann::json::parse(read_file(test::source_path("tests/fixtures/tiny-tied-queries.json")));
  const std::vector<int> prompt = fixture["prompt_ids"].get<std::vector<int>>();
  const int T = int(prompt.size()), q_dim = model.config.q_dim();
  ASSERT_EQ(fixture["queries"].size(), size_t(model.config.num_layers));
  Paged p(model.config, T, 16);
  RunState state;
  std::vector<float> queries;  // [num_layers, T, q_dim]
  ForwardOptions o;
  o.queries = &queries;
  forward(model, p.cache, p.kv, p.seq, state, prompt.data(), T, o);
  ASSERT_EQ(queries.size(), size_t(model.config.num_layers) * T * q_dim);
  for (int l = 0; l < model.config.num_layers; ++l)
    for (int t = 0; t < T; ++t) {
      ASSERT_EQ(fixture["queries"][l][t].size(), size_t(q_dim));
      EXPECT_LE(max_abs_diff(queries.data() + (size_t(l) * T + t) * q_dim, fixture["queries"][l][t]), kTolerance)
          << "layer " << l << ", position " << t;
    }
}

// --threads changes the speed, never the numbers: a prefill's logits are the same bits on
// 1, 2 and 3 threads (the bundled model, whose down_proj sums 384 terms: Eigen's own
// threading cut them in blocks of 320 or fewer on 2 threads and not on 1).
TEST(Model, PrefillLogitsDoNotDependOnTheThreadCount) {
  const Model model = load_model(test::source_path("assets/model"));
  const int vocab = model.config.vocab_size;
  std::vector<int> prompt(200);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int((i * 7919) % size_t(vocab));
  auto prefill = [&](int threads, AttentionPath path) {
    const test::ScopedThreads scoped(threads);
    Paged p(model.config, int(prompt.size()));
    RunState state;
    ForwardOptions all;
    all.all_logits = true;
    all.attention = path;
    const float* logits = forward(model, p.cache, p.kv, p.seq, state, prompt.data(), int(prompt.size()), all);
    return std::vector<float>(logits, logits + prompt.size() * vocab);
  };
  for (AttentionPath path : {AttentionPath::Flash, AttentionPath::Eager}) {
    const std::vector<float> one = prefill(1, path);
    for (int threads : {2, 3}) {
      const std::vector<float> many = prefill(threads, path);
      EXPECT_EQ(std::memcmp(one.data(), many.data(), one.size() * sizeof(float)), 0)
          << threads << " threads, max |difference| " << kvscope::max_abs_diff(one.data(), many.data(), one.size());
    }
  }
}

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

// What bench decode divides the bandwidth by. The tiny models' matrices, in floats: per
// layer q 128x64, k and v 64x64, o 64x128, gate and up 160x64, down 64x160 (55,296);
// two layers 110,592; embedding and lm_head 384x64 (24,576) each.
TEST(Model, ADecodeStepReadsOneRowOfAnUntiedEmbedding) {
  const Model tied = load_model(test::tiny_model("tiny-tied"));
  EXPECT_EQ(tied.weights.matrix_bytes(), (110592u + 24576u) * 4);
  EXPECT_EQ(tied.weights.decode_bytes(), (110592u + 24576u) * 4);  // lm_head is the embedding, read whole
  const Model untied = load_model(test::tiny_model("tiny-untied"));
  EXPECT_EQ(untied.weights.matrix_bytes(), (110592u + 2 * 24576u) * 4);
  EXPECT_EQ(untied.weights.decode_bytes(), (110592u + 24576u + 64u) * 4);  // lm_head, and one embedding row
}

TEST(Model, F32AndBf16ViewsAreZeroCopy) {
  Model m = load_model(test::tiny_model("tiny-bf16-sharded"));
  EXPECT_EQ(m.weights.layers[0].q_proj.dtype, DType::BF16);
  EXPECT_EQ(m.weights.layers[0].q_proj.data, m.weights.checkpoint->tensors().at("model.layers.0.self_attn.q_proj.weight").data);
  Model f = load_model(test::tiny_model("tiny-f16"));  // F16 is widened
  EXPECT_EQ(f.weights.layers[0].q_proj.dtype, DType::F32);
}

// --weights bf16 on an F32 checkpoint: the matrices are narrowed once at load, each
// element rounded to nearest even (f32_to_bf16), into memory of the model's own.
// Checked here on the embedding, the head and an attention and an MLP matrix.
TEST(Model, F32NarrowedToBf16AtLoad) {
  const Model m = load_model(test::tiny_model("tiny-untied"), WeightFormat::BF16);
  const auto& file = m.weights.checkpoint->tensors();
  const LayerWeights& l = m.weights.layers[1];
  const std::vector<std::pair<const Matrix*, std::string>> matrices = {
      {&m.weights.embed, "model.embed_tokens.weight"},
      {&m.weights.lm_head, "lm_head.weight"},
      {&l.q_proj, "model.layers.1.self_attn.q_proj.weight"},
      {&l.down_proj, "model.layers.1.mlp.down_proj.weight"}};
  for (const auto& [mat, name] : matrices) {
    const TensorView& t = file.at(name);
    ASSERT_EQ(t.dtype, DType::F32) << name;
    EXPECT_EQ(mat->dtype, DType::BF16) << name;
    EXPECT_NE(mat->data, t.data) << name << ": a copy, not a view of the F32 file";
    const auto* got = static_cast<const uint16_t*>(mat->data);
    const auto* f32 = reinterpret_cast<const float*>(t.data);
    int64_t differ = 0;
    for (int64_t i = 0; i < t.numel(); ++i) differ += got[i] != f32_to_bf16(f32[i]);
    EXPECT_EQ(differ, 0) << name;
  }
}

// Logits of a prompt and 20 decode steps, through a paged cache of the given block size.
std::vector<float> run_paged(const Model& m, int block_size, AttentionPath path) {
  const std::vector<int> prompt = {5, 77, 300, 12, 9, 150, 42, 8, 8, 200, 31};
  Paged p(m.config, int(prompt.size()) + 20, block_size);
  RunState s;
  ForwardOptions o;
  o.attention = path;
  const int vocab = m.config.vocab_size;
  std::vector<float> out;
  const float* logits = forward(m, p.cache, p.kv, p.seq, s, prompt.data(), int(prompt.size()), o);
  for (int i = 0; i < 20; ++i) {
    out.insert(out.end(), logits, logits + vocab);
    int next = argmax(logits, vocab);
    logits = forward(m, p.cache, p.kv, p.seq, s, &next, 1, o);
  }
  return out;
}

TEST(PagedModel, BlockSizeDoesNotChangeALogitBit) {
  // Attention tiles are cut from the live keys in order, not from blocks: the
  // arithmetic is the same whatever the block size (1 = every token its own block;
  // 256 = one block, i.e. a contiguous cache).
  Model m = load_model(test::tiny_model("tiny-untied"));
  for (AttentionPath path : {AttentionPath::Flash, AttentionPath::Eager}) {
    const auto reference = run_paged(m, 256, path);
    for (int bs : {1, 3, 16, 64}) EXPECT_EQ(run_paged(m, bs, path), reference) << "block size " << bs;
  }
}

TEST(PagedModel, FlashAndEagerAgree) {
  Model m = load_model(test::tiny_model("tiny-tied"));
  const auto flash = run_paged(m, 16, AttentionPath::Flash), eager = run_paged(m, 16, AttentionPath::Eager);
  ASSERT_EQ(flash.size(), eager.size());
  const float worst = kvscope::max_abs_diff(flash, eager);
  // Same math, different order of float sums (Eigen's GEMM vs a tile loop), over
  // 20 decode steps with logits up to ~13 in size: agreement to ~1e-6 relative.
  EXPECT_LE(worst, 1e-4f);
}

TEST(PagedModel, PrefillEqualsTokenByTokenDecode) {
  Model m = load_model(test::tiny_model("tiny-untied"));
  const std::vector<int> tokens = {5, 77, 300, 12, 9, 150, 42, 8};
  const int n = int(tokens.size()), vocab = m.config.vocab_size;
  Paged batched(m.config, n), stepwise(m.config, n);
  RunState s1, s2;
  ForwardOptions all;
  all.all_logits = true;
  const float* l = forward(m, batched.cache, batched.kv, batched.seq, s1, tokens.data(), n, all);
  std::vector<float> prefill(l, l + size_t(n) * vocab);
  for (int t = 0; t < n; ++t) {
    const float* one = forward(m, stepwise.cache, stepwise.kv, stepwise.seq, s2, &tokens[t], 1);
    for (int i = 0; i < vocab; ++i) ASSERT_NEAR(one[i], prefill[size_t(t) * vocab + i], 1e-4) << "token " << t;
  }
}

TEST(PagedModel, RefusesBadTokensAndAFullPoolWithoutChangingAnything) {
  Model m = load_model(test::tiny_model("tiny-tied"));
  Paged p(m.config, 4, 2);  // 2 blocks of 2 slots
  RunState s;
  int bad = m.config.vocab_size;
  EXPECT_THROW(forward(m, p.cache, p.kv, p.seq, s, &bad, 1), Error);
  std::vector<int> five(5, 1);
  try {
    forward(m, p.cache, p.kv, p.seq, s, five.data(), 5);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("block pool exhausted"), std::string::npos) << e.what();
  }
  EXPECT_EQ(p.cache.sequence(p.seq).live, 0);
  EXPECT_EQ(p.cache.pool().num_free(), 2);
  EXPECT_NO_THROW(forward(m, p.cache, p.kv, p.seq, s, five.data(), 4));
}

// Probability sums come from eager attention: asked of flash they stayed all 0
// (H2O and SnapKV would then have ranked every token alike), now an error, before
// anything is placed.
TEST(PagedModel, ProbabilitySumsAskedOfFlashAreRefused) {
  Model m = load_model(test::tiny_model("tiny-tied"));
  Paged p(m.config, 4, 4);
  RunState s;
  std::vector<float> sums;
  ForwardOptions flash;
  flash.prob_sums = &sums;
  const std::vector<int> three = {1, 2, 3};
  EXPECT_THROW(forward(m, p.cache, p.kv, p.seq, s, three.data(), 3, flash), Error);
  BatchItem item{p.seq, three, AttentionPath::Flash, 0, &sums};
  EXPECT_THROW(forward_batch(m, p.cache, p.kv, s, {item}), Error);
  EXPECT_EQ(p.cache.sequence(p.seq).live, 0);
  item.attention = flash.attention = AttentionPath::Eager;
  EXPECT_NO_THROW(forward_batch(m, p.cache, p.kv, s, {item}));
  EXPECT_EQ(sums.size(), size_t(m.config.num_layers) * m.config.num_heads * 4);
}

// RoPE is defined up to max_position_embeddings: a token past it is refused, and
// the cache is left as it was.
TEST(PagedModel, RefusesAPositionPastMaxPositionEmbeddings) {
  Model m = load_model(test::tiny_model("tiny-tied"));
  m.config.max_position_embeddings = 6;
  Paged p(m.config, 16, 4);
  RunState s;
  const std::vector<int> tokens = {5, 77, 300, 12, 9, 150, 42};
  EXPECT_NO_THROW(forward(m, p.cache, p.kv, p.seq, s, tokens.data(), 6));  // positions 0-5
  try {
    forward(m, p.cache, p.kv, p.seq, s, &tokens[6], 1);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "forward: position 6 is past the model's max_position_embeddings (6)");
  }
  EXPECT_EQ(p.cache.sequence(p.seq).next_pos, 6);
  EXPECT_EQ(p.cache.sequence(p.seq).live, 6);
}

TEST(PagedModel, TwoSequencesShareOnePoolWithoutInterfering) {
  Model m = load_model(test::tiny_model("tiny-untied"));
  const std::vector<int> a = {1, 2, 3, 4, 5, 6, 7}, b = {100, 90, 80};
  PagedKvCache cache(4, 4, MemoryStrategy::HolesOnly);
  KvStorage kv(m.config, 4, 4);
  const int sa = cache.add_sequence(), sb = cache.add_sequence();
  RunState s;
  const int vocab = m.config.vocab_size;
  // Interleave: a's prompt, b's prompt, then a decode step on b and one on a, each
  // after the other's writes.
  forward(m, cache, kv, sa, s, a.data(), 7);
  forward(m, cache, kv, sb, s, b.data(), 3);
  int t = 9;
  const float* lb = forward(m, cache, kv, sb, s, &t, 1);
  const std::vector<float> got_b(lb, lb + vocab);
  const float* la = forward(m, cache, kv, sa, s, &t, 1);
  const std::vector<float> got_a(la, la + vocab);

  // Each as it would be alone, bit for bit.
  const auto alone = [&](const std::vector<int>& prompt) {
    Paged p(m.config, 8);
    RunState own;
    forward(m, p.cache, p.kv, p.seq, own, prompt.data(), int(prompt.size()));
    const float* l = forward(m, p.cache, p.kv, p.seq, own, &t, 1);
    return std::vector<float>(l, l + vocab);
  };
  EXPECT_EQ(got_a, alone(a));
  EXPECT_EQ(got_b, alone(b));
  // And in blocks of their own: a's 8 tokens in 2, b's 4 in 1, none shared.
  std::vector<int> blocks = cache.sequence(sa).blocks;
  blocks.insert(blocks.end(), cache.sequence(sb).blocks.begin(), cache.sequence(sb).blocks.end());
  std::sort(blocks.begin(), blocks.end());
  EXPECT_EQ(blocks.size(), 3u);
  EXPECT_EQ(std::adjacent_find(blocks.begin(), blocks.end()), blocks.end()) << "a block held by both";
}

}  // namespace
}  // namespace kvscope
