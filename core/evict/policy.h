// Eviction: which tokens of a sequence to keep when its cache is over budget.
//
// Every policy answers the same question, "how important is each live token?",
// as one score per token; the selection around it is shared (select_keep):
//
//   keep = sinks (the first `sinks` positions)
//        + the newest `recent` tokens
//        + the highest-scoring of the rest, until `budget` tokens are kept.
//
// One selection per sequence, shared by every layer and head: a token is kept or
// dropped everywhere, so one slot table serves all layers (some papers select per
// head; then each head would need its own table).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "cache/kv_storage.h"
#include "model/attention.h"
#include "model/backend.h"
#include "model/config.h"

namespace kvscope {

// The largest budget, slack, sinks or recent a schedule takes (2^29 tokens).
constexpr int kMaxScheduleTokens = 1 << 29;

// The schedule: prune to `budget` live tokens whenever the live count reaches
// budget + slack, never dropping the `sinks` first tokens or the `recent` newest.
struct EvictionSchedule {
  int budget = 0;   // live tokens kept after a round; 0 = no eviction
  int slack = 128;  // rounds start at budget + slack live tokens
  int sinks = 4;    // attention sinks: the first positions, always kept
  int recent = 32;  // the newest tokens, always kept

  bool enabled() const { return budget > 0; }
  // The live tokens at which a round starts. Fits an int once validate() passed.
  int round_starts_at() const { return budget + slack; }
  bool due(int live) const { return enabled() && live >= round_starts_at(); }
  // kvscope::Error if a value is out of range or the budget cannot hold the
  // protected tokens.
  void validate() const;
};

// What a policy may look at when it scores the live tokens of a sequence.
struct ScoreContext {
  const std::vector<int64_t>& pos;  // [n] live positions, ascending
  int64_t now;                      // position of the next token to be generated
  // Only for policies that read keys (TriAttention): the sequence's cached keys,
  // in a KvStorage on the CPU or, when `backend` is set, wherever the backend keeps them.
  const ModelConfig* config = nullptr;
  const KvStorage* kv = nullptr;
  const LiveSlots* slots = nullptr;  // the same tokens as pos, in table order
  Backend* backend = nullptr;        // asked for the key scores when set (the engine sets it)
};

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  virtual std::string name() const = 0;

  // Attention-score policies (H2O, SnapKV) need the eager attention path and the
  // probabilities it produces. observe() gets, after every forward step, for each
  // live position the attention it received from that step's queries, summed over
  // layers and heads (the last `window()` queries of a prefill only).
  virtual bool needs_attention() const { return false; }
  static constexpr int kEveryQuery = 1 << 30;  // window(): a prefill's every query (H2O)
  virtual int window() const { return kEveryQuery; }
  virtual void observe(const std::vector<int64_t>& pos, const std::vector<float>& attention, int n_queries) {}

  // One score per live token, higher = more worth keeping.         [ctx.pos.size()]
  virtual std::vector<float> scores(const ScoreContext& ctx) = 0;

  // Tokens dropped from the cache: a policy forgets what it kept on them.
  virtual void forget(const std::vector<int64_t>& evicted) {}
};

// The positions to keep: protected tokens, then the best scores (ties: the newer
// token), `budget` in all, returned ascending.       pos: ascending; scores: [pos.size()]
std::vector<int64_t> select_keep(const std::vector<int64_t>& pos, const std::vector<float>& scores,
                                 const EvictionSchedule& schedule);

// The positions of `pos` that are not in `keep` (both ascending).
std::vector<int64_t> complement(const std::vector<int64_t>& pos, const std::vector<int64_t>& keep);

// Policies by name: "streaming", "h2o", "snapkv", "random", "triattention", "oracle".
// TriAttention and the oracle need data (calibration, a reference run) and are
// made by their own constructors; this factory makes the others.
std::unique_ptr<EvictionPolicy> make_policy(const std::string& name, uint64_t seed);

// The seed of the random policy of a factory's k-th sequence (k = 0, 1, ...): the
// k-th number of a stream of its own, SplitMix64(seed ^ a constant).
uint64_t random_policy_seed(uint64_t seed, uint64_t k);

// SnapKV always keeps its observation window (the newest 32 tokens at least) as
// every policy keeps the sinks and the recent tokens: kvscope::Error if the budget
// is smaller than all of them, as validate() says for the sinks and recent alone.
void check_budget_holds_the_window(const std::string& policy, const EvictionSchedule& s);

// A maker of one policy object per sequence, for the engine. "triattention" reads
// its calibration file (kvscope calibrate) once, checked against the model's config.
// "random" gives each sequence its own stream, random_policy_seed(seed, k) for the
// k-th policy this factory (this copy of it) makes: sequences draw apart from each
// other and from the sampler, which is seeded with `seed` itself.
using PolicyFactory = std::function<std::unique_ptr<EvictionPolicy>()>;
PolicyFactory policy_factory(const std::string& name, uint64_t seed, const std::string& calibration_file,
                             const ModelConfig& config);

}  // namespace kvscope
