// kvscope bench attention: the cost of keeping the scores.
//
// The flash-style path never holds a row of attention scores; the eager path
// materialises softmax(Q K^T) for a whole head, which is what H2O and SnapKV need.
// For contexts of 1K, 4K and 16K tokens of one Qwen3-0.6B attention layer (random
// K/V in a paged cache), this times both paths for one decode query and for a
// chunk of queries at the end of the context, and measures the extra memory each
// takes while it runs (peak resident memory above the resident memory before).
#include <malloc.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "cli/bench_util.h"
#include "cli/commands.h"
#include "model/attention.h"
#include "model/config.h"
#include "util/format.h"
#include "util/max_abs_diff.h"
#include "util/memory_check.h"
#include "util/splitmix64.h"

namespace kvscope::cli {

namespace {

struct AttentionBenchArgs {
  std::string config = std::string(KVSCOPE_ASSETS_DIR) + "/configs/qwen3-0.6b-config.json";
  std::vector<int> contexts = {1024, 4096, 16384};
  int queries = 256;
  int repeats = 3;
};

struct Timing {
  double seconds = 0;      // best of the timed calls
  double extra_bytes = 0;  // peak memory above the memory before the call
};

// How glibc's malloc treats memory a call frees. Its defaults hand large blocks
// back to the system (munmap, or a trim of the heap's top) and the next call
// page-faults them in again, zeroed, so the time of a call depended on what the
// process had allocated before: 1024 tokens measured first took eager 7x flash's
// time, measured after 4096 tokens 0.9x. Each measurement therefore runs in two phases:
//   Faults    every block over 128 KiB is mapped on demand and unmapped when freed (glibc's
//             defaults, made fixed), and the free memory the process held is given back
//             first: the peak memory a call adds is what it allocates.
//   Keeps     freed memory stays in the process (blocks up to 32 MiB, glibc's largest
//             such threshold, from the heap; no trim under 1 GiB): after warm-up calls,
//             a call's time is attention's, not the page faults of its allocations.
enum class MallocPhase { Faults, Keeps };
void set_malloc(MallocPhase phase) {
  const bool keeps = phase == MallocPhase::Keeps;
  mallopt(M_MMAP_THRESHOLD, keeps ? 32 << 20 : 128 << 10);
  mallopt(M_TRIM_THRESHOLD, keeps ? 1 << 30 : 128 << 10);
}

// The most extra memory of a call in the Faults phase, then the best time of
// `repeats` calls in the Keeps phase, after untimed ones (at least 3, and 50 ms).
template <class Fn>
Timing measure(int repeats, Fn&& fn) {
  Timing t{1e30, 0};
  set_malloc(MallocPhase::Faults);
  malloc_trim(0);  // what the last Keeps phase kept goes back: a call now counts every page it touches
  const double before = current_memory_bytes();
  reset_peak_memory();
  fn();
  // A call can read below zero (an OpenMP thread's arena trimmed as it frees): it added nothing.
  t.extra_bytes = std::max(0.0, peak_memory_bytes() - before);

  set_malloc(MallocPhase::Keeps);
  const double warm_up_start = now_seconds();
  for (int r = 0; r < 3 || now_seconds() - warm_up_start < 0.05; ++r) fn();
  for (int r = 0; r < repeats; ++r) {
    const double t0 = now_seconds();
    fn();
    t.seconds = std::min(t.seconds, now_seconds() - t0);
  }
  return t;
}

// The longest context's K/V storage plus what eager attention holds per thread
// (a copy of one KV head's K and V, Q, P = softmax(Q K^T) and the output), in bytes.
void check_fits_longest_context(const ModelConfig& c, const AttentionBenchArgs& a, int block_size) {
  const size_t n = size_t(*std::max_element(a.contexts.begin(), a.contexts.end()));
  const size_t T = std::min(size_t(a.queries), n), hd = size_t(c.head_dim);
  const size_t storage = KvStorage::bytes_per_block(c, block_size) * size_t(blocks_for_tokens(n, block_size));
  const size_t eager = size_t(omp_get_max_threads()) * (2 * n * hd + T * n + 2 * T * hd) * sizeof(float);
  const std::string queries = std::to_string(T) + (T == 1 ? " query" : " queries");
  check_fits_in_memory(storage + eager, "bench attention at a context of " + std::to_string(n) + " tokens (" + queries +
                                            "; its K/V and eager's scores)");
}

void run_attention_bench(const AttentionBenchArgs& a) {
  check_distinct(a.contexts, "--contexts");
  ModelConfig c = load_config_file(a.config);
  c.num_layers = 1;  // one layer is enough: attention is per layer
  const AttentionShape shape{c.num_heads, c.num_kv_heads, c.head_dim};
  const int block_size = 16;
  check_fits_longest_context(c, a, block_size);  // before the table, not half-way down it
  std::printf("kvscope bench attention: one attention layer of %s (%s, %s, head_dim %d), f32\n",
              shown_path(a.config).c_str(), plural(c.num_heads, "query head").c_str(),
              plural(c.num_kv_heads, "KV head").c_str(), c.head_dim);
  std::printf("machine: %s, %s\n\n", cpu_name().c_str(), plural(omp_get_max_threads(), "thread").c_str());
  std::printf("| context | queries | flash time | eager time | eager / flash | flash extra memory | eager extra memory | max abs(flash - eager) |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");

  SplitMix64 rng(42);
  auto uniform = [&rng] { return rng.symmetric(); };

  for (int n : a.contexts) {
    std::fprintf(stderr, "context %d...\n", n);
    PagedKvCache cache(int(blocks_for_tokens(n, block_size)), block_size, MemoryStrategy::HolesOnly);
    KvStorage kv(c, cache.num_blocks(), block_size);
    const int seq = cache.add_sequence();
    for (int i = 0; i < n; ++i) cache.append(seq);
    for (float& x : kv.k) x = uniform();
    for (float& x : kv.v) x = uniform();
    const LiveSlots keys = live_slots(cache, seq);
    const int table_slots = int(cache.sequence(seq).blocks.size()) * block_size;

    for (int T : query_rows(a.queries, n)) {  // the last T tokens of the context are the queries
      std::vector<float> q(size_t(T) * c.q_dim()), out_flash(q.size()), out_eager(q.size());
      for (float& x : q) x = 2.0f * uniform();
      std::vector<int64_t> q_pos(static_cast<size_t>(T));
      for (int t = 0; t < T; ++t) q_pos[t] = n - T + t;  // the last T tokens of the context
      std::vector<float> sums(size_t(c.num_heads) * table_slots);

      const Timing flash = measure(a.repeats, [&] {
        attention_flash(out_flash.data(), q.data(), q_pos.data(), T, keys, kv, 0, shape);
      });
      const Timing eager = measure(a.repeats, [&] {
        attention_eager(out_eager.data(), q.data(), q_pos.data(), T, keys, kv, 0, shape, 0, sums.data(), table_slots);
      });
      const float diff = max_abs_diff(out_flash.data(), out_eager.data(), q.size());
      std::printf("| %d | %d | %.3f ms | %.3f ms | %.2fx | %.1f MB | %.1f MB | %.1e |\n", n, T, 1e3 * flash.seconds,
                  1e3 * eager.seconds, eager.seconds / flash.seconds, flash.extra_bytes / 1e6, eager.extra_bytes / 1e6,
                  double(diff));
    }
  }
  std::printf("\ntime = the best of %s, after at least 3 untimed ones (and 50 ms of them), with freed memory\n"
              "kept in the process (mallopt), so no call page-faults in what the one before it freed (blocks up\n"
              "to 32 MiB = 33.6 MB; P at 16384 x 512 is that size exactly, and is still mapped fresh every call).\n"
              "extra memory = peak resident memory during one call minus resident memory before it, with every\n"
              "block over 128 KiB mapped fresh (whole process; page granularity, so small working sets read as 0).\n"
              "Eager holds P = softmax(Q K^T) for one head per thread, [queries x context] floats, plus a contiguous\n"
              "copy of one KV head's keys and values.\n",
              plural(a.repeats, "call").c_str());
}

}  // namespace

void add_bench_attention_command(CLI::App& bench) {
  auto args = std::make_shared<AttentionBenchArgs>();
  CLI::App* cmd = bench.add_subcommand("attention", "Flash-style versus eager attention: time and memory at 1K-16K tokens");
  cmd->add_option("--config", args->config, "config.json giving the attention shape")
      ->capture_default_str()
      ->check(kFileName);
  cmd->add_option("--contexts", args->contexts, "Context lengths in tokens")
      ->delimiter(',')
      ->capture_default_str()
      ->check(kPositive);
  cmd->add_option("--queries", args->queries,
                  "Queries in the chunk row (a piece of prefill); at a shorter context, the whole context")
      ->capture_default_str()
      ->check(kPositive);
  cmd->add_option("--repeats", args->repeats,
                  "Timed calls per measurement (after the untimed ones): the best time is reported; the "
                  "extra memory is one call's, measured apart")
      ->capture_default_str()
      ->check(kPositive);
  cmd->callback([args] { run_attention_bench(*args); });
}

}  // namespace kvscope::cli
