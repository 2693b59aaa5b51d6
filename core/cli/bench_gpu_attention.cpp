// kvscope bench gpu-attention: paged attention on a CUDA GPU.
//
// One attention layer of a Qwen3-0.6B-shaped model (16 query heads, 8 KV heads,
// head_dim 128, f32 K/V) in a paged cache of block size 16.
//
// Table 1, decode: one query per head against 1K..128K cached tokens, with the
// table full or with half its tokens evicted at random (holes the kernel skips).
// Decode attention reads every live K and V row once, so its speed is a
// bandwidth: live K/V bytes / time, and that as a fraction of the card's peak.
//
// Table 2, eager versus flash: the same layer for one query and for a chunk of
// 256 queries, timed both ways, with the device memory each needs beyond the
// cache: eager keeps P [heads, queries, context] (plus the column sums H2O and
// SnapKV read); flash keeps tiles in shared memory (decode: small per-slice partials).
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "cli/commands.h"
#include "model/config.h"
#include "util/error.h"
#include "util/format.h"
#include "util/memory_check.h"
#ifdef KVSCOPE_HAVE_CUDA
#include "cli/bench_gpu_util.h"
#include "device_array.h"
#include "kernels.h"
#include "util/max_abs_diff.h"
#include "util/splitmix64.h"
#endif

namespace kvscope::cli {

namespace {

struct GpuAttentionBenchArgs {
  std::string config = std::string(KVSCOPE_ASSETS_DIR) + "/configs/qwen3-0.6b-config.json";
  std::vector<int> contexts = {1024, 4096, 16384, 65536, 131072};
  std::vector<int> eager_contexts = {1024, 4096, 16384, 65536};
  double holes = 0.5;  // the fraction evicted in the "holes" rows
  int queries = 256;
  int calls = 20;
};

#ifdef KVSCOPE_HAVE_CUDA
using cuda::DeviceArray;

// One layer's paged cache on the GPU, with its table.
struct GpuLayer {
  PagedKvCache cache;
  int seq;
  int live;
  std::vector<int> blocks, slot_pos;
  DeviceArray<int> d_blocks, d_slot_pos;
  cuda::PagedKv kv;

  GpuLayer(int n, double evict, const DeviceArray<float>& k, const DeviceArray<float>& v, int block_size)
      : cache(int(blocks_for_tokens(n, block_size)), block_size, MemoryStrategy::HolesOnly),
        seq(cache.add_sequence()) {
    fill_sequence(cache, seq, n, evict, 7);
    live = cache.sequence(seq).live;
    table_of(cache, seq, blocks, slot_pos);
    d_blocks.upload(blocks);
    d_slot_pos.upload(slot_pos);
    kv = {k.get(), v.get(), d_blocks.get(), d_slot_pos.get(), int(slot_pos.size()), block_size};
  }
};

void run_gpu_attention_bench(const GpuAttentionBenchArgs& a) {
  check_distinct(a.contexts, "--contexts");
  check_distinct(a.eager_contexts, "--eager-contexts");
  for (int n : a.contexts)  // the holes row keeps kept_tokens(n, holes): none of 1 token
    if (kept_tokens(n, a.holes) < 1)
      throw Error("--contexts " + std::to_string(n) + ": its row with " + percent(a.holes) +
                  " of the tokens evicted would keep none to attend to; give 2 tokens or more");
  const cuda::GpuInfo gpu = bench_gpu("bench gpu-attention");
  const ModelConfig c = load_config_file(a.config);
  const cuda::Heads heads{c.num_heads, c.num_kv_heads, c.head_dim};
  const int block_size = 16, kv_dim = c.kv_dim();
  // Random K/V for the longest context, shared by every row; random queries.
  int max_n = a.queries;
  for (int n : a.contexts) max_n = std::max(max_n, n);
  for (int n : a.eager_contexts) max_n = std::max(max_n, n);
  const size_t slots = size_t(blocks_for_tokens(max_n, block_size)) * block_size;
  // K and V go through one host array on their way up: too big for the host is said
  // before the table (too big for the device, by cudaMalloc's error at the upload).
  check_fits_in_memory(slots * kv_dim * sizeof(float), "bench gpu-attention at " + std::to_string(max_n) +
                                                           " tokens (the K/V, staged on the host)");
  std::printf("kvscope bench gpu-attention: one attention layer of %s (%s, %s, head_dim %d), f32 K/V, block size %d\n",
              shown_path(a.config).c_str(), plural(c.num_heads, "query head").c_str(),
              plural(c.num_kv_heads, "KV head").c_str(), c.head_dim, block_size);
  print_gpu_machine(gpu);

  SplitMix64 rng(42);
  std::vector<float> host(slots * kv_dim);
  DeviceArray<float> k, v;
  for (float& x : host) x = rng.symmetric();
  k.upload(host);
  for (float& x : host) x = rng.symmetric();
  v.upload(host);
  std::vector<float> q_host(size_t(a.queries) * c.q_dim());
  for (float& x : q_host) x = 2.0f * rng.symmetric();
  DeviceArray<float> q, out, out2, workspace, probs, sums;
  q.upload(q_host);
  out.reserve(q_host.size());
  out2.reserve(q_host.size());
  DeviceArray<int> q_pos;

  std::printf("\n### Decode: one query, paged attention (split over the table, online softmax)\n\n");
  std::printf("| context | holes | live tokens | table slots | time | GB/s (live K/V) | of peak |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (int n : a.contexts) {
    for (double evict : {0.0, a.holes}) {
      std::fprintf(stderr, "decode, context %d, evicted %.2f...\n", n, evict);
      GpuLayer layer(n, evict, k, v, block_size);
      const std::vector<int> pos = {n};  // the next token: sees every cached one
      q_pos.upload(pos);
      workspace.reserve(cuda::paged_attention_workspace(1, heads, layer.kv.table_slots));
      const double s = gpu_seconds(a.calls, [&] {
        cuda::paged_attention(out.get(), q.get(), q_pos.get(), 1, layer.kv, heads, workspace.get());
      });
      const double bytes = 2.0 * layer.live * kv_dim * sizeof(float);  // K and V rows, every KV head
      const std::string of_peak =
          percent_of(bytes / s, gpu.peak_bandwidth()) + (gpu.fits_in_l2(bytes) ? " (in L2)" : "");
      std::printf("| %d | %s | %d | %d | %.1f us | %.0f | %s |\n", n, evict > 0 ? "50% evicted" : "none", layer.live,
                  layer.kv.table_slots, 1e6 * s, bytes / s / 1e9, of_peak.c_str());
    }
  }
  std::printf("\nGB/s = bytes of the live K and V rows (%d floats each) / time: what decode must read. Holes are\n"
              "skipped before K is read; their table entries still cost a position read. Time per call, best of 3\n"
              "runs of %d back-to-back calls (CUDA events, launches included). \"(in L2)\": the live K/V fits in\n"
              "the card's L2 cache, where back-to-back calls can find it, so that row measures L2 and launches,\n"
              "not DRAM; the peak is DRAM's.\n", kv_dim, a.calls);

  std::printf("\n### Eager versus flash: time and memory beyond the cache (full table)\n\n");
  std::printf("| context | queries | flash time | eager time | eager / flash | flash extra memory | eager extra memory | max abs(flash - eager) |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (int n : a.eager_contexts) {
    GpuLayer layer(n, 0.0, k, v, block_size);
    const int table = layer.kv.table_slots;
    for (int T : query_rows(a.queries, n)) {
      std::fprintf(stderr, "eager vs flash, context %d, %d queries...\n", n, T);
      std::vector<int> pos(static_cast<size_t>(T));
      for (int t = 0; t < T; ++t) pos[t] = n - T + t;  // the last T tokens of the context
      q_pos.upload(pos);
      size_t flash_bytes = 0;
      double flash = 0;
      if (T == 1) {
        flash_bytes = cuda::paged_attention_workspace(T, heads, table) * sizeof(float);
        workspace.reserve(flash_bytes / sizeof(float));
        flash = gpu_seconds(a.calls, [&] {
          cuda::paged_attention(out.get(), q.get(), q_pos.get(), T, layer.kv, heads, workspace.get());
        });
      } else {
        flash = gpu_seconds(a.calls, [&] { cuda::flash_attention(out.get(), q.get(), q_pos.get(), T, layer.kv, heads); });
      }
      const size_t p_floats = size_t(c.num_heads) * T * table, sum_floats = size_t(c.num_heads) * table;
      probs.reserve(p_floats);
      sums.reserve(sum_floats);
      sums.zero(sum_floats);
      const double eager = gpu_seconds(a.calls, [&] {
        cuda::eager_attention(out2.get(), probs.get(), sums.get(), 0, q.get(), q_pos.get(), T, layer.kv, heads);
      });
      const std::vector<float> o1 = out.to_host(size_t(T) * c.q_dim()), o2 = out2.to_host(size_t(T) * c.q_dim());
      const float diff = max_abs_diff(o1, o2);
      const double eager_bytes = double(p_floats + sum_floats) * sizeof(float);
      std::printf("| %d | %d | %.3f ms | %.3f ms | %.2fx | %.2f MB | %.1f MB | %.1e |\n", n, T, 1e3 * flash,
                  1e3 * eager, eager / flash, flash_bytes / 1e6, eager_bytes / 1e6, double(diff));
    }
  }
  std::printf("\nflash: 1 query = the decode kernel (extra memory: its per-slice partial results); more queries = the\n"
              "tiled prefill kernel (tiles in shared memory only). eager: P = softmax(Q K^T) for every head, [heads x\n"
              "queries x context] floats, plus the per-slot column sums (what H2O and SnapKV need).\n");
}
#endif

}  // namespace

void add_bench_gpu_attention_command(CLI::App& bench) {
  auto args = std::make_shared<GpuAttentionBenchArgs>();
  CLI::App* cmd = bench.add_subcommand("gpu-attention",
                                       "CUDA: paged decode attention bandwidth at 1K-128K tokens; eager vs flash");
  cmd->add_option("--config", args->config, "config.json giving the attention shape")
      ->capture_default_str()
      ->check(kFileName);
  cmd->add_option("--contexts", args->contexts, "Context lengths for the decode table")
      ->delimiter(',')
      ->capture_default_str()
      ->check(kPositive);
  cmd->add_option("--eager-contexts", args->eager_contexts, "Context lengths for the eager vs flash table")
      ->delimiter(',')
      ->capture_default_str()
      ->check(kPositive);
  cmd->add_option("--queries", args->queries,
                  "Queries in the chunk rows (a piece of prefill); at a shorter context, the whole context")
      ->capture_default_str()
      ->check(kPositive);
  cmd->add_option("--calls", args->calls, "Back-to-back calls per timing")->capture_default_str()->check(kPositive);
  cmd->callback([args] {
#ifdef KVSCOPE_HAVE_CUDA
    run_gpu_attention_bench(*args);
#else
    throw Error("bench gpu-attention: this build has no CUDA backend (no CUDA toolkit was found at configure time)");
#endif
  });
}

}  // namespace kvscope::cli
