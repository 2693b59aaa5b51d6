// Chapter 5: the scores FlashAttention never keeps.
//
// The two attention paths of core/model/attention.h on the same paged cache (one
// Qwen3-0.6B-shaped layer, random keys and values): the same output, but only the
// eager one has the attention probabilities H2O and SnapKV score tokens by. Then
// the memory each path holds while it runs, as formulas with the shapes put in.
// Timings depend on the machine: they are in bench-attention.md, not here.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "cache/kv_storage.h"
#include "evict/policy.h"
#include "model/attention.h"
#include "model/config.h"
#include "sim/synthetic.h"
#include "tutorial.h"
#include "util/max_abs_diff.h"

using namespace kvscope;
using namespace kvscope::tutorial;

// attention_flash walks kFlashTile keys at a time with kFlashQueryTile queries (core/model/attention.h).
constexpr int kTile = kFlashTile, kQueryTile = kFlashQueryTile;

constexpr int kCached = 4096, kBlockSize = 16;  // tokens in the cache, tokens per block

// 1. Both paths on the same paged cache: the same output, but only eager has the
//    probabilities (each head's sums over T queries add up to T).
static void same_output(const ModelConfig& c, const std::string& config_file) {
  const AttentionShape shape{c.num_heads, c.num_kv_heads, c.head_dim};
  const int n = kCached, block_size = kBlockSize;

  // A paged cache of n tokens, keys and values drawn uniformly from [-1, 1).
  PagedKvCache cache(n / block_size, block_size, MemoryStrategy::HolesOnly);
  KvStorage kv(c, cache.num_blocks(), block_size);
  const int seq = cache.add_sequence();
  for (int i = 0; i < n; ++i) cache.append(seq);
  SplitMix64 rng(5);
  for (float& x : kv.k) x = float(2 * rng.uniform() - 1);
  for (float& x : kv.v) x = float(2 * rng.uniform() - 1);
  const LiveSlots keys = live_slots(cache, seq);
  const int table_slots = int(cache.sequence(seq).blocks.size()) * block_size;

  std::printf("One attention layer shaped like %s: %d query heads, %d KV heads, head_dim %d;\n", config_file.c_str(),
              c.num_heads, c.num_kv_heads, c.head_dim);
  std::printf("%s cached tokens in blocks of %d (random keys and values), f32.\n\n", commas(n).c_str(), block_size);
  std::printf("  %7s  %-33s  %s\n", "queries", "max |flash - eager|", "eager's probabilities, summed per head");

  for (int T : {1, 64}) {
    std::vector<float> q(size_t(T) * c.q_dim()), out_flash(q.size()), out_eager(q.size());
    for (float& x : q) x = float(4 * rng.uniform() - 2);
    std::vector<int64_t> q_pos(static_cast<size_t>(T));
    for (int t = 0; t < T; ++t) q_pos[t] = n - T + t;  // the last T tokens: a decode step, or a chunk of prefill

    attention_flash(out_flash.data(), q.data(), q_pos.data(), T, keys, kv, /*layer=*/0, shape);
    // prob_sums[h * table_slots + slot] += P[t, slot] for every query t: what H2O accumulates.
    std::vector<float> prob_sums(size_t(c.num_heads) * table_slots, 0.0f);
    attention_eager(out_eager.data(), q.data(), q_pos.data(), T, keys, kv, /*layer=*/0, shape, /*sum_from=*/0,
                    prob_sums.data(), table_slots);

    const float worst = max_abs_diff(out_flash.data(), out_eager.data(), q.size());
    // Each query's probabilities add up to 1, so each head's column sums add up to T.
    double lo = 1e30, hi = 0;
    for (int h = 0; h < c.num_heads; ++h) {
      double total = 0;
      for (int j = 0; j < table_slots; ++j) total += prob_sums[size_t(h) * table_slots + j];
      lo = std::min(lo, total), hi = std::max(hi, total);
    }
    const std::string same = worst <= 1e-5f ? "<= 1e-5 (the same, rounded apart)" : "> 1e-5 (!)";
    std::printf("  %7d  %-33s  %s\n", T, same.c_str(),
                format("%d heads x %s slots, each head adds to %.2f", c.num_heads, commas(table_slots).c_str(), hi).c_str());
    if (hi - lo > 1e-2) std::printf("  (!) the heads' sums range from %.4f to %.4f\n", lo, hi);
  }
  std::printf("  flash has no probabilities to give: it never holds a row of them.\n");
}

// 2. Who needs them: the policies that score tokens by the attention they received.
static void who_needs_them() {
  std::printf("\nPolicies that need the probabilities, and so the eager path (EvictionPolicy::needs_attention()):\n");
  for (const std::string name : {"streaming", "random", "h2o", "snapkv"}) {
    const std::unique_ptr<EvictionPolicy> policy = make_policy(name, /*seed=*/1);
    if (!policy->needs_attention())
      std::printf("  %-9s  no\n", name.c_str());
    else if (policy->window() != EvictionPolicy::kEveryQuery)
      std::printf("  %-9s  yes: the rows of the newest steps, at least %d queries\n", name.c_str(), policy->window());
    else
      std::printf("  %-9s  yes: the rows of every query since the token arrived\n", name.c_str());
  }
}

// 3. The memory each path holds while it runs, as formulas with the shapes put in.
static void memory_each_path_holds(const ModelConfig& c) {
  // Memory while running (per thread; each thread works on one KV head, or one
  // tile of queries and one KV head, at a time).
  const int hd = c.head_dim, rows = kQueryTile * (c.num_heads / c.num_kv_heads);
  //                          Q and output O     scores S      max, sum   K and V tiles
  const int64_t flash_floats = 2 * rows * hd + rows * kTile + 2 * rows + 2 * kTile * hd;
  std::printf("\nWhat each path holds while it runs, per thread, f32:\n");
  std::printf("  flash, per tile of %d queries x %d query heads (one KV head, %d rows): Q and output O 2 x [%d x %d]\n",
              kQueryTile, c.num_heads / c.num_kv_heads, rows, rows, hd);
  std::printf("         + scores S [%d x %d] + max, sum 2 x [%d] + K, V tiles 2 x [%d x %d] = %s floats = %s,\n", rows,
              kTile, rows, kTile, hd, commas(flash_floats).c_str(), table_bytes(double(4 * flash_floats)).c_str());
  std::printf("         at any context length\n");
  std::printf("  eager, per KV head: P [queries x context] + K, V copies 2 x [context x %d]"
              " + Q, O 2 x [queries x %d]\n", hd, hd);
  std::printf("  %9s  %9s  %12s  %12s  %12s\n", "context", "queries", "P", "K, V copies", "total");
  for (int64_t ctx : {int64_t(4096), int64_t(16384), int64_t(40960)}) {
    for (int64_t T : {int64_t(1), int64_t(256), ctx}) {
      // P, the keys and values copied out of the paged cache, and the queries and their outputs.
      const double p = 4.0 * double(T) * double(ctx), kv_copies = 4.0 * 2 * double(ctx) * hd;
      const double qo = 4.0 * 2 * double(T) * hd;
      std::printf("  %9s  %9s  %12s  %12s  %12s%s\n", commas(ctx).c_str(), commas(T).c_str(), table_bytes(p).c_str(),
                  table_bytes(kv_copies).c_str(), table_bytes(p + kv_copies + qo).c_str(), T == ctx ? "  (a whole prefill)" : "");
    }
  }
}

static void chapter() {
  const std::string config_file = "assets/configs/qwen3-0.6b-config.json";
  ModelConfig c = load_config_file(repo_path(config_file));
  c.num_layers = 1;  // attention is per layer: one is enough
  same_output(c, config_file);
  who_needs_them();
  memory_each_path_holds(c);
}

int main(int argc, char** argv) { return run_chapter(argc, argv, chapter); }
