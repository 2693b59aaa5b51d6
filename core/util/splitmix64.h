// SplitMix64: the one random number generator of kvscope.
//
// Tiny, fast and fully specified, so a seed gives the same numbers on every
// machine and compiler (the distributions of <random> are implementation-defined).
#pragma once

#include <cstdint>

namespace kvscope {

struct SplitMix64 {
  static constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;  // what each number adds to the state
  uint64_t state;
  explicit SplitMix64(uint64_t seed) : state(seed) {}
  uint64_t next() {
    uint64_t z = (state += kGamma);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }        // [0, 1), 53 random bits
  float symmetric() { return float(next() >> 40) * 0x1.0p-23f - 1.0f; }  // [-1, 1), 24 random bits
};

}  // namespace kvscope
