// Scheduler: many requests, one pool. A waiting queue, admission, batched steps,
// and preemption by recomputation, in the manner of vLLM's scheduler, reduced.
//
//   submit(prompt, n)       the request joins the back of the waiting queue
//   step():
//     1. admit   while no request is prefilling, the front waiting request gets a
//                sequence once the pool has the free blocks its prefill needs, beyond
//                those the running requests take in this step (a preempted request:
//                at least the blocks it held and asked for; with none running, at once)
//     2. batch   every running request's next tokens: one for a decoding request,
//                up to `chunk` for the prefilling one (its prompt in pieces, so the
//                others keep decoding while it fills)
//     3. preempt while the pool cannot hold the batch, the newest running request
//                gives its sequence back (every block returns to the pool) and goes
//                to the front of the waiting queue with the tokens it generated;
//                when readmitted it recomputes them: prompt + output, prefilled again
//     4. run     one forward pass over the batch (Engine::step_batch), then each
//                sequence's eviction round if one is due
//     5. sample  greedy: a request whose context has all gone through the model
//                takes the argmax token; one with all its tokens finishes, and its
//                blocks return to the pool
//
// Nothing is lost: a preempted request keeps its output and finishes later. With
// no eviction the recomputed cache holds the same keys and values as before (up to
// float rounding), so greedy decoding continues as if it had never stopped. With
// eviction it does not: the policy starts over on the recomputed tokens (see
// README, "Many requests, one pool").
#pragma once

#include <deque>
#include <vector>

#include "engine/engine.h"

namespace kvscope {

struct ServeConfig {
  int chunk = 64;        // prefill tokens per step for the request being admitted
  int vocab_limit = 0;   // sample only ids below this; 0 = all logits
};

// The most tokens a request of `context` tokens (prompt + new, less the last, which
// is never fed) holds at once: its whole context with no eviction; with eviction, a
// round prunes it to the budget as soon as it reaches budget + slack, so at most
// budget + slack - 1 plus one step's tokens (a prefill chunk), if compaction gives
// every emptied slot back, and never more than its context.
int64_t most_live_tokens(const EvictionSchedule& s, int context, int chunk);
// The fewest blocks such a request must hold at once to run at all, alone in the
// pool: most_live_tokens in blocks. submit() refuses a request that needs more than
// the pool has.
int blocks_a_request_needs(const EvictionSchedule& s, int context, int chunk, int block_size);

struct Request {
  std::vector<int> prompt;
  int max_new_tokens = 0;
  // Filled in as it runs.
  std::vector<int> output;  // generated tokens (greedy)
  int seq = -1;             // its engine sequence while running, -1 while waiting
  std::vector<int> seqs;    // every engine sequence it ran in (a new one after each preemption)
  int fed = 0;              // tokens of prompt + output that went into that sequence
  int need = 0;             // free blocks it waits for before (re)admission
  int preemptions = 0;
  bool finished = false;

  int context() const { return int(prompt.size() + output.size()); }
  // Whether a step feeding it `T` more tokens samples its last output token: the step
  // it finishes in (and is released after).
  bool finishes_with(int T) const { return fed + T == context() && int(output.size()) + 1 == max_new_tokens; }
  int token(int i) const { return i < int(prompt.size()) ? prompt[i] : output[i - prompt.size()]; }
};

// What a run did. Deterministic: no clocks (the caller times it).
struct ServeStats {
  int steps = 0;
  int peak_running = 0;           // most sequences in one batch
  int preemptions = 0;
  int64_t recomputed_tokens = 0;  // tokens fed again: they had been in the cache before a preemption
  int64_t generated_tokens = 0;   // sampled tokens
  size_t bytes_moved = 0;         // by compaction
  std::vector<int> blocks_in_use; // [steps] pool blocks held after each step
  int peak_blocks = 0;            // most pool blocks held at once: within a step, after its
                                  // K/V writes and before its rounds and its finished requests' release
  std::vector<int> running;       // [steps] sequences in each step's batch
  std::vector<int> holding;       // [steps] sequences holding blocks after each step: the batch
                                  // less those that finished in it (blocks_in_use is theirs)
};

class Scheduler {
 public:
  Scheduler(Engine& engine, const ServeConfig& config);

  // Adds a request to the back of the waiting queue; returns its id (0, 1, ...).
  // kvscope::Error for an empty prompt, no new tokens, a context past the model's
  // positions, or one the pool could never hold even with eviction at its best.
  int submit(const std::vector<int>& prompt, int max_new_tokens);

  // One batched step (admit, preempt, run, sample). Returns false when every
  // request has finished. kvscope::PoolExhausted when a lone running request needs
  // more blocks than the pool has free (the strategy keeps too much of it); the
  // step runs nothing then.
  bool step();
  void run() { while (step()) {} }

  const Request& request(int id) const { return requests_.at(id); }
  int num_requests() const { return int(requests_.size()); }
  int num_running() const { return int(running_.size()); }
  int num_waiting() const { return int(waiting_.size()); }
  const ServeStats& stats() const { return stats_; }

 private:
  void admit();
  void preempt(int id);
  void finish(int id);
  std::vector<BatchItem> batch() const;  // each running request's next tokens: a chunk, or one
  // batch(), after preempting the newest running requests until the pool has the blocks it
  // takes. PoolExhausted when a lone request cannot fit.
  std::vector<BatchItem> fit_batch();
  // After a step: each request's tokens are fed; one whose context is all fed gets its
  // next token (greedy), and one with all its tokens finishes. logits [ids.size(), vocab].
  void take_outputs(const std::vector<int>& ids, const std::vector<BatchItem>& items, const float* logits);
  void record_step(int batch_size);  // the step's line of stats_

  Engine& engine_;
  ServeConfig config_;
  std::vector<Request> requests_;  // [id]
  std::deque<int> waiting_;        // ids, the next to admit at the front
  std::vector<int> running_;       // ids in admission order: the newest at the back
  ServeStats stats_;
};

}  // namespace kvscope
