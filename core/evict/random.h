// Random eviction: the baseline the (evicted fraction)^block_size law describes.
// Scores are fresh uniform numbers every round (splitmix64, seeded).
#pragma once

#include <cstdint>

#include "evict/policy.h"

namespace kvscope {

class RandomPolicy : public EvictionPolicy {
 public:
  explicit RandomPolicy(uint64_t seed) : state_(seed) {}
  std::string name() const override { return "random"; }
  std::vector<float> scores(const ScoreContext& ctx) override {
    std::vector<float> s(ctx.pos.size());
    for (float& x : s) x = float(next() >> 40);  // 24 random bits, exact in a float
    return s;
  }

 private:
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t state_;
};

}  // namespace kvscope
