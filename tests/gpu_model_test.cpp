// The whole model and the engine on the CUDA backend against the CPU backend.
//
//   GpuModel   every test checkpoint (f32, tied/untied, bf16 kept and widened, f16) and the
//              bundled model:
//              logits of a batched prefill (every position) and of 32 teacher-forced
//              decode steps, GPU versus CPU, within 1e-4 (the bound the CPU meets
//              against PyTorch); the eager path's prob_sums and the pre-RoPE queries too.
//   GpuModel.AfterEviction*  the GPU after eviction against PyTorch itself (tests/after_eviction.h):
//              holes, reuse and compaction, flash and eager, within 1e-4.
//   GpuEngine  eviction rounds with every policy, with compaction and with hole reuse:
//              after every step the same tokens are kept on both devices, the same
//              bytes moved, and the next-token logits agree within 1e-4.
#include "gpu_test.h"

#ifdef KVSCOPE_HAVE_CUDA
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>

#include "after_eviction.h"
#include "cuda_backend.h"
#include "engine/engine.h"
#include "evict/triattention.h"
#include "model/backend.h"
#include "test_paths.h"
#include "util/file.h"
#include "util/format.h"

namespace kvscope {
namespace {

constexpr float kLogitTolerance = 1e-4f;

// One sequence on one backend.
struct OneSequence {
  PagedKvCache cache;
  std::unique_ptr<Backend> backend;
  int seq;
  OneSequence(const Model& m, int tokens, int block_size, bool gpu)
      : cache((tokens + block_size - 1) / block_size, block_size, MemoryStrategy::HolesOnly),
        backend(gpu ? cuda::make_backend(m, cache.num_blocks(), block_size)
                    : std::make_unique<CpuBackend>(m, cache.num_blocks(), block_size)),
        seq(cache.add_sequence()) {}
};

// Prefill (logits at every position) and 32 teacher-forced decode steps of each case of
// a fixture, GPU against CPU over the whole vocabulary.
void compare_on_fixture_inputs(const Model& m, const std::string& fixture_path, const std::string& name,
                               int block_size = 16) {
  const auto fixture = nlohmann::json::parse(read_file(fixture_path));
  const size_t vocab = size_t(m.config.vocab_size);
  ASSERT_FALSE(fixture["cases"].empty()) << fixture_path;
  for (const auto& c : fixture["cases"]) {
    const std::vector<int> prompt = c["prompt_ids"].get<std::vector<int>>();
    const std::vector<int> fed = c["decode_ids"].get<std::vector<int>>();
    ASSERT_EQ(fed.size(), 32u);
    const int n = int(prompt.size() + fed.size());
    OneSequence cpu(m, n, block_size, false), gpu(m, n, block_size, true);
    ForwardOptions all;
    all.all_logits = true;
    const float* a = cpu.backend->forward(cpu.cache, cpu.seq, prompt.data(), int(prompt.size()), all);
    const std::vector<float> want(a, a + prompt.size() * vocab);
    const float* b = gpu.backend->forward(gpu.cache, gpu.seq, prompt.data(), int(prompt.size()), all);
    for (size_t t = 0; t < prompt.size(); ++t)
      EXPECT_LE(max_abs_diff(b + t * vocab, want.data() + t * vocab, vocab), kLogitTolerance)
          << name << ": prefill position " << t << " of " << prompt.size();
    for (size_t step = 0; step < fed.size(); ++step) {
      const float* x = cpu.backend->forward(cpu.cache, cpu.seq, &fed[step], 1);
      const std::vector<float> one(x, x + vocab);
      const float* y = gpu.backend->forward(gpu.cache, gpu.seq, &fed[step], 1);
      EXPECT_LE(max_abs_diff(y, one.data(), vocab), kLogitTolerance) << name << ": decode step " << step;
    }
  }
}

// A test checkpoint on the inputs of its PyTorch fixture.
void compare_on_fixture_inputs(const std::string& name, WeightFormat format, int block_size = 16) {
  compare_on_fixture_inputs(load_model(test::tiny_model(name), format),
                            test::source_path("tests/fixtures/" + name + ".json"), name, block_size);
}

TEST(GpuModel, TiedF32MatchesCpu) {
  KVSCOPE_REQUIRE_GPU();
  compare_on_fixture_inputs("tiny-tied", WeightFormat::AsStored);
}
TEST(GpuModel, UntiedF32MatchesCpu) {
  KVSCOPE_REQUIRE_GPU();
  compare_on_fixture_inputs("tiny-untied", WeightFormat::AsStored);
}
TEST(GpuModel, TiedWithLmHeadInFileMatchesCpu) {
  KVSCOPE_REQUIRE_GPU();
  compare_on_fixture_inputs("tiny-tied-with-head", WeightFormat::AsStored);
}
TEST(GpuModel, Bf16WeightsMatchCpu) {
  KVSCOPE_REQUIRE_GPU();
  compare_on_fixture_inputs("tiny-bf16-sharded", WeightFormat::AsStored);  // the bf16 GEMV and widened cuBLAS bands
  compare_on_fixture_inputs("tiny-bf16-sharded", WeightFormat::F32);
}
TEST(GpuModel, F16WidenedMatchesCpu) {
  KVSCOPE_REQUIRE_GPU();
  compare_on_fixture_inputs("tiny-f16", WeightFormat::AsStored);
}
TEST(GpuModel, FiveQueryHeadsPerKvHeadMatchCpu) {
  KVSCOPE_REQUIRE_GPU();
  compare_on_fixture_inputs("tiny-gqa5", WeightFormat::AsStored);
}
TEST(GpuModel, BlockSizes1And64MatchCpu) {
  KVSCOPE_REQUIRE_GPU();
  compare_on_fixture_inputs("tiny-untied", WeightFormat::AsStored, 1);
  compare_on_fixture_inputs("tiny-untied", WeightFormat::AsStored, 64);
}

// The bundled model, bf16 as stored (the bf16 GEMV, the tied 4,096-row lm_head, the
// widened cuBLAS bands), on the inputs of its PyTorch fixture (tests/bundled_model_test.cpp).
TEST(GpuModel, BundledModelMatchesCpu) {
  KVSCOPE_REQUIRE_GPU();
  compare_on_fixture_inputs(load_model(test::source_path("assets/model")),
                            test::source_path("tests/fixtures/bundled-model.json"), "bundled model");
}

// Not only against the CPU: against PyTorch's logits after two rounds of eviction, so
// a bug the two backends shared would still show.
TEST(GpuModel, AfterEvictionMatchesPyTorch) {
  KVSCOPE_REQUIRE_GPU();
  for (MemoryStrategy strategy : {MemoryStrategy::HolesOnly, MemoryStrategy::ReuseHoles, MemoryStrategy::Compact}) {
    test::check_after_eviction("tiny-untied", strategy, AttentionPath::Flash, cuda::make_backend);
    test::check_after_eviction("tiny-gqa5", strategy, AttentionPath::Eager, cuda::make_backend);
  }
}

// A pool larger than the GPU's free memory is refused before anything is allocated,
// by name and size, not as cudaMalloc's "out of memory".
TEST(GpuModel, APoolLargerThanTheGpuIsRefusedByName) {
  KVSCOPE_REQUIRE_GPU();
  const Model m = load_model(test::tiny_model("tiny-tied"));
  size_t free_bytes = 0, total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  const int block_size = 256;
  const size_t blocks = free_bytes / KvStorage::bytes_per_block(m.config, block_size) + 1;
  ASSERT_LT(blocks, size_t(INT32_MAX)) << "a GPU this large needs a bigger test model";
  try {
    cuda::make_backend(m, int(blocks), block_size);
    FAIL() << blocks << " blocks fitted in " << free_bytes << " free bytes";
  } catch (const Error& e) {
    const std::string want = "not enough GPU memory for the paged K/V storage (" + std::to_string(blocks) +
                             " blocks of 256 tokens; K and V of " + std::to_string(m.config.num_layers) +
                             " layers, f32): ";
    EXPECT_EQ(std::string(e.what()).substr(0, want.size()), want) << e.what();
    EXPECT_NE(std::string(e.what()).find(" GB free (of "), std::string::npos) << e.what();
  }
}

// An eager prefill the GPU cannot take is refused before its tokens are placed, so the
// cache is as it was: more queries than the eager kernels' grid holds, or P larger than
// the GPU's free memory (sized from what cudaMemGetInfo says, so that any card refuses it).
TEST(GpuModel, AnEagerPrefillTheGpuCannotTakeChangesNothing) {
  KVSCOPE_REQUIRE_GPU();
  Model m = load_model(test::tiny_model("tiny-tied"));
  m.config.max_position_embeddings = 1 << 30;  // its 512 would refuse these prompts first
  ForwardOptions eager;
  eager.attention = AttentionPath::Eager;
  const auto refusal = [&](OneSequence& s, const std::vector<int>& prompt) -> std::string {
    const auto live = s.cache.sequence(s.seq).live;
    try {
      s.backend->forward(s.cache, s.seq, prompt.data(), int(prompt.size()), eager);
    } catch (const Error& e) {
      EXPECT_EQ(s.cache.sequence(s.seq).live, live) << "the refused prompt's tokens were placed";
      return e.what();
    }
    return "(not refused)";
  };

  OneSequence many(m, 65536, 16, true);
  EXPECT_EQ(refusal(many, std::vector<int>(65536, 7)),
            "eager attention on the GPU takes at most 65,535 queries at once, got 65,536 (H2O and SnapKV need it "
            "over the whole prompt): run it on the CPU (--device cpu)");

  size_t free_bytes = 0, total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  const int T = 4000;  // not a multiple of the block size: the table ends in a part-used block
  const size_t keys = 2 * free_bytes / (size_t(m.config.num_heads) * T * sizeof(float));  // P of twice the free bytes
  ASSERT_LT(keys, size_t(INT32_MAX)) << "a GPU this large needs a longer prompt here";
  OneSequence big(m, int(keys), 256, true);
  for (size_t i = 0; i + T < keys; ++i) big.cache.append(big.seq);
  const std::string why = refusal(big, std::vector<int>(T, 7));
  // P spans the table as it will be: the blocks of all `keys` tokens, whole.
  const std::string want = "not enough GPU memory for eager attention's probabilities (4,000 queries x " +
                           commas(int64_t((keys + 255) / 256 * 256)) + " keys x 4 heads; H2O and SnapKV need them): ";
  EXPECT_EQ(why.substr(0, want.size()), want) << why;
}

TEST(GpuModel, EagerPathProbSumsAndQueriesMatchCpu) {
  KVSCOPE_REQUIRE_GPU();
  const Model m = load_model(test::tiny_model("tiny-tied"));
  const std::vector<int> prompt = {5, 77, 300, 12, 9, 150, 42, 8, 8, 200, 31, 3, 14, 15, 92};
  OneSequence cpu(m, 40, 4, false), gpu(m, 40, 4, true);
  std::vector<float> sums_cpu, sums_gpu, q_cpu, q_gpu;
  for (int step = 0; step < 10; ++step) {
    ForwardOptions a, b;
    a.attention = b.attention = AttentionPath::Eager;
    a.sum_from = b.sum_from = step == 0 ? 5 : 0;
    a.prob_sums = &sums_cpu;
    b.prob_sums = &sums_gpu;
    a.queries = &q_cpu;
    b.queries = &q_gpu;
    const int token = (step * 31 + 7) % 300;
    const int* tokens = step == 0 ? prompt.data() : &token;
    const int T = step == 0 ? int(prompt.size()) : 1;
    const float* x = cpu.backend->forward(cpu.cache, cpu.seq, tokens, T, a);
    const std::vector<float> want(x, x + m.config.vocab_size);
    const float* y = gpu.backend->forward(gpu.cache, gpu.seq, tokens, T, b);
    EXPECT_LE(max_abs_diff(y, want.data(), want.size()), kLogitTolerance) << "step " << step;
    ASSERT_EQ(sums_gpu.size(), sums_cpu.size());
    EXPECT_LE(max_abs_diff(sums_gpu.data(), sums_cpu.data(), sums_cpu.size()), 1e-5f) << "prob_sums, step " << step;
    ASSERT_EQ(q_gpu.size(), q_cpu.size());
    EXPECT_LE(max_abs_diff(q_gpu.data(), q_cpu.data(), q_cpu.size()), 1e-5f) << "pre-RoPE queries, step " << step;
  }
}

// ---- the engine: eviction and compaction with the K/V on the GPU ----------------------------

std::vector<int> script(int n) {
  std::vector<int> t;
  for (int i = 0; i < n; ++i) t.push_back((i * 37 + 11) % 300);
  return t;
}

void compare_engines(const Model& m, EngineConfig config, const std::string& what) {
  EngineConfig on_gpu = config;
  on_gpu.backend = cuda::make_backend;
  Engine cpu(m, config), gpu(m, on_gpu);
  const int a = cpu.add_sequence(), b = gpu.add_sequence();
  const std::vector<int> prompt = {3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46, 26};
  const size_t vocab = size_t(m.config.vocab_size);
  const float* x = cpu.prefill(a, prompt);
  std::vector<float> want(x, x + vocab);
  const float* y = gpu.prefill(b, prompt);
  EXPECT_LE(max_abs_diff(y, want.data(), vocab), kLogitTolerance) << what << ": prefill";
  for (int token : script(60)) {
    x = cpu.decode(a, token);
    want.assign(x, x + vocab);
    y = gpu.decode(b, token);
    ASSERT_EQ(gpu.cache().live_positions(b), cpu.cache().live_positions(a)) << what << ": kept tokens differ";
    EXPECT_LE(max_abs_diff(y, want.data(), vocab), kLogitTolerance) << what << ": logits at position "
                                                             << cpu.stats(a).tokens_seen;
  }
  EXPECT_GT(gpu.stats(b).rounds, 3) << what;
  EXPECT_EQ(gpu.stats(b).rounds, cpu.stats(a).rounds) << what;
  EXPECT_EQ(gpu.stats(b).bytes_moved, cpu.stats(a).bytes_moved) << what;
  if (config.strategy == MemoryStrategy::Compact) {
    EXPECT_GT(gpu.stats(b).bytes_moved, 0u) << what;
  }
}

EngineConfig engine_config(MemoryStrategy strategy, PolicyFactory policy, int budget = 16) {
  EngineConfig c;
  c.num_blocks = 64;
  c.block_size = 4;
  c.strategy = strategy;
  c.schedule = {budget, /*slack=*/6, /*sinks=*/2, /*recent=*/5};
  c.policy = std::move(policy);
  return c;
}

TEST(GpuEngine, EvictionAndCompactionKeepTheSameTokensAsTheCpu) {
  KVSCOPE_REQUIRE_GPU();
  const Model m = load_model(test::tiny_model("tiny-untied"));
  for (MemoryStrategy strategy : {MemoryStrategy::Compact, MemoryStrategy::ReuseHoles})
    for (const char* policy : {"streaming", "h2o", "snapkv", "random"})  // SnapKV keeps its window of 32 whole
      compare_engines(m, engine_config(strategy, [policy] { return make_policy(policy, 1); },
                                       std::string(policy) == "snapkv" ? 40 : 16),
                      std::string(policy) + ", " + strategy_name(strategy));
}

TEST(GpuEngine, TriAttentionScoresKeysOnTheGpu) {
  KVSCOPE_REQUIRE_GPU();
  const Model m = load_model(test::tiny_model("tiny-untied"));
  CalibrateOptions o;
  o.chunk = 96;
  auto cal = std::make_shared<const TriCalibration>(calibrate(m, script(192), o));
  for (MemoryStrategy strategy : {MemoryStrategy::Compact, MemoryStrategy::ReuseHoles})
    compare_engines(m, engine_config(strategy, [cal] { return std::make_unique<TriAttentionPolicy>(cal); }),
                    std::string("triattention, ") + strategy_name(strategy));
}

}  // namespace
}  // namespace kvscope

#else  // built without CUDA: the suites are here, and say why they do not run
TEST(GpuModel, BuiltWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
TEST(GpuEngine, BuiltWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#endif
