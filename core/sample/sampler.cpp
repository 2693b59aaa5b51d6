#include "sample/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "util/error.h"

namespace kvscope {

int argmax(const float* x, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

Sampler::Sampler(const SamplerConfig& config) : config_(config), rng_(config.seed) {
  if (!(config.temperature >= 0) || !std::isfinite(config.temperature))
    throw Error("temperature must be a finite number >= 0 (0: greedy), got " + number_text(config.temperature));
  if (config.top_k < 0) throw Error("top-k must be >= 0 (0: all tokens), got " + std::to_string(config.top_k));
  if (!(config.top_p > 0 && config.top_p <= 1)) throw Error("top-p must be in (0, 1], got " + number_text(config.top_p));
}

int Sampler::sample(const float* logits, int n) {
  if (config_.temperature == 0) return argmax(logits, n);

  // Candidates: the top_k ids by logit, best first.
  const int k = (config_.top_k > 0 && config_.top_k < n) ? config_.top_k : n;
  order_.resize(n);
  std::iota(order_.begin(), order_.end(), 0);
  auto by_logit = [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::partial_sort(order_.begin(), order_.begin() + k, order_.end(), by_logit);
  order_.resize(k);

  // Softmax over the candidates at the temperature.
  probs_.resize(k);
  const double max_logit = logits[order_[0]];
  double sum = 0;
  for (int i = 0; i < k; ++i) sum += (probs_[i] = std::exp((logits[order_[i]] - max_logit) / config_.temperature));

  // Nucleus: keep the smallest prefix whose probability reaches top_p.
  int keep = k;
  double mass = 0;
  for (int i = 0; i < k; ++i) {
    mass += probs_[i] / sum;
    if (mass >= config_.top_p) {
      keep = i + 1;
      break;
    }
  }
  double kept = 0;
  for (int i = 0; i < keep; ++i) kept += probs_[i];

  // Draw.
  double r = rng_.uniform() * kept;
  for (int i = 0; i < keep; ++i) {
    r -= probs_[i];
    if (r < 0) return order_[i];
  }
  return order_[keep - 1];
}

}  // namespace kvscope
