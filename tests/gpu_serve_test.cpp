// Batched steps on the CUDA backend against the CPU: CudaBackend::forward_batch
// (one forward per sequence, after the same checks) must give the logits the CPU's
// batched pass gives, and eviction must keep the same tokens on both.
#include "gpu_test.h"

#ifdef KVSCOPE_HAVE_CUDA
#include "cuda_backend.h"
#include "engine/engine.h"
#include "model/weights.h"
#include "test_paths.h"

namespace kvscope {
namespace {

TEST(GpuServe, BatchedStepsMatchTheCpu) {
  KVSCOPE_REQUIRE_GPU();
  const Model m = load_model(test::tiny_model("tiny-untied"));
  EngineConfig c;
  c.num_blocks = 64;
  c.block_size = 4;
  c.strategy = MemoryStrategy::Compact;
  c.schedule = {12, 6, 2, 5};
  c.policy = [] { return make_policy("h2o", 1); };
  Engine cpu(m, c);
  c.backend = cuda::make_backend;
  Engine gpu(m, c);
  const int vocab = m.config.vocab_size;
  std::vector<int> seqs;
  for (int i = 0; i < 3; ++i) {
    seqs.push_back(cpu.add_sequence());
    gpu.add_sequence();
  }
  for (int step = 0; step < 40; ++step) {
    // Sequence i prefills 7 + i tokens in chunks of 4 from step i, then decodes.
    std::vector<BatchItem> items;
    for (int i = 0; i < 3; ++i) {
      if (step < i) continue;
      const int fed = int(cpu.cache().sequence(seqs[i]).next_pos), prompt = 7 + i;
      BatchItem it{seqs[i], {}};
      for (int t = fed; t < std::min(prompt, fed + 4); ++t) it.tokens.push_back((t * 31 + i * 7 + 3) % vocab);
      if (it.tokens.empty()) it.tokens.push_back((step * 17 + i) % vocab);
      items.push_back(it);
    }
    const float* a = cpu.step_batch(items);
    const std::vector<float> want(a, a + items.size() * size_t(vocab));
    const float* b = gpu.step_batch(items);
    EXPECT_LE(max_abs_diff(want, std::vector<float>(b, b + want.size())), 1e-4f) << "step " << step;
    for (int s : seqs) ASSERT_EQ(cpu.cache().live_positions(s), gpu.cache().live_positions(s)) << "step " << step;
  }
  EXPECT_EQ(cpu.bytes_moved(), gpu.bytes_moved());
}

}  // namespace
}  // namespace kvscope

#else  // built without CUDA: the suite is here, and says why it does not run
TEST(GpuServe, BuiltWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#endif
