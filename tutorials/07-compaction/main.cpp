// Chapter 7: compaction.
//
// Part 1: survivors slide forward in token order; the plan for a small cache,
// executed on real K/V storage. Part 2: the bytes it moves for a Qwen3-0.6B-shaped
// cache. Part 3: when to compact, measured on the streaming schedule: every
// round, every few rounds, or only when the table holds too many blocks.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "cache/kv_storage.h"
#include "evict/policy.h"
#include "model/config.h"
#include "sim/synthetic.h"
#include "tutorial.h"
#include "util/format.h"

using namespace kvscope;
using namespace kvscope::tutorial;

// Parts 2 and 3: the blog post's cache, 16,000 tokens in blocks of 16.
constexpr int64_t kTokens = 16000;
constexpr int kBlockSize = 16;
// Part 3's streaming schedule: prune to the budget whenever budget + slack are live.
const EvictionSchedule kSchedule{/*budget=*/1024, /*slack=*/128, /*sinks=*/4, /*recent=*/32};

void print_table(const char* label, const PagedKvCache& cache, int seq) {
  const Sequence& s = cache.sequence(seq);
  std::printf("  %-7s", label);
  for (size_t i = 0; i < s.blocks.size(); ++i) {
    const int used = cache.slots_written(s, i);
    std::printf(" | block %d:", s.blocks[i]);
    for (int j = 0; j < cache.block_size(); ++j) {
      const int64_t p = j < used ? cache.position({s.blocks[i], j}) : kEmpty;
      std::printf(" %2s", p == kEmpty ? "." : std::to_string(p).c_str());
    }
  }
  std::printf(" |\n");
}

void part1_small_plan() {
  // The K/V of the tiny test model's shape: 2 layers, 2 KV heads x 32 dims.
  const ModelConfig c = load_config(repo_path("tests/models/tiny-untied"));
  const int block_size = 4;
  PagedKvCache cache(4, block_size, MemoryStrategy::Compact);
  KvStorage kv(c, cache.num_blocks(), block_size);
  const int seq = cache.add_sequence();
  for (int i = 0; i < 16; ++i) {
    const SlotRef at = cache.append(seq);
    for (int l = 0; l < c.num_layers; ++l)  // every number of token i's K and V is i
      std::fill_n(kv.key(l, at), c.kv_dim(), float(i)), std::fill_n(kv.value(l, at), c.kv_dim(), float(i));
  }
  const std::vector<int64_t> evicted = {1, 2, 4, 5, 6, 9, 11, 12, 14};
  cache.evict(seq, evicted);
  const int held = int(cache.sequence(seq).blocks.size());  // a block whose every token went is freed at once
  std::printf("16 tokens in blocks of %d, %zu evicted: %s.\n", block_size, evicted.size(),
              held == cache.num_blocks() ? "every block keeps a survivor, so none is freed"
                                         : format("%d blocks freed", cache.num_blocks() - held).c_str());
  print_table("before", cache, seq);

  const std::vector<Move> plan = cache.plan_compaction(seq);
  std::printf("The plan: each survivor to the next free place in token order, destinations before sources:\n");
  for (const Move& m : plan)
    std::printf("  position %2lld: block %d slot %d -> block %d slot %d\n", static_cast<long long>(m.pos), m.from.block,
                m.from.slot, m.to.block, m.to.slot);
  const size_t moved = kv.apply(plan);  // K and V rows, every layer, in plan order
  cache.commit_compaction(seq, plan);    // record the new places, free the blocks past the survivors
  print_table("after", cache, seq);

  // Every number of a survivor's K and V rows, in every layer, is still its token index.
  bool intact = true;
  const LiveSlots live = live_slots(cache, seq);
  const auto is = [&](const float* row, int64_t pos) {
    return std::all_of(row, row + c.kv_dim(), [&](float x) { return x == float(pos); });
  };
  for (size_t j = 0; j < live.slots.size(); ++j)
    for (int l = 0; l < c.num_layers; ++l)
      intact = intact && is(kv.key(l, live.slots[j]), live.pos[j]) && is(kv.value(l, live.slots[j]), live.pos[j]);
  const int64_t per_token = 2LL * c.num_layers * c.kv_dim() * 4;  // K and V, all layers, f32
  std::printf("%zu moves x %lld bytes per token (2 x %d layers x %d K/V dims x 4 bytes) = %s bytes moved; %d blocks freed;\n",
              plan.size(), static_cast<long long>(per_token), c.num_layers, c.kv_dim(), commas(int64_t(moved)).c_str(),
              held - int(cache.sequence(seq).blocks.size()));
  std::printf("every survivor's K and V found at its new slot: %s\n", intact ? "yes" : "NO (!)");
}

void part2_bytes() {
  SimulationConfig s;
  s.tokens = kTokens;
  s.block_size = kBlockSize;
  s.evict_fraction = 0.875;
  s.seed = 1;
  // simulate() counts bytes with kQwen3_0_6B_F32_BytesPerToken; the config says where it comes from.
  const ModelConfig q = load_config_file(repo_path("assets/configs/qwen3-0.6b-config.json"));
  const bool same = 2LL * q.num_layers * q.kv_dim() * 4 == kQwen3_0_6B_F32_BytesPerToken;
  std::printf("\nA Qwen3-0.6B-shaped cache (2 x %d layers x %d KV heads x %d dims%s): %s tokens in blocks of %d,\n",
              q.num_layers, q.num_kv_heads, q.head_dim, same ? "" : ", NOT simulate()'s bytes per token (!)",
              commas(s.tokens).c_str(), s.block_size);
  std::printf("%s evicted at random in one round (seed %llu):\n", percent(s.evict_fraction).c_str(),
              static_cast<unsigned long long>(s.seed));
  std::printf("  %-8s  %12s  %15s  %13s  %23s  %23s\n", "strategy", "blocks freed", "reclaimed (f32)", "tokens moved",
              "bytes moved (f32 K/V)", "bytes moved (16-bit K/V)");
  for (MemoryStrategy strategy : {MemoryStrategy::HolesOnly, MemoryStrategy::Compact}) {
    s.strategy = strategy;
    const SimulationResult r = simulate(s);
    std::printf("  %-8s  %12s  %15s  %13s  %23s  %23s\n", strategy_name(strategy), percent(r.blocks_freed_fraction()).c_str(),
                table_bytes(double(r.bytes_reclaimed())).c_str(), commas(r.moves).c_str(), table_bytes(double(r.moves) * kQwen3_0_6B_F32_BytesPerToken).c_str(),
                table_bytes(double(r.moves) * kQwen3_0_6B_F32_BytesPerToken / 2).c_str());
  }
}

// ---- part 3: when to compact ---------------------------------------------------

struct Outcome {
  int64_t moves = 0;
  int rounds = 0, compactions = 0, peak = 0, end = 0;
  double mean_blocks = 0;  // blocks held, averaged over the tokens of the run
};

// The engine's loop without the model (as simulate() runs it), with one knob:
// after a round's evictions, `compact_now(round, blocks held, blocks needed)`.
Outcome run(const std::string& policy_name, const std::function<bool(int, int, int)>& compact_now) {
  const int64_t tokens = kTokens;
  const int block_size = kBlockSize;
  const EvictionSchedule& schedule = kSchedule;
  PagedKvCache cache(int(tokens / block_size), block_size, MemoryStrategy::Compact);
  const int seq = cache.add_sequence();
  const std::unique_ptr<EvictionPolicy> policy = make_policy(policy_name, /*seed=*/1);
  Outcome o;
  double block_tokens = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    cache.append(seq);
    o.peak = std::max(o.peak, cache.pool().num_used());
    if (schedule.due(cache.sequence(seq).live)) {
      const std::vector<int64_t> pos = cache.live_positions(seq);  // token order: nothing reuses holes here
      cache.evict(seq, complement(pos, select_keep(pos, policy->scores({pos, cache.sequence(seq).next_pos}), schedule)));
      ++o.rounds;
      const int held = int(cache.sequence(seq).blocks.size());
      const int needed = (cache.sequence(seq).live + block_size - 1) / block_size;
      if (compact_now(o.rounds, held, needed)) {
        const std::vector<Move> plan = cache.plan_compaction(seq);
        cache.commit_compaction(seq, plan);
        o.moves += int64_t(plan.size());
        ++o.compactions;
      }
    }
    block_tokens += cache.pool().num_used();
  }
  o.mean_blocks = block_tokens / double(tokens);
  o.end = cache.pool().num_used();
  return o;
}

void part3_when() {
  std::printf("\nWhen to compact. Streaming: %s tokens in blocks of %d, prune to %d whenever %d are live\n",
              commas(kTokens).c_str(), kBlockSize, kSchedule.budget, kSchedule.round_starts_at());
  std::printf("(%d sinks, %d newest kept); bytes for Qwen3-0.6B in f32, %s bytes per token.\n", kSchedule.sinks,
              kSchedule.recent, commas(kQwen3_0_6B_F32_BytesPerToken).c_str());
  struct Rule {
    std::string name;
    std::function<bool(int, int, int)> now;  // (round, blocks held, blocks needed)
  };
  const std::vector<Rule> rules = {
      {"every round", [](int, int, int) { return true; }},
      {"every 4th round", [](int round, int, int) { return round % 4 == 0; }},
      {"every 16th round", [](int round, int, int) { return round % 16 == 0; }},
      {"held > 1.5 x needed", [](int, int held, int needed) { return 2 * held > 3 * needed; }},
      {"held > 2 x needed", [](int, int held, int needed) { return held > 2 * needed; }},
      {"never", [](int, int, int) { return false; }},
  };
  for (const std::string policy : {"random", "streaming"}) {
    // "every round" is what the engine and simulate() do with --strategy compact.
    SimulationConfig s;
    s.tokens = kTokens;
    s.block_size = kBlockSize;
    s.policy = policy;
    s.strategy = MemoryStrategy::Compact;
    s.streaming = true;
    s.schedule = kSchedule;
    const SimulationResult reference = simulate(s);
    const Outcome every = run(policy, [](int, int, int) { return true; });
    std::printf("  policy %s (every round = simulate()'s compact strategy, %s moves: %s):\n", policy.c_str(),
                commas(reference.moves).c_str(), every.moves == reference.moves && every.end == reference.blocks_in_use ? "same" : "DIFFERENT (!)");
    std::printf("    %-20s  %11s  %12s  %11s  %11s  %11s\n", "compact when", "compactions", "bytes moved", "mean blocks",
                "peak blocks", "at the end");
    for (const Rule& rule : rules) {
      const Outcome o = run(policy, rule.now);
      std::printf("    %-20s  %5d of %3d  %12s  %11.1f  %11d  %11d\n", rule.name.c_str(), o.compactions, o.rounds,
                  table_bytes(double(o.moves) * kQwen3_0_6B_F32_BytesPerToken).c_str(), o.mean_blocks, o.peak, o.end);
    }
  }
}

static void chapter() {
  part1_small_plan();
  part2_bytes();
  part3_when();
}

int main(int argc, char** argv) { return run_chapter(argc, argv, chapter); }
