// Engine: runs sequences through the model over one shared paged cache, and
// prunes them to budget as they grow.
//
//   prefill(seq, prompt) / decode(seq, token)
//     -> the backend's forward (flash attention, or eager when the policy needs
//        probabilities), on the CPU or a GPU (model/backend.h)
//     -> the policy observes the step's attention (H2O, SnapKV)
//     -> if the sequence's live count reached budget + slack: an eviction round
//          scores -> select_keep -> cache.evict -> (Compact) plan, move, commit
//
// Every change to the cache is an event in the log (if one is given).
#pragma once

#include <memory>
#include <vector>

#include "cache/kv_cache.h"
#include "evict/policy.h"
#include "model/backend.h"
#include "model/qwen3.h"

namespace kvscope {

// What eviction has done to a sequence so far.
struct SequenceStats {
  int64_t tokens_seen = 0;       // positions used (= next_pos)
  int live = 0;                  // tokens in the cache
  int blocks_in_use = 0;         // blocks in its table
  int blocks_full_cache = 0;     // blocks the same tokens take with no eviction: ceil(seen / block_size)
  int rounds = 0;                // eviction rounds
  size_t bytes_moved = 0;        // by compaction (K and V, all layers)
  size_t bytes_per_block = 0;

  double evicted_fraction() const { return tokens_seen ? 1.0 - double(live) / double(tokens_seen) : 0.0; }
  double blocks_freed_fraction() const {
    return blocks_full_cache ? 1.0 - double(blocks_in_use) / blocks_full_cache : 0.0;
  }
  size_t bytes_reclaimed() const { return size_t(blocks_full_cache - blocks_in_use) * bytes_per_block; }
};

struct EngineConfig {
  int num_blocks = 0;
  int block_size = 16;
  MemoryStrategy strategy = MemoryStrategy::Compact;
  EvictionSchedule schedule;   // budget 0: no eviction
  PolicyFactory policy;        // one policy object per sequence; may be empty when budget is 0
  BackendFactory backend;      // where the model runs and K/V live; empty = the CPU
};

// kvscope::Error "not enough memory for the paged K/V storage (...) and the cache's slot
// table (...)" when, on the CPU, the pool's K/V and its tables together exceed the
// available memory. The Engine checks it before it makes either; a command may ask first.
void check_engine_memory(const ModelConfig& c, const EngineConfig& config);

class Engine {
 public:
  Engine(const Model& model, const EngineConfig& config, EventLog* log = nullptr);

  int add_sequence();
  void release_sequence(int seq);

  // Runs the tokens and returns the logits of the last one. [vocab]
  // When the shared pool has no room for them, the step is refused: kvscope::PoolExhausted
  // "block pool exhausted: sequence N ... refused", and nothing changes (not this
  // sequence, not the others). The caller may retry once blocks are freed.
  const float* prefill(int seq, const std::vector<int>& tokens);
  const float* decode(int seq, int token);

  // One forward pass over several sequences (model/qwen3.h BatchItem: seq and
  // tokens; the engine sets the attention options its policies need). Returns
  // [items, vocab], each item's last token's logits, valid until the next step.
  // Refused as a whole when the pool lacks the blocks for all of them together
  // (kvscope::PoolExhausted, nothing changes). Then, sequence by sequence, the policies
  // observe and the eviction rounds that are due run, as after prefill and decode;
  // not for the sequences in `finishing`, released right after this step: a round
  // there would evict and compact for nothing.
  const float* step_batch(std::vector<BatchItem> items, const std::vector<int>& finishing = {});

  SequenceStats stats(int seq) const;
  size_t bytes_moved() const { return bytes_moved_; }  // by compaction, every sequence, released ones too
  // Pool blocks held right after the last step's forward pass wrote its K/V, before
  // its eviction rounds: the most that step held at once.
  int blocks_after_forward() const { return blocks_after_forward_; }
  const PagedKvCache& cache() const { return cache_; }
  const EngineConfig& config() const { return config_; }
  const Model& model() const { return model_; }
  Backend& backend() { return *backend_; }
  EvictionPolicy* policy(int seq) { return policies_.at(seq).get(); }

 private:
  const float* step(int seq, const int* tokens, int T);
  // The policy observes the step's attention (if it asked for it); then a round if one is due.
  void after_forward(int seq, int observed_queries, const std::vector<float>& prob_sums);
  void evict_round(int seq);

  const Model& model_;
  EngineConfig config_;
  PagedKvCache cache_;
  std::unique_ptr<Backend> backend_;  // the weights' device copy, the K/V storage, the activations
  std::vector<std::unique_ptr<EvictionPolicy>> policies_;  // [sequence]
  std::vector<SequenceStats> stats_;                       // [sequence] rounds and bytes moved
  std::vector<float> prob_sums_;  // [num_layers, num_heads, table slots] attention each slot received (eager path), reused
  std::vector<std::vector<float>> batch_prob_sums_;        // [batch item] the same for step_batch
  size_t bytes_moved_ = 0;
  int blocks_after_forward_ = 0;
};

}  // namespace kvscope
