// kvscope bench gpu-compaction: how fast survivors slide forward on a CUDA GPU.
//
// As `bench compaction`, on the device: a Qwen3-0.6B-shaped paged cache (28
// layers, 8 KV heads x 128 dims, f32) holds N tokens, a fraction is evicted at
// random, and the compaction plan is executed by the compaction kernel (every
// move copies one K row and one V row in every layer). Its throughput is set
// against one cudaMemcpy (device to device) of the same number of bytes.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "cli/commands.h"
#include "model/config.h"
#include "util/error.h"
#include "util/format.h"
#ifdef KVSCOPE_HAVE_CUDA
#include "cli/bench_gpu_util.h"
#include "device_array.h"
#include "kernels.h"
#endif

namespace kvscope::cli {

namespace {

struct GpuCompactionBenchArgs {
  std::string config = std::string(KVSCOPE_ASSETS_DIR) + "/configs/qwen3-0.6b-config.json";
  std::vector<int> tokens = {4096, 16384};
  std::vector<double> evict = {0.5, 0.875};
  int block_size = 16;
  int calls = 5;
};

#ifdef KVSCOPE_HAVE_CUDA
using cuda::DeviceArray;

void run_gpu_compaction_bench(const GpuCompactionBenchArgs& a) {
  check_distinct(a.tokens, "--tokens");
  check_distinct(a.evict, "--evict");
  for (int n : a.tokens) check_distinct_rows(a.evict, n, [n](double f) { return kept_tokens(n, f); });
  const cuda::GpuInfo gpu = bench_gpu("bench gpu-compaction");
  const ModelConfig c = load_config_file(a.config);
  const int bs = a.block_size;
  std::printf("kvscope bench gpu-compaction: a cache shaped like %s (%s, kv_dim %d, f32: %s per token), "
              "block size %d\n", shown_path(a.config).c_str(), plural(c.num_layers, "layer").c_str(), c.kv_dim(),
              kib(2 * int64_t(c.num_layers) * c.kv_dim() * 4).c_str(), bs);
  print_gpu_machine(gpu);
  std::printf("\n| tokens | evicted | moves | bytes moved | compaction | GB/s | cudaMemcpy D2D of the same bytes | GB/s | compaction / memcpy |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");

  for (int n : a.tokens) {
    const int num_blocks = int(blocks_for_tokens(n, bs));
    const size_t layer_floats = size_t(num_blocks) * bs * c.kv_dim();
    DeviceArray<float> k(layer_floats * c.num_layers), v(layer_floats * c.num_layers);
    CUDA_CHECK(cudaMemset(k.get(), 0, layer_floats * c.num_layers * sizeof(float)));  // touch every page
    CUDA_CHECK(cudaMemset(v.get(), 0, layer_floats * c.num_layers * sizeof(float)));
    for (double f : a.evict) {
      std::fprintf(stderr, "%d tokens, evict %.3f...\n", n, f);
      PagedKvCache cache(num_blocks, bs, MemoryStrategy::Compact);
      const int seq = cache.add_sequence();
      fill_sequence(cache, seq, n, f, 1);
      const double evicted = 1 - double(kept_tokens(n, f)) / n;  // as done: 0.99 of 64 tokens keeps none, 100%
      const std::vector<Move> plan = cache.plan_compaction(seq);
      if (plan.empty()) {  // nothing evicted, or nothing kept: no survivor has to move
        std::printf("| %d | %.1f%% | 0 | 0 MB | nothing to move | | | | |\n", n, 100 * evicted);
        continue;
      }
      std::vector<int> from(plan.size()), to(plan.size());
      for (size_t i = 0; i < plan.size(); ++i) {
        from[i] = plan[i].from.block * bs + plan[i].from.slot;
        to[i] = plan[i].to.block * bs + plan[i].to.slot;
      }
      DeviceArray<int> d_from, d_to;
      d_from.upload(from);
      d_to.upload(to);
      const size_t bytes = plan.size() * size_t(c.num_layers) * 2 * c.kv_dim() * sizeof(float);
      // Running the same plan again moves the same bytes (the values are stale, the work is not).
      const double compact = gpu_seconds(a.calls, [&] {
        cuda::compact(k.get(), v.get(), d_from.get(), d_to.get(), int(plan.size()), c.num_layers, layer_floats,
                      c.kv_dim());
      });
      DeviceArray<char> src(bytes), dst(bytes);
      const double copy = gpu_seconds(a.calls, [&] {
        CUDA_CHECK(cudaMemcpy(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice));
      });
      std::printf("| %d | %.1f%% | %zu | %.1f MB | %.3f ms | %.0f | %.3f ms | %.0f | %.0f%% |\n", n, 100 * evicted,
                  plan.size(), bytes / 1e6, 1e3 * compact, bytes / compact / 1e9, 1e3 * copy, bytes / copy / 1e9,
                  100 * copy / compact);
    }
  }
  std::printf("\nGB/s counts the bytes moved once (each is read once and written once, as in memcpy; the card's peak\n"
              "bandwidth counts reads and writes together, so a copy tops out near half of it). Time per call, best of 3\n"
              "runs of %d calls (CUDA events). The kernel: one thread per 16-byte column of a layer's K or V rows\n"
              "replays the plan in order, reading 8 moves ahead (kernels/compaction.cu).\n",
              a.calls);
}
#endif

}  // namespace

void add_bench_gpu_compaction_command(CLI::App& bench) {
  auto args = std::make_shared<GpuCompactionBenchArgs>();
  CLI::App* cmd = bench.add_subcommand("gpu-compaction", "CUDA: compaction throughput against cudaMemcpy of the same bytes");
  cmd->add_option("--config", args->config, "config.json giving the cache shape")
      ->capture_default_str()
      ->check(kFileName);
  cmd->add_option("--tokens", args->tokens, "Tokens in the cache before eviction")
      ->delimiter(',')
      ->capture_default_str()
      ->check(kPositive);
  cmd->add_option("--evict", args->evict, "Fractions evicted at random before compacting")
      ->delimiter(',')
      ->capture_default_str()
      ->check(kFraction);
  cmd->add_option("--block-size", args->block_size, "Tokens per block")
      ->capture_default_str()
      ->check(kBlockSize);
  cmd->add_option("--calls", args->calls, "Calls per timing")->capture_default_str()->check(kPositive);
  cmd->callback([args] {
#ifdef KVSCOPE_HAVE_CUDA
    run_gpu_compaction_bench(*args);
#else
    throw Error("bench gpu-compaction: this build has no CUDA backend (no CUDA toolkit was found at configure time)");
#endif
  });
}

}  // namespace kvscope::cli
