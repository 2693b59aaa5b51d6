// Synthetic workloads: eviction and compaction on a paged cache, with no model.
//
// The memory story of paged eviction does not depend on what the tokens say,
// only on WHICH tokens a policy keeps. So a simulation can drive the real
// PagedKvCache with made-up importances and measure what the model-driven
// engine would give back to the pool, at a million tokens in a fraction of a
// second:
//
//   write N tokens -> a policy keeps some -> cache.evict -> (Compact) plan + commit
//   -> blocks in use vs. the ceil(N / block_size) blocks a full cache needs
//
// The law it reproduces: evict a fraction f of the tokens at random and a block
// of block_size slots is empty with probability ~ f^block_size, so only that
// fraction of blocks returns to the pool (0.875^16 = 11.8%), however many
// tokens went. Compaction gives back 1 - ceil(live / block_size) / blocks.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cache/events.h"
#include "cache/kv_cache.h"
#include "evict/policy.h"
#include "util/splitmix64.h"

namespace kvscope {


// How important each token is, by a named distribution:
//   uniform        i.i.d. U[0, 1)
//   sinks-recency  the first 4 tokens high (attention sinks), then a decay with
//                  distance from the current position, 1 / (1 + d / 32), plus
//                  noise 0.25 U[0, 1): old tokens rank by noise, i.e. at random
//   clustered      runs: bursts (mean 8 tokens) of importance 1 + U between gaps
//                  (mean 56 tokens) of 0.5 U; 1/8 of the tokens are in bursts
//   heavy-tailed   Pareto, alpha = 1.16 (the 80/20 rule): (1 - U)^(-1/alpha)
// Note for one-shot top-k selection only the ORDER of the scores matters, so any
// i.i.d. importance (uniform, heavy-tailed) keeps a uniformly random subset: the
// f^block_size law again. What changes the blocks freed is correlation between
// neighbours (clusters, recency), not the shape of the distribution; the shape
// shows in `importance_kept` (the share of the total importance that survived).
class Workload {
 public:
  Workload(const std::string& name, int64_t tokens, uint64_t seed);  // throws kvscope::Error on an unknown name
  const std::string& name() const { return name_; }
  // The importance of the token at `pos` when the next token to come is `now` (> pos).
  double importance(int64_t pos, int64_t now) const;

 private:
  enum class Kind { Uniform, SinksRecency, Clustered, HeavyTailed };
  std::string name_;
  Kind kind_;
  std::vector<float> base_;  // [tokens] the per-position draw
};

const std::vector<std::string>& workload_names();  // "uniform", "sinks-recency", "clustered", "heavy-tailed"

// Keeps tokens by the workload's importance: the oracle of a synthetic world.
class ImportancePolicy : public EvictionPolicy {
 public:
  explicit ImportancePolicy(const Workload& workload) : workload_(workload) {}
  std::string name() const override { return "importance"; }
  std::vector<float> scores(const ScoreContext& ctx) override;

 private:
  const Workload& workload_;
};

// The K/V bytes of one token of Qwen3-0.6B in f32: 2 (K, V) x 28 layers x
// 8 KV heads x 128 dims x 4 bytes = 229376 bytes = 224 KiB.
constexpr int64_t kQwen3_0_6B_F32_BytesPerToken = 2 * 28 * 8 * 128 * 4;

struct SimulationConfig {
  int64_t tokens = 16000;
  int block_size = 16;
  MemoryStrategy strategy = MemoryStrategy::HolesOnly;
  std::string policy = "random";     // random | streaming | importance
  std::string workload = "uniform";  // see Workload
  uint64_t seed = 1;

  // One-shot (streaming = false): write all tokens, then ONE round keeps
  // schedule.budget tokens if it is > 0, else evicts `evict_fraction` of them
  // (rounded to whole tokens). Only schedule.sinks and .recent apply; both 0 by
  // default so random eviction is the pure law.
  // Streaming (streaming = true): tokens are appended one at a time and a round
  // prunes to schedule.budget whenever the live count reaches budget + slack,
  // as the engine does after every step.
  bool streaming = false;
  double evict_fraction = 0.875;
  EvictionSchedule schedule{/*budget=*/0, /*slack=*/128, /*sinks=*/0, /*recent=*/0};

  int64_t bytes_per_token = kQwen3_0_6B_F32_BytesPerToken;  // K and V of one slot, all layers
  bool record_events = false;                               // keep the EventLog in the result
  std::function<void(double)> progress;                     // called with the fraction done, ~64 times
};

struct SimulationResult {
  int64_t tokens = 0;  // tokens written (positions used)
  int64_t live = 0;    // tokens left in the cache
  int block_size = 0;
  int blocks_full_cache = 0;  // ceil(tokens / block_size): the cache with no eviction
  int blocks_in_use = 0;      // at the end
  int peak_blocks = 0;        // the most blocks in use at any time
  int rounds = 0;             // eviction rounds
  int64_t moves = 0;          // slots moved by compaction
  int64_t bytes_per_token = 0;
  double importance_kept = 0;  // sum of the importance still live / sum over all tokens, at the end
  EventLog events;             // when record_events

  double evicted_fraction() const { return tokens ? 1.0 - double(live) / double(tokens) : 0.0; }
  double blocks_freed_fraction() const {
    return blocks_full_cache ? 1.0 - double(blocks_in_use) / blocks_full_cache : 0.0;
  }
  int64_t bytes_reclaimed() const { return int64_t(blocks_full_cache - blocks_in_use) * block_size * bytes_per_token; }
  int64_t bytes_moved() const { return moves * bytes_per_token; }
};

// Throws kvscope::Error on a bad config: a policy that needs a model, an unknown
// workload, a fraction outside [0, 1], a budget below sinks + recent, more tokens
// than this machine's memory can simulate, ...
void check_simulation_config(const SimulationConfig& config);

// About the most memory simulate() holds at once for this config, in bytes (a
// bound from its allocations and a measurement, see the .cpp; with record_events,
// the event log too).
// check_simulation_config refuses a config whose peak exceeds the available memory.
size_t simulation_peak_bytes(const SimulationConfig& config);

// The tokens one-shot mode keeps: the budget if given, else the tokens less
// evict_fraction of them, rounded (87.5% of 10 tokens evicts 9).
int one_shot_keep(const SimulationConfig& config);

// Runs one simulation (checking the config first).
SimulationResult simulate(const SimulationConfig& config);

// One eviction round, as Engine::evict_round runs it without a model: score the
// live tokens, keep the best `budget`, turn the rest into holes (blocks left empty
// go back to the pool), and under Compact slide the survivors forward. Returns the
// slots moved. simulate() and the app's recordings run their rounds with it.
int64_t evict_round(PagedKvCache& cache, int seq, EvictionPolicy& policy, const EvictionSchedule& schedule);

// The law for random one-shot eviction: the chance that all block_size tokens
// of a block were among the evicted, f^block_size (tokens drawn independently).
inline double expected_blocks_freed(double evicted_fraction, int block_size) {
  return std::pow(evicted_fraction, block_size);
}

// The same law when the first `sinks` and the last `recent` of the tokens are
// protected (never evicted): the `evicted` tokens all fall on the others, each with
// probability f = evicted / unprotected, and only a block that holds no protected
// token can empty. Expected fraction of all ceil(tokens / block_size) blocks freed:
//   sum over those blocks of f^(tokens in the block), / blocks.
struct ProtectedLaw {
  int64_t evicted = 0, unprotected = 0;  // f = evicted / unprotected
  int blocks = 0;                        // ceil(tokens / block_size)
  int open_blocks = 0;                   // blocks without a protected token
  int part_full = 0;                     // tokens in the last block when it is one of them and not full; else 0
  double expected = 0;                   // the fraction of `blocks` freed
  // The same, exactly: `evicted` of the unprotected tokens go, drawn without replacement
  // (not each with probability f on its own). The law is its limit for many tokens:
  // 14,000 of 16,000 give 11.79% against the law's 11.81%; 9 of 10 give 0, not 0.9^10.
  double exact = 0;
};
ProtectedLaw expected_blocks_freed(int64_t tokens, int64_t evicted, int64_t sinks, int64_t recent, int block_size);

}  // namespace kvscope
