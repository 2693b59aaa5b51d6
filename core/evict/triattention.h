// TriAttention: keys scored from the geometry of RoPE, with no attention scores.
//
// The idea in one paragraph. Before RoPE, the queries of a head cluster around a
// fixed direction in every frequency band, whatever the token. Write a band f of
// a vector as one complex number (dimension f is the real part, f + d/2 the
// imaginary part: Qwen's rotate-half pairing). Offline, calibration measures per
// layer, query head and band the centre of the queries, qbar_f = mean_t q_f, and
// their mean length m_f = mean_t |q_f|. Online, a cached key is worth keeping if
// the queries still to come, modelled by those centres at the positions ahead,
// would give it a large logit: a trigonometric series in the distance D between
// query and key (S_trig), plus a term for the part of the queries the centre does
// not capture (S_norm). Scoring reads only the cached keys, so it runs with flash
// attention, which never materialises the attention probabilities.
//
//   calibrate()            model + text -> TriCalibration (evict/triattention_calibration.h)
//   TriScorer              one round's per-head scorer: a key costs O(head_dim)
//   triattention_scores()  the per-token scores of a ScoreContext (what the policy returns)
//   TriAttentionPolicy     the EvictionPolicy
//
// The derivation of the no-un-rotation formula is in triattention.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "evict/policy.h"
#include "evict/triattention_calibration.h"

namespace kvscope {

// The offsets delta of the future query positions a key is scored for:
// D = t - p + delta, delta in {1, 2, 4, ..., 65536}.
inline constexpr int kTriOffsets = 17;
inline double tri_offset(int i) { return double(int64_t(1) << i); }

// omega_f = theta^(-2f/d), computed in f32 exactly as model/ops.cpp's rope() does,
// so that the scorer's angles are the ones the cached keys were rotated by.
double tri_omega(int band, int head_dim, double theta);

// One round's scorer, at round position t: the position of the next token, the tokens
// seen so far (as the authors' code has it), so the nearest future query is at t + 1.
// For a post-RoPE key k~ of one KV head, as seen by query head h of layer l:
//   trig(l, h, k~) = mean over delta of S_trig(t - p + delta)   (no need to know p)
//   norm(l, h, k~) = S_norm = sum_f (m_f - |qbar_f|) |k_f|
//   score          = trig + norm
// trig and norm are the per-key form (the tests check them against the paper's sums);
// the policy scores every live key at once with w and gap, through key_scores
// (model/key_scores.h, or the backend's).
class TriScorer {
 public:
  TriScorer(const TriCalibration& cal, int64_t t);

  double trig(int layer, int head, const float* key) const;  // key: [head_dim], post-RoPE
  double norm(int layer, int head, const float* key) const;

  // The "future query" of a head: w = [u; v] with u_f + i v_f = qbar_f mean_delta e^{i omega_f (t + delta)};
  // trig(k~) = w . k~.                                                          [head_dim]
  const float* future_query(int layer, int head) const { return w_.data() + (size_t(layer) * heads_ + head) * dim_; }
  // m_f - |qbar_f|: S_norm = sum_f norm_weights[f] |k_f|.                        [head_dim/2]
  const float* norm_weights(int layer, int head) const {
    return gap_.data() + (size_t(layer) * heads_ + head) * (dim_ / 2);
  }

 private:
  int heads_, dim_;
  std::vector<float> w_;     // [num_layers, num_heads, head_dim]
  std::vector<float> gap_;   // [num_layers, num_heads, head_dim/2]  m_f - |qbar_f|
};

// One score per live token of ctx (ctx.pos order), from the keys at ctx.slots
// (the raw sums computed by ctx.backend where it holds them, else read from ctx.kv):
// per (layer, query head) the scores of the live keys are z-normalised; per KV
// head the max over its query heads; then the mean over KV heads and layers.
// kvscope::Error if ctx lacks the keys, or if the calibration does not fit ctx.config.
std::vector<float> triattention_scores(const TriCalibration& cal, const ScoreContext& ctx);

class TriAttentionPolicy : public EvictionPolicy {
 public:
  // One calibration serves every sequence (the engine makes one policy per sequence).
  explicit TriAttentionPolicy(std::shared_ptr<const TriCalibration> calibration);

  std::string name() const override { return "triattention"; }
  bool needs_attention() const override { return false; }
  std::vector<float> scores(const ScoreContext& ctx) override { return triattention_scores(*cal_, ctx); }

 private:
  std::shared_ptr<const TriCalibration> cal_;
};

}  // namespace kvscope
