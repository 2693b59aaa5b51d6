// kvscope serve-bench: the same requests through one fixed pool under each
// memory strategy, and what each buys: how many sequences run at once, how
// fast tokens come out, how often a request is preempted.
//
//   none     no eviction: every token stays, a request holds its whole context
//   holes    eviction; a block returns to the pool only when all its slots are empty
//   reuse    eviction; new tokens fill the holes first
//   compact  eviction; survivors slide forward and whole tail blocks return
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "serve/scheduler.h"

namespace kvscope {

struct ServeRun {
  std::string strategy;  // none, holes, reuse, compact
  std::string backend;   // what ran the model: "cpu" or "cuda" (Backend::name)
  ServeStats stats;
  int finished = 0;      // requests with all their tokens
  double seconds = 0;    // wall time of the whole run
  std::vector<Request> requests;  // at the end: each one's output and the sequences it ran in

  double tokens_per_second() const { return seconds > 0 ? stats.generated_tokens / seconds : 0; }
  double mean_running() const;  // sequences per step, on average
  double mean_blocks_in_use() const;  // after each step (the peak, within a step: stats.peak_blocks)
};

// The engine for one strategy: "none" is no eviction (the schedule's budget set to
// 0); the others evict with `evicting`'s schedule and policy. kvscope::Error for
// an unknown name.
EngineConfig engine_for_strategy(const std::string& strategy, const EngineConfig& evicting);

// One short prefill and one batched decode step on a throwaway engine with
// `evicting`'s backend, untimed: the first timed run would otherwise pay for
// starting the CPU threads and, on a GPU, for loading each kernel at its first launch
// (those only an eviction round runs still load in the first run that evicts).
void warm_up(const Model& model, const EngineConfig& evicting, const std::vector<int>& prompt);

// Runs every prompt for `new_tokens` greedy tokens through a fresh engine and
// scheduler. `progress(finished, total)` is called after every step when set;
// `events` (when set) receives every cache event, each with its sequence id.
// kvscope::PoolExhausted when a step is refused (Scheduler::step); `stopped` (when
// set) then receives the requests as they stood, the tokens of a trace of the run
// up to that step.
ServeRun serve_requests(const Model& model, const std::string& strategy, const EngineConfig& evicting,
                        const ServeConfig& serve, const std::vector<std::vector<int>>& prompts, int new_tokens,
                        const std::function<void(int, int)>& progress = {}, EventLog* events = nullptr,
                        std::vector<Request>* stopped = nullptr);

// The table serve-bench prints: one row per run.
std::string markdown_table(const std::vector<ServeRun>& runs);

}  // namespace kvscope
