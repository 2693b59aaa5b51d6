// SnapKV (Li et al., 2024): the last w = 32 queries vote, each key's votes (the
// attention it got from them, summed over layers and heads) are smoothed by an
// average pool of width 5 over neighbouring keys, and the top keys are kept with
// the window. The paper compresses once, after the prefill; here every eviction
// round uses the window of the latest 32 queries (the prefill's last 32 at first,
// then the decode steps as they come). Needs the eager attention path.
#pragma once

#include <deque>
#include <unordered_map>

#include "evict/policy.h"

namespace kvscope {

class SnapKVPolicy : public EvictionPolicy {
 public:
  static constexpr int kWindow = 32;  // observation window: the last 32 queries
  static constexpr int kPool = 5;     // average-pool kernel over neighbouring keys

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
  std::deque<Step> steps_;  // the newest steps covering the last kWindow queries
};

}  // namespace kvscope
