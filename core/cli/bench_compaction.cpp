// kvscope bench compaction: how fast survivors slide forward.
//
// A Qwen3-0.6B-shaped paged cache (28 layers, 8 KV heads x 128 dims, f32) is
// filled with N tokens, a fraction is evicted at random, and the compaction plan
// is executed: every move copies one K row and one V row (kv_dim floats each) in
// every layer. Its throughput is compared with one plain memcpy of the same
// number of bytes, the best a copy can do on this machine.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "cache/kv_storage.h"
#include "cli/bench_util.h"
#include "cli/commands.h"
#include "util/format.h"
#include "util/memory_check.h"

namespace kvscope::cli {

namespace {

struct CompactionBenchArgs {
  std::string config = std::string(KVSCOPE_ASSETS_DIR) + "/configs/qwen3-0.6b-config.json";
  int tokens = 4096;
  std::vector<double> evict = {0.5, 0.875};
  std::vector<int> block_sizes = {16};
  int repeats = 3;
};

// The K/V storage at the largest block size, plus memcpy's source and destination
// (at most every token a survivor), in bytes.
void check_fits(const ModelConfig& c, const CompactionBenchArgs& a) {
  size_t storage = 0;
  for (int bs : a.block_sizes)
    storage = std::max(storage, KvStorage::bytes_per_block(c, bs) * size_t(blocks_for_tokens(a.tokens, bs)));
  const size_t copies = 2 * KvStorage::bytes_per_block(c, 1) * size_t(a.tokens);
  check_fits_in_memory(storage + copies, "bench compaction of " + std::to_string(a.tokens) +
                                             " tokens (the K/V storage, and memcpy's two buffers)");
}

void run_compaction_bench(const CompactionBenchArgs& a) {
  check_distinct(a.evict, "--evict");
  check_distinct(a.block_sizes, "--block-sizes");
  check_distinct_rows(a.evict, a.tokens, [&](double f) { return kept_tokens(a.tokens, f); });
  const ModelConfig c = load_config_file(a.config);
  check_fits(c, a);  // before the table, not half-way down it
  std::printf("kvscope bench compaction: %s in a cache shaped like %s (%s, kv_dim %d, f32: %s per token)\n",
              plural(a.tokens, "token").c_str(), shown_path(a.config).c_str(), plural(c.num_layers, "layer").c_str(),
              c.kv_dim(), kib(2 * int64_t(c.num_layers) * c.kv_dim() * 4).c_str());
  std::printf("machine: %s\n\n", cpu_name().c_str());
  std::printf("| block size | evicted | moves | bytes moved | compaction | GB/s | memcpy of the same bytes | GB/s | compaction / memcpy |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");

  for (int bs : a.block_sizes) {
    for (double f : a.evict) {
      std::fprintf(stderr, "block size %d, evict %.3f...\n", bs, f);
      const double evicted = 1 - double(kept_tokens(a.tokens, f)) / a.tokens;  // as done: 0.99 of 64 tokens is 100%
      double best_compact = 1e30, best_memcpy = 1e30;
      size_t bytes = 0, moves = 0;
      for (int r = 0; r < a.repeats; ++r) {
        PagedKvCache cache(int(blocks_for_tokens(a.tokens, bs)), bs, MemoryStrategy::Compact);
        KvStorage kv(c, cache.num_blocks(), bs);
        std::fill(kv.k.begin(), kv.k.end(), 1.0f);  // touch every page before timing
        std::fill(kv.v.begin(), kv.v.end(), 2.0f);
        // The same tokens evicted in every run (seed 1): the best time is then one
        // plan's, and its bytes are the row's.
        const int seq = cache.add_sequence();
        fill_sequence(cache, seq, a.tokens, f, 1);

        const std::vector<Move> plan = cache.plan_compaction(seq);
        moves = plan.size();
        if (plan.empty()) break;  // nothing evicted, or nothing kept: no survivor has to move
        double t0 = now_seconds();
        bytes = kv.apply(plan);
        best_compact = std::min(best_compact, now_seconds() - t0);
        cache.commit_compaction(seq, plan);

        std::vector<char> src(bytes, 1), dst(bytes, 0);
        t0 = now_seconds();
        std::memcpy(dst.data(), src.data(), bytes);
        best_memcpy = std::min(best_memcpy, now_seconds() - t0);
        if (dst[bytes / 2] != 1) std::printf("memcpy check failed\n");
      }
      if (moves == 0) {
        std::printf("| %d | %.1f%% | 0 | 0 MB | nothing to move | | | | |\n", bs, 100 * evicted);
        continue;
      }
      std::printf("| %d | %.1f%% | %zu | %.1f MB | %.2f ms | %.1f | %.2f ms | %.1f | %.0f%% |\n", bs, 100 * evicted,
                  moves, bytes / 1e6, 1e3 * best_compact, bytes / best_compact / 1e9, 1e3 * best_memcpy,
                  bytes / best_memcpy / 1e9, 100 * best_memcpy / best_compact);
    }
  }
  std::printf("\nGB/s counts the bytes moved once (each is read once and written once, as in memcpy); best of %s "
              "of one plan (random eviction, seed 1), 1 thread.\n",
              plural(a.repeats, "run").c_str());
}

}  // namespace

void add_bench_compaction_command(CLI::App& bench) {
  auto args = std::make_shared<CompactionBenchArgs>();
  CLI::App* cmd = bench.add_subcommand("compaction", "Compaction throughput against a plain memcpy of the same bytes");
  cmd->add_option("--config", args->config, "config.json giving the cache shape")
      ->capture_default_str()
      ->check(kFileName);
  cmd->add_option("--tokens", args->tokens, "Tokens in the cache before eviction")
      ->capture_default_str()
      ->check(kPositive);
  cmd->add_option("--evict", args->evict, "Fractions evicted at random before compacting")
      ->delimiter(',')
      ->capture_default_str()
      ->check(kFraction);
  cmd->add_option("--block-sizes", args->block_sizes, "Block sizes")
      ->delimiter(',')
      ->capture_default_str()
      ->check(kBlockSize);
  cmd->add_option("--repeats", args->repeats, "Runs per row; the best is reported")
      ->capture_default_str()
      ->check(kPositive);
  cmd->callback([args] { run_compaction_bench(*args); });
}

}  // namespace kvscope::cli
