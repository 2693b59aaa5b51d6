#include "serve/scheduler.h"

#include <algorithm>
#include <string>

#include "cache/kv_cache.h"
#include "sample/sampler.h"
#include "util/error.h"
#include "util/format.h"

namespace kvscope {

Scheduler::Scheduler(Engine& engine, const ServeConfig& config) : engine_(engine), config_(config) {
  if (config_.chunk < 1) throw Error("scheduler: the prefill chunk must be >= 1 token, got " + std::to_string(config_.chunk));
}

int64_t most_live_tokens(const EvictionSchedule& s, int context, int chunk) {
  if (!s.enabled()) return context;
  return std::min<int64_t>(context, int64_t(s.round_starts_at()) - 1 + chunk);  // chunk may be INT_MAX
}

int blocks_a_request_needs(const EvictionSchedule& s, int context, int chunk, int block_size) {
  return int(blocks_for_tokens(most_live_tokens(s, context, chunk), block_size));
}

int Scheduler::submit(const std::vector<int>& prompt, int max_new_tokens) {
  const ModelConfig& c = engine_.model().config;
  const std::string what = "request " + std::to_string(requests_.size()) + ": ";
  if (prompt.empty()) throw Error(what + "the prompt has no tokens");
  if (max_new_tokens < 1) throw Error(what + "it must ask for at least 1 new token, got " + std::to_string(max_new_tokens));
  for (int t : prompt)
    if (t < 0 || t >= c.vocab_size)
      throw Error(what + "token id " + std::to_string(t) + " is outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")");
  const int64_t context = int64_t(prompt.size()) + max_new_tokens - 1;  // the last new token is never fed
  if (context > c.max_position_embeddings)
    throw Error(what + std::to_string(prompt.size()) + " prompt + " + plural(max_new_tokens, "new token") +
                " exceed the model's max_position_embeddings (" + std::to_string(c.max_position_embeddings) + ")");
  const int at_least =  // context fits an int now: max_position_embeddings is at most 2^30
      blocks_a_request_needs(engine_.config().schedule, int(context), config_.chunk, engine_.cache().block_size());
  if (at_least > engine_.cache().num_blocks())
    throw Error(what + std::to_string(prompt.size()) + " prompt + " + plural(max_new_tokens, "new token") +
                " need at least " + std::to_string(at_least) + " blocks of " +
                std::to_string(engine_.cache().block_size()) + " at once, and the pool has only " +
                std::to_string(engine_.cache().num_blocks()) + ": it could never run");
  Request r;
  r.prompt = prompt;
  r.max_new_tokens = max_new_tokens;
  requests_.push_back(std::move(r));
  waiting_.push_back(int(requests_.size()) - 1);
  return int(requests_.size()) - 1;
}

void Scheduler::admit() {
  const PagedKvCache& cache = engine_.cache();
  while (!waiting_.empty()) {
    int64_t running_need = 0;  // blocks the running requests take in this step
    for (int id : running_) {
      const Request& q = requests_[id];
      if (q.context() - q.fed > 1) return;  // one prefill at a time, so the others never wait long
      running_need += cache.blocks_needed(q.seq, 1);
    }
    Request& r = requests_[waiting_.front()];
    const int need =
        std::max(r.need, blocks_a_request_needs(engine_.config().schedule, r.context(), config_.chunk, cache.block_size()));
    if (!running_.empty() && cache.pool().num_free() - running_need < need) return;
    r.seq = engine_.add_sequence();
    r.seqs.push_back(r.seq);
    r.fed = 0;
    running_.push_back(waiting_.front());
    waiting_.pop_front();
  }
}

std::vector<BatchItem> Scheduler::batch() const {
  std::vector<BatchItem> items;
  for (int id : running_) {
    const Request& r = requests_[id];
    const int T = std::min(r.context() - r.fed, config_.chunk);
    BatchItem it;
    it.seq = r.seq;
    for (int i = r.fed; i < r.fed + T; ++i) it.tokens.push_back(r.token(i));
    items.push_back(std::move(it));
  }
  return items;
}

void Scheduler::preempt(int id) {
  Request& r = requests_[id];
  // It waits until the pool has the blocks it held and those its refused step asked for.
  const int held = int(engine_.cache().sequence(r.seq).blocks.size());
  const int asked = int(engine_.cache().blocks_needed(r.seq, std::min(r.context() - r.fed, config_.chunk)));
  r.need = held + asked;
  engine_.release_sequence(r.seq);
  stats_.recomputed_tokens += r.fed;  // all of it goes through the model again
  r.seq = -1;
  r.fed = 0;
  ++r.preemptions;
  ++stats_.preemptions;
  running_.erase(std::find(running_.begin(), running_.end(), id));
  waiting_.push_front(id);
}

void Scheduler::finish(int id) {
  Request& r = requests_[id];
  engine_.release_sequence(r.seq);
  r.seq = -1;
  r.finished = true;
  running_.erase(std::find(running_.begin(), running_.end(), id));
}

std::vector<BatchItem> Scheduler::fit_batch() {
  const PagedKvCache& cache = engine_.cache();
  std::vector<BatchItem> items = batch();
  for (;;) {
    int64_t blocks = 0;
    for (const BatchItem& it : items) blocks += cache.blocks_needed(it.seq, int64_t(it.tokens.size()));
    if (blocks <= cache.pool().num_free()) return items;
    if (running_.size() == 1) {
      const size_t n = items[0].tokens.size();
      throw PoolExhausted(
          "request " + std::to_string(running_[0]) + " alone needs " + plural(blocks, "more block") + " for its next " +
          (n == 1 ? "token" : std::to_string(n) + " tokens") + ", and the pool of " + std::to_string(cache.num_blocks()) +
          " blocks has " + std::to_string(cache.pool().num_free()) +
          " free with nothing left to preempt (memory strategy " + strategy_name(cache.strategy()) +
          (cache.strategy() == MemoryStrategy::HolesOnly
               ? ": a block returns only when every slot in it is evicted; compact gives the emptied slots back)"
               : ")"));
    }
    preempt(running_.back());
    items = batch();
  }
}

void Scheduler::take_outputs(const std::vector<int>& ids, const std::vector<BatchItem>& items, const float* logits) {
  const int vocab = engine_.model().config.vocab_size;
  const int limit = config_.vocab_limit > 0 ? std::min(config_.vocab_limit, vocab) : vocab;
  for (size_t i = 0; i < ids.size(); ++i) {
    Request& r = requests_[ids[i]];
    r.fed += int(items[i].tokens.size());
    if (r.fed < r.context()) continue;  // a prefill chunk that is not the last
    r.output.push_back(argmax(logits + i * size_t(vocab), limit));
    ++stats_.generated_tokens;
    if (int(r.output.size()) == r.max_new_tokens) finish(ids[i]);
  }
}

void Scheduler::record_step(int batch_size) {
  ++stats_.steps;
  stats_.peak_running = std::max(stats_.peak_running, batch_size);
  stats_.running.push_back(batch_size);
  stats_.blocks_in_use.push_back(engine_.cache().pool().num_used());
  stats_.holding.push_back(int(running_.size()));
  stats_.bytes_moved = engine_.bytes_moved();
}

bool Scheduler::step() {
  if (running_.empty() && waiting_.empty()) return false;
  admit();
  const std::vector<BatchItem> items = fit_batch();
  const std::vector<int> ids = running_;  // [items.size()] take_outputs' finish() edits running_
  std::vector<int> finishing;             // released after this step: no eviction round for them
  for (size_t i = 0; i < ids.size(); ++i)
    if (requests_[ids[i]].finishes_with(int(items[i].tokens.size()))) finishing.push_back(requests_[ids[i]].seq);
  const float* logits = engine_.step_batch(items, finishing);  // [items.size(), vocab]
  stats_.peak_blocks = std::max(stats_.peak_blocks, engine_.blocks_after_forward());
  take_outputs(ids, items, logits);
  record_step(int(items.size()));
  return !(running_.empty() && waiting_.empty());
}

}  // namespace kvscope
