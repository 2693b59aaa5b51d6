// Chapter 4: reusing the holes.
//
// Part 1: a small cache where new tokens fill the holes eviction left: the memory
// stays put, and the block table stops being in token order.
// Part 2: what reuse saves under a streaming schedule (the engine's loop, in the
// simulator), against holes only and compaction.
// Part 3: the tiny test model under the three strategies: the same logits,
// because attention reads every slot's recorded position.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "cache/occupancy.h"
#include "cache/trace.h"
#include "engine/engine.h"
#include "model/attention.h"
#include "model/weights.h"
#include "sim/synthetic.h"
#include "tutorial.h"
#include "util/max_abs_diff.h"

using namespace kvscope;
using namespace kvscope::tutorial;

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t x : v) {
    if (!s.empty()) s += ' ';
    s += std::to_string(x);
  }
  return s;
}

// The sequence's table, block by block: the position in every written slot ("." for a hole).
void print_table(const char* label, const PagedKvCache& cache, int seq) {
  const Sequence& s = cache.sequence(seq);
  std::printf("  %-7s", label);
  for (size_t i = 0; i < s.blocks.size(); ++i) {
    const int used = cache.slots_written(s, i);
    std::printf(" |");
    for (int j = 0; j < cache.block_size(); ++j) {
      const int64_t p = j < used ? cache.position({s.blocks[i], j}) : kEmpty;
      std::printf(" %2s", p == kEmpty ? "." : std::to_string(p).c_str());
    }
  }
  std::printf(" |   %zu blocks\n", s.blocks.size());
}

void part1_small_example() {
  const int block_size = 4;
  const std::vector<int64_t> evicted = {1, 2, 5, 6, 9};
  std::printf("12 tokens in blocks of %d; evict positions %s; then 4 new tokens (positions 12 to 15).\n",
              block_size, join(evicted).c_str());
  std::printf("Block tables, in table order (each slot: the position it holds, . = hole):\n");
  PagedKvCache holes(8, block_size, MemoryStrategy::HolesOnly), reuse(8, block_size, MemoryStrategy::ReuseHoles);
  for (PagedKvCache* cache : {&holes, &reuse}) {
    const int seq = cache->add_sequence();
    for (int i = 0; i < 12; ++i) cache->append(seq);
    cache->evict(seq, evicted);
    for (int i = 0; i < 4; ++i) cache->append(seq);
  }
  print_table("holes", holes, 0);
  print_table("reuse", reuse, 0);

  // What attention sees under reuse: the live slots in table order, each with its recorded position.
  const LiveSlots live = live_slots(reuse, 0);
  std::printf("\nUnder reuse, attention reads the keys in table order: positions %s\n", join(live.pos).c_str());
  std::vector<int64_t> newest = live.pos;
  std::sort(newest.begin(), newest.end());
  newest.erase(newest.begin(), newest.end() - 4);
  std::printf("  the last 4 live slots of the table hold positions %s; the newest 4 tokens are %s\n",
              join({live.pos.end() - 4, live.pos.end()}).c_str(), join(newest).c_str());
  // A query at position 13 (say, in a chunk of prefill) may see the keys at positions <= 13.
  const int64_t q = 13;
  std::vector<int64_t> by_position, by_table;
  const size_t own = size_t(std::find(live.pos.begin(), live.pos.end(), q) - live.pos.begin());
  for (size_t j = 0; j < live.pos.size(); ++j) {
    if (live.pos[j] <= q) by_position.push_back(live.pos[j]);  // the causal mask attention applies
    if (j <= own) by_table.push_back(live.pos[j]);             // "everything before my slot"
  }
  std::printf("  a query at position %lld sees, by recorded position: %s (%zu keys)\n", static_cast<long long>(q),
              join(by_position).c_str(), by_position.size());
  std::printf("  taking table order for token order, it would see:     %s (%zu keys)\n", join(by_table).c_str(),
              by_table.size());
}

SimulationConfig streaming_run(const std::string& policy, MemoryStrategy strategy) {
  SimulationConfig c;
  c.tokens = 16000;
  c.block_size = 16;
  c.strategy = strategy;
  c.policy = policy;
  c.seed = 1;
  c.streaming = true;
  c.schedule = {/*budget=*/1024, /*slack=*/128, /*sinks=*/4, /*recent=*/32};
  c.record_events = strategy == MemoryStrategy::ReuseHoles;  // to look at its final block table
  return c;
}

// Live tokens that sit after a newer token, reading the final block table in order.
int out_of_order(const SimulationResult& r) {
  TraceHeader header;
  header.block_size = r.block_size;
  header.num_blocks = r.blocks_full_cache;
  const Occupancy occ = replay(header, r.events);
  int count = 0;
  int64_t newest = -1;
  for (int block : occ.table(0))
    for (int slot = 0; slot < occ.block_size(); ++slot)
      if (const int64_t p = occ.position(block, slot); p != kEmpty) {
        if (p < newest) ++count;
        newest = std::max(newest, p);
      }
  return count;
}

void part2_streaming() {
  const SimulationConfig base = streaming_run("random", MemoryStrategy::HolesOnly);
  std::printf("\nStreaming: %s tokens one at a time in blocks of %d; a round prunes to %s whenever %s are live\n",
              commas(base.tokens).c_str(), base.block_size, commas(base.schedule.budget).c_str(),
              commas(base.schedule.budget + base.schedule.slack).c_str());
  std::printf("(%d sinks and the %d newest always kept; Qwen3-0.6B-shaped f32 K/V, %s bytes per token; seed %llu)\n",
              base.schedule.sinks, base.schedule.recent, commas(base.bytes_per_token).c_str(),
              static_cast<unsigned long long>(base.seed));
  std::printf("  %-10s %-8s  %13s  %11s  %11s  %s\n", "policy", "strategy", "blocks at end", "peak blocks", "bytes moved",
              "live tokens out of token order");
  for (const std::string policy : {"random", "streaming"}) {
    for (MemoryStrategy strategy : {MemoryStrategy::HolesOnly, MemoryStrategy::ReuseHoles, MemoryStrategy::Compact}) {
      const SimulationResult r = simulate(streaming_run(policy, strategy));
      const std::string order =
          strategy == MemoryStrategy::ReuseHoles ? commas(out_of_order(r)) + " of " + commas(r.live) : "0 (kept in order)";
      std::printf("  %-10s %-8s  %13d  %11d  %11s  %s\n", policy.c_str(), strategy_name(strategy), r.blocks_in_use,
                  r.peak_blocks, table_bytes(double(r.bytes_moved())).c_str(), order.c_str());
    }
  }
}

// The engine run's eviction: prune to 24 live tokens whenever 32 are, never the first 4
// or the newest 8.
const EvictionSchedule kEngineSchedule{/*budget=*/24, /*slack=*/8, /*sinks=*/4, /*recent=*/8};

// Logits of a teacher-forced run through the engine: a 16-token prompt, then 120
// tokens one at a time (arbitrary ids, the same under every strategy). The logits
// of the prompt's last token and of the first 119 decode steps: [120, vocab]; the
// positions it kept at the end, ascending, go to `kept`.
std::vector<float> engine_run(const Model& m, MemoryStrategy strategy, SequenceStats& stats,
                              std::vector<int64_t>& kept) {
  EngineConfig config;
  config.block_size = 4;
  config.num_blocks = 64;
  config.strategy = strategy;
  config.schedule = kEngineSchedule;
  config.policy = policy_factory("random", /*seed=*/7, "", m.config);
  Engine engine(m, config);
  const int seq = engine.add_sequence();
  const int vocab = m.config.vocab_size;
  std::vector<int> prompt(16);
  for (int i = 0; i < 16; ++i) prompt[i] = (i * 37 + 11) % vocab;
  std::vector<float> out;
  const float* logits = engine.prefill(seq, prompt);
  for (int step = 0; step < 120; ++step) {
    out.insert(out.end(), logits, logits + vocab);
    logits = engine.decode(seq, (step * 91 + 5) % vocab);
  }
  stats = engine.stats(seq);
  kept = engine.cache().live_positions(seq);
  std::sort(kept.begin(), kept.end());  // table order is token order, except after hole reuse
  return out;
}

void part3_model() {
  const Model m = load_model(repo_path("tests/models/tiny-untied"));
  std::printf("\ntests/models/tiny-untied through the engine: a 16-token prompt, 120 decode steps, blocks of 4,\n");
  const EvictionSchedule& s = kEngineSchedule;
  std::printf("random eviction to %d live tokens whenever %d are live (never the first %d or the newest %d)\n", s.budget,
              s.round_starts_at(), s.sinks, s.recent);
  SequenceStats compact_stats;
  std::vector<int64_t> compact_kept;
  const std::vector<float> compact = engine_run(m, MemoryStrategy::Compact, compact_stats, compact_kept);
  bool same_kept = true;
  std::printf("  %-8s  %6s  %11s  %s\n", "strategy", "rounds", "blocks used", "logits vs compact");
  for (MemoryStrategy strategy : {MemoryStrategy::HolesOnly, MemoryStrategy::ReuseHoles, MemoryStrategy::Compact}) {
    SequenceStats stats;
    std::vector<int64_t> kept;
    const std::vector<float> logits = engine_run(m, strategy, stats, kept);
    same_kept = same_kept && kept == compact_kept;
    const bool identical = std::memcmp(logits.data(), compact.data(), logits.size() * sizeof(float)) == 0;
    const float worst = max_abs_diff(logits, compact);
    const char* verdict = strategy == MemoryStrategy::Compact ? "(the reference)"
                          : identical                         ? "bit-identical (same keys, same order)"
                          : worst <= 1e-4f                    ? "max |diff| <= 1e-4 (same keys, another order)"
                                                              : "DIFFERENT (!)";
    std::printf("  %-8s  %6d  %11d  %s\n", strategy_name(strategy), stats.rounds, stats.blocks_in_use, verdict);
  }
  std::printf(same_kept ? "At the end every strategy holds the same %zu tokens.\n"
                        : "The strategies kept DIFFERENT tokens (!) (compact: %zu).\n",
              compact_kept.size());
}

static void chapter() {
  part1_small_example();
  part2_streaming();
  part3_model();
}

int main(int argc, char** argv) { return run_chapter(argc, argv, chapter); }
