#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "cache/invariants.h"
#include "cache/kv_storage.h"
#include "util/error.h"
#include "util/memory_check.h"

namespace kvscope {

void check_engine_memory(const ModelConfig& c, const EngineConfig& config) {
  check_block_size(config.block_size);
  if (config.num_blocks < 1 || config.backend) return;  // the pool's own message; K/V on a device: its check
  const double bytes = double(PagedKvCache::table_bytes(config.num_blocks, config.block_size)) +
                       double(config.num_blocks) * double(KvStorage::bytes_per_block(c, config.block_size));
  check_fits_in_memory(size_t(std::min(bytes, 1e18)),  // in double: a huge pool must not wrap around
                       KvStorage::describe(c, config.num_blocks, config.block_size) + " and " +
                           PagedKvCache::describe(config.num_blocks, config.block_size));
}

// kvscope::Error unless the engine can run the schedule.
static void check_schedule(const EngineConfig& config) {
  config.schedule.validate();
  if (config.schedule.enabled() && !config.policy) throw Error("engine: an eviction budget needs a policy");
}

// config.num_blocks, once the schedule is known to run and the pool's tables and the
// CPU K/V to fit: before the cache, the first member to allocate, is made (a bad
// schedule once allocated the whole pool to be refused).
static int checked_num_blocks(const ModelConfig& c, const EngineConfig& config) {
  check_schedule(config);
  check_engine_memory(c, config);
  return config.num_blocks;
}

Engine::Engine(const Model& model, const EngineConfig& config, EventLog* log)
    : model_(model),
      config_(config),
      cache_(checked_num_blocks(model.config, config), config.block_size, config.strategy, log),
      backend_(config.backend ? config.backend(model, config.num_blocks, config.block_size)
                              : std::make_unique<CpuBackend>(model, config.num_blocks, config.block_size)) {}

int Engine::add_sequence() {
  std::unique_ptr<EvictionPolicy> policy = config_.schedule.enabled() ? config_.policy() : nullptr;
  if (policy) check_budget_holds_the_window(policy->name(), config_.schedule);  // before anything changes
  const int seq = cache_.add_sequence();
  policies_.push_back(std::move(policy));
  stats_.emplace_back();
  return seq;
}

void Engine::release_sequence(int seq) {
  cache_.release_sequence(seq);
  policies_.at(seq).reset();
}

const float* Engine::prefill(int seq, const std::vector<int>& tokens) {
  if (tokens.empty()) throw Error("prefill: no tokens");
  return step(seq, tokens.data(), int(tokens.size()));
}

const float* Engine::decode(int seq, int token) { return step(seq, &token, 1); }

// The policy's attention options for T new tokens of `seq`: the eager path when
// it needs probabilities, summed into `sums`.
static void observe_options(EvictionPolicy* policy, int T, std::vector<float>* sums, AttentionPath& path,
                            int& sum_from, std::vector<float>*& prob_sums) {
  if (!policy || !policy->needs_attention()) return;
  path = AttentionPath::Eager;
  sum_from = std::max(0, T - policy->window());
  prob_sums = sums;
}

// Logits that are not finite (activations that overflowed, or NaN or inf weights) are
// refused: greedy sampling would turn NaN logits into token 0 at every step, and eval,
// comparing NaN with NaN, would report 100% agreement with the full cache.
static void check_logits_finite(const float* logits, int vocab, int seq) {  // logits: [vocab]
  for (int id = 0; id < vocab; ++id)
    if (!std::isfinite(logits[id]))
      throw Error("forward: sequence " + std::to_string(seq) + "'s logits are not finite (token id " +
                  std::to_string(id) + ": " + std::to_string(logits[id]) +
                  "): the model's activations overflowed, or its weights hold NaN or inf");
}

const float* Engine::step(int seq, const int* tokens, int T) {
  ForwardOptions options;
  observe_options(policies_.at(seq).get(), T, &prob_sums_, options.attention, options.sum_from, options.prob_sums);
  const float* logits = backend_->forward(cache_, seq, tokens, T, options);
  blocks_after_forward_ = cache_.pool().num_used();
  check_logits_finite(logits, model_.config.vocab_size, seq);
  after_forward(seq, options.prob_sums ? T - options.sum_from : 0, prob_sums_);
  return logits;
}

const float* Engine::step_batch(std::vector<BatchItem> items, const std::vector<int>& finishing) {
  if (batch_prob_sums_.size() < items.size()) batch_prob_sums_.resize(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    BatchItem& it = items[i];
    observe_options(policies_.at(it.seq).get(), int(it.tokens.size()), &batch_prob_sums_[i], it.attention,
                    it.sum_from, it.prob_sums);
  }
  const float* logits = backend_->forward_batch(cache_, items);  // [items, vocab]
  blocks_after_forward_ = cache_.pool().num_used();
  const int vocab = model_.config.vocab_size;
  for (size_t i = 0; i < items.size(); ++i) check_logits_finite(logits + i * size_t(vocab), vocab, items[i].seq);
  for (size_t i = 0; i < items.size(); ++i) {
    const BatchItem& it = items[i];
    if (std::find(finishing.begin(), finishing.end(), it.seq) != finishing.end()) continue;
    const int T = int(it.tokens.size());
    after_forward(it.seq, it.prob_sums ? T - it.sum_from : 0, batch_prob_sums_[i]);
  }
  return logits;
}

void Engine::after_forward(int seq, int observed_queries, const std::vector<float>& prob_sums) {
  EvictionPolicy* policy = policies_.at(seq).get();
  if (observed_queries > 0) {
    // The attention each live token received, summed over layers and heads.
    const ModelConfig& c = model_.config;
    const LiveSlots live = live_slots(cache_, seq);
    const size_t table_slots = prob_sums.size() / (size_t(c.num_layers) * c.num_heads);
    std::vector<float> received(live.pos.size(), 0.0f);  // [live tokens]
    for (int lh = 0; lh < c.num_layers * c.num_heads; ++lh)
      for (size_t j = 0; j < received.size(); ++j) received[j] += prob_sums[lh * table_slots + live.table_index[j]];
    policy->observe(live.pos, received, observed_queries);
  }
  if (config_.schedule.due(cache_.sequence(seq).live)) evict_round(seq);
}

void Engine::evict_round(int seq) {
  EvictionPolicy& policy = *policies_.at(seq);
  cache_.begin_round(seq);
  std::vector<int64_t> pos = cache_.live_positions(seq);
  std::sort(pos.begin(), pos.end());  // table order is token order, except after hole reuse
  const LiveSlots slots = live_slots(cache_, seq);
  const ScoreContext ctx{pos, cache_.sequence(seq).next_pos, &model_.config, nullptr, &slots, backend_.get()};
  const std::vector<int64_t> kept = select_keep(pos, policy.scores(ctx), config_.schedule);
  const std::vector<int64_t> evicted = complement(pos, kept);
  cache_.evict(seq, evicted);
  policy.forget(evicted);
  if (config_.strategy == MemoryStrategy::Compact) {
    const std::vector<Move> plan = cache_.plan_compaction(seq);
    const size_t moved = backend_->compact(plan);  // the bytes move where they live
    stats_[seq].bytes_moved += moved;
    bytes_moved_ += moved;
    cache_.commit_compaction(seq, plan);
  }
  check_kept(cache_, seq, kept);  // cheap next to a forward pass; a lost token would be a cache bug
  ++stats_[seq].rounds;
  cache_.end_round(seq);
}

SequenceStats Engine::stats(int seq) const {
  SequenceStats s = stats_.at(seq);
  const Sequence& q = cache_.sequence(seq);
  s.tokens_seen = q.next_pos;
  s.live = q.live;
  s.blocks_in_use = int(q.blocks.size());
  s.blocks_full_cache = int(blocks_for_tokens(q.next_pos, config_.block_size));
  s.bytes_per_block = KvStorage::bytes_per_block(model_.config, config_.block_size);
  return s;
}

}  // namespace kvscope
