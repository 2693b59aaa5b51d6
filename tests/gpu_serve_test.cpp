// Batched steps on the CUDA backend against the CPU: CudaBackend::forward_batch
// (one pass over all the rows: the decoding sequences share one GEMV per weight,
// one paged attention launch for those that need no probabilities and one run of the
// eager kernels for those that do, each prefill chunk has its own GEMM, and every
// sequence attends through its own block table) must give the logits the CPU's
// batched pass gives, and eviction must keep the same tokens on both.
#include "gpu_test.h"

#ifdef KVSCOPE_HAVE_CUDA
#include <memory>
#include <string>
#include <vector>

#include "cuda_backend.h"
#include "engine/engine.h"
#include "model/backend.h"
#include "model/weights.h"
#include "test_paths.h"

namespace kvscope {
namespace {

// A policy factory that hands the sequences the given policies in turn.
PolicyFactory in_turn(std::vector<std::string> policies) {
  return [policies, next = std::make_shared<size_t>(0)] {
    return make_policy(policies[(*next)++ % policies.size()], 1);
  };
}

// Made-up token ids for positions [from, to) of sequence i.
std::vector<int> tokens_at(int from, int to, int i, int vocab) {
  std::vector<int> ids;
  for (int t = from; t < to; ++t) ids.push_back((t * 31 + i * 7 + 3) % vocab);
  return ids;
}

// n sequences join one step apart and prefill 7 + prompt_step * i tokens in chunks of 4, then
// decode, for `steps` steps, on the CPU and on the GPU side by side; sequence i
// under policies[i % policies.size()]. Each step's logits must agree within 1e-4,
// and after every step the same positions must be live.
void serve_on_both(const std::string& model, const std::vector<std::string>& policies, int n, int steps,
                   EvictionSchedule schedule = {12, 6, 2, 5}, int prompt_step = 1) {
  std::string names;
  for (const std::string& p : policies) names += p + " ";
  SCOPED_TRACE(std::string(model) + ", " + names + std::to_string(n) + " sequences");
  const Model m = load_model(test::tiny_model(model));
  EngineConfig c;
  c.num_blocks = 16 * n;
  c.block_size = 4;
  c.strategy = MemoryStrategy::Compact;
  c.schedule = schedule;
  c.policy = in_turn(policies);
  Engine cpu(m, c);
  c.backend = cuda::make_backend;
  c.policy = in_turn(policies);
  Engine gpu(m, c);
  const int vocab = m.config.vocab_size;
  std::vector<int> seqs;
  for (int i = 0; i < n; ++i) {
    seqs.push_back(cpu.add_sequence());
    gpu.add_sequence();
  }
  size_t most_decoding = 0;
  for (int step = 0; step < steps; ++step) {
    std::vector<BatchItem> items;
    size_t decoding = 0;
    for (int i = 0; i < n; ++i) {
      if (step < i) continue;
      const int fed = int(cpu.cache().sequence(seqs[i]).next_pos), prompt = 7 + prompt_step * i;
      BatchItem it{seqs[i], tokens_at(fed, std::min(prompt, fed + 4), i, vocab)};
      if (it.tokens.empty()) it.tokens.push_back((step * 17 + i) % vocab);
      decoding += it.tokens.size() == 1;
      items.push_back(it);
    }
    most_decoding = std::max(most_decoding, decoding);
    const float* a = cpu.step_batch(items);
    const std::vector<float> want(a, a + items.size() * size_t(vocab));
    const float* b = gpu.step_batch(items);
    EXPECT_LE(max_abs_diff(want, std::vector<float>(b, b + want.size())), 1e-4f) << "step " << step;
    for (int s : seqs) ASSERT_EQ(cpu.cache().live_positions(s), gpu.cache().live_positions(s)) << "step " << step;
  }
  EXPECT_GT(cpu.bytes_moved(), 0u) << "the test should compact";
  EXPECT_EQ(cpu.bytes_moved(), gpu.bytes_moved());
  EXPECT_EQ(int(most_decoding), n) << "every sequence should decode in the same step at least once";
}

// H2O asks for the attention probabilities at every step: the decoding sequences
// share one run of the eager kernels, each through its own table into its own sums.
TEST(GpuServe, BatchedStepsMatchTheCpu) {
  KVSCOPE_REQUIRE_GPU();
  serve_on_both("tiny-untied", {"h2o"}, 3, 40);
}

// 11 decoding sequences: the GEMV takes its rows in two passes (8, then 3).
TEST(GpuServe, ElevenSequencesMatchTheCpu) {
  KVSCOPE_REQUIRE_GPU();
  serve_on_both("tiny-tied", {"streaming"}, 11, 22);
  serve_on_both("tiny-tied", {"snapkv"}, 11, 50, {36, 6, 2, 5});  // above its window of 32, so votes count
}

// Streaming and H2O sequences in the same steps: the decode rows split into a paged
// launch (streaming's) and an eager one (H2O's), which starts at the first H2O row.
TEST(GpuServe, PagedAndEagerRowsShareAStep) {
  KVSCOPE_REQUIRE_GPU();
  serve_on_both("tiny-untied", {"h2o", "streaming"}, 5, 30);
}

// Paged rows and eager rows at different positions: each eager row must mask by
// its own position, not by the position of the row at the same index in the step.
TEST(GpuServe, PagedAndEagerRowsAtDifferentPositions) {
  KVSCOPE_REQUIRE_GPU();
  serve_on_both("tiny-untied", {"streaming", "h2o"}, 4, 24, {12, 6, 2, 5}, 8);
}

// A bf16 checkpoint served in batches: the last rows are gathered from f32 activations.
TEST(GpuServe, Bf16WeightsBatched) {
  KVSCOPE_REQUIRE_GPU();
  serve_on_both("tiny-bf16-sharded", {"streaming"}, 3, 20);
}

// One decode step, a short table first and a long one (more than one paged slice of
// 256 slots) after it: the paged launch must be sized for the longest table.
TEST(GpuServe, ALongTableBehindAShortOneInADecodeStep) {
  KVSCOPE_REQUIRE_GPU();
  const Model m = load_model(test::tiny_model("tiny-untied"));
  const int bs = 4, blocks = 100, vocab = m.config.vocab_size;
  const std::vector<int> shorter = tokens_at(0, 5, 0, vocab), longer = tokens_at(0, 300, 1, vocab);
  std::vector<std::vector<float>> logits;
  for (bool on_gpu : {false, true}) {
    PagedKvCache cache(blocks, bs, MemoryStrategy::HolesOnly);
    std::unique_ptr<Backend> backend = on_gpu ? cuda::make_backend(m, blocks, bs)
                                              : std::make_unique<CpuBackend>(m, blocks, bs);
    const int a = cache.add_sequence(), b = cache.add_sequence();
    backend->forward(cache, a, shorter.data(), int(shorter.size()));
    backend->forward(cache, b, longer.data(), int(longer.size()));
    const float* y = backend->forward_batch(cache, {BatchItem{a, {7}}, BatchItem{b, {9}}});
    logits.emplace_back(y, y + 2 * size_t(vocab));
  }
  EXPECT_LE(max_abs_diff(logits[1], logits[0]), 1e-4f);
}

}  // namespace
}  // namespace kvscope

#else  // built without CUDA: the suite is here, and says why it does not run
TEST(GpuServe, BuiltWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#endif
