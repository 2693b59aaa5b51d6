// Sampler: logits -> next token id.
//
//   temperature == 0   greedy (argmax), deterministic
//   temperature  > 0   softmax(logits / temperature), restricted to the top_k most
//                      likely tokens (0 = all) and then to the smallest set whose
//                      probability reaches top_p (1 = all), drawn with a seeded RNG.
// The same seed and logits give the same tokens on every machine: the random
// numbers come from splitmix64, not from <random>'s implementation-defined distributions.
#pragma once

#include <cstdint>
#include <vector>

#include "util/splitmix64.h"

namespace kvscope {

struct SamplerConfig {
  double temperature = 0.8;
  int top_k = 40;
  double top_p = 0.95;
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplerConfig& config);
  // logits: [n]. Only ids < n are ever returned.
  int sample(const float* logits, int n);

 private:
  SamplerConfig config_;
  SplitMix64 rng_;
  std::vector<int> order_;     // scratch: candidate ids
  std::vector<double> probs_;  // scratch: their probabilities
};

int argmax(const float* x, int n);

}  // namespace kvscope
