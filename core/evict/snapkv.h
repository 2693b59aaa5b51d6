// SnapKV (Li et al., 2024): the last w = 32 queries (the observation window) vote
// for the keys before them, each key's votes (the attention it got from them,
// summed over layers and heads) are smoothed by an average pool of width 5 over
// the keys within 2 positions, and the top keys are kept with the window (whose
// score is +inf). The paper compresses once, after the prefill; here every
// eviction round counts the votes of the newest forward steps that together hold
// at least 32 queries. A step's votes arrive summed, so a step is kept or dropped
// whole: the prefill's last 32 vote together with every decode step since, until
// 32 decode steps have come (up to 63 voters), then the last 32 decode steps. The
// window kept whole is always the newest 32 positions, so a budget's room beyond
// the sinks and the window is the votes' to fill (with 63 voters, the oldest 31
// window positions would have been kept too: a budget of sinks + 63 or less then
// ran as StreamingLLM). The positions between, when there are more than 32 voters,
// are scored like the older ones, by the voters at and after them (as a key in
// SnapKV's own window would be, were it scored). Needs the eager attention path.
#pragma once

#include <deque>
#include <unordered_map>

#include "evict/policy.h"

namespace kvscope {

class SnapKVPolicy : public EvictionPolicy {
 public:
  static constexpr int kWindow = 32;  // observation window: the last 32 queries
  static constexpr int kPool = 5;     // average-pool kernel: the keys within 2 positions

  std::string name() const override { return "snapkv"; }
  bool needs_attention() const override { return true; }
  int window() const override { return kWindow; }
  void observe(const std::vector<int64_t>& pos, const std::vector<float>& attention, int n_queries) override;
  std::vector<float> scores(const ScoreContext& ctx) override;

 private:
  struct Step {
    int n_queries;
    std::unordered_map<int64_t, float> votes;  // position -> attention from this step's queries
  };
  std::deque<Step> steps_;  // the newest steps holding at least kWindow queries together
};

}  // namespace kvscope
