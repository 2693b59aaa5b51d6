// Random eviction: the baseline the (evicted fraction)^block_size law describes.
// Scores are fresh uniform numbers every round (splitmix64, seeded).
#pragma once

#include <cstdint>

#include "evict/policy.h"
#include "util/splitmix64.h"

namespace kvscope {

class RandomPolicy : public EvictionPolicy {
 public:
  explicit RandomPolicy(uint64_t seed) : rng_(seed) {}
  std::string name() const override { return "random"; }
  std::vector<float> scores(const ScoreContext& ctx) override {
    std::vector<float> s(ctx.pos.size());
    for (float& x : s) x = float(rng_.next() >> 40);  // 24 random bits, exact in a float
    return s;
  }

 private:
  SplitMix64 rng_;
};

}  // namespace kvscope
