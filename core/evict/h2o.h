// H2O, Heavy-Hitter Oracle (Zhang et al., 2023): a token's score is the attention
// it has received so far, accumulated over every query since it entered the cache
// (prefill and decode), summed over layers and heads. The heavy hitters plus the
// recent window are kept. Needs the attention probabilities: the eager path.
//
//   score(p) = sum over steps, layers l, query heads h and the step's queries t of P[l, h, t, p]
//
// The sum over t is eager attention's prob_sums (model/attention.h), the sum over l
// and h is Engine::after_forward's, and the sum over steps is observe() below.
#pragma once

#include <unordered_map>

#include "evict/policy.h"

namespace kvscope {

class H2OPolicy : public EvictionPolicy {
 public:
  std::string name() const override { return "h2o"; }
  bool needs_attention() const override { return true; }
  void observe(const std::vector<int64_t>& pos, const std::vector<float>& attention, int) override {
    for (size_t i = 0; i < pos.size(); ++i) accumulated_[pos[i]] += attention[i];
  }
  std::vector<float> scores(const ScoreContext& ctx) override {
    std::vector<float> s(ctx.pos.size());
    for (size_t i = 0; i < s.size(); ++i) {
      auto it = accumulated_.find(ctx.pos[i]);
      s[i] = it == accumulated_.end() ? 0.0f : float(it->second);
    }
    return s;
  }
  void forget(const std::vector<int64_t>& evicted) override {
    for (int64_t p : evicted) accumulated_.erase(p);
  }

 private:
  std::unordered_map<int64_t, double> accumulated_;  // position -> attention received
};

}  // namespace kvscope
