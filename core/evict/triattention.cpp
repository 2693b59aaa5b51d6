// TriAttention's scoring: the derivation, TriScorer, triattention_scores and the policy.
// The calibration it reads: triattention_calibration.cpp.
#include "evict/triattention.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "model/key_scores.h"
#include "model/ops.h"
#include "util/error.h"

namespace kvscope {

// ============================================================================
// Scoring a post-RoPE key without un-rotating it: the derivation
// ============================================================================
//
// 1. Bands as complex numbers. Split a head vector x of d numbers into d/2 bands:
//        x_f = x[f] + i x[f + d/2],      f = 0 .. d/2 - 1      (rotate-half pairing)
//    A dot product is a sum over bands:
//        x . y = sum_f (x[f] y[f] + x[f+d/2] y[f+d/2]) = sum_f Re(x_f conj(y_f)).
//
// 2. RoPE multiplies each band by a phase. model/ops.cpp rotates a token at
//    position p by the angle a = omega_f p, omega_f = theta^(-2f/d):
//        v[f]       = x[f] cos a - x[f+d/2] sin a
//        v[f + d/2] = x[f+d/2] cos a + x[f] sin a
//    which is exactly (x[f] + i x[f+d/2]) (cos a + i sin a):  v_f = x_f e^{+i omega_f p}.
//    So a cached key is  k~_f = k_f e^{+i omega_f p}  and a query at position s
//    is  q~_f = q_f e^{+i omega_f s}.
//
// 3. The attention logit (before the 1/sqrt(d) scale) is therefore
//        q~ . k~ = sum_f Re(q_f conj(k_f) e^{i omega_f (s - p)})
//                = sum_f |q_f||k_f| cos(omega_f D + phi_f),   D = s - p,  phi_f = arg(q_f conj(k_f)):
//    it depends on the positions only through the distance D. Replacing the
//    query by its calibrated centre qbar_f gives the paper's S_trig(D).
//
// 4. Now write S_trig with the key as it sits in the cache, k_f = k~_f e^{-i omega_f p}:
//        qbar_f conj(k_f) e^{i omega_f D} = qbar_f conj(k~_f) e^{+i omega_f p} e^{i omega_f D}
//                                         = (A_f + i B_f) e^{i omega_f tau},
//        A_f + i B_f = qbar_f conj(k~_f),   tau = p + D = t + delta   (D = t - p + delta).
//    (t is the round position, ScoreContext::now: the position of the next token.)
//    The key's own position cancels: tau is the position of the future query.
//    Taking the real part,
//        S_trig = sum_f Re((A_f + i B_f)(cos omega_f tau + i sin omega_f tau))
//               = sum_f (A_f cos(omega_f tau) - B_f sin(omega_f tau)).
//    Sign: MINUS B sin, for RoPE that multiplies by e^{+i angle} as ops.cpp does
//    (with e^{-i angle} it would be plus). tests/triattention_test.cpp checks it
//    against the un-rotated key and against the model's real attention logits.
//
// 5. The mean over the 17 offsets is linear, so it moves onto the trigonometric
//    factors, which depend only on the band and the round position t:
//        C_f = mean_delta cos(omega_f (t + delta)),   S_f = mean_delta sin(omega_f (t + delta))
//        mean_delta S_trig = sum_f (A_f C_f - B_f S_f).
//    Expanding A + iB = (qr + i qi)(kr - i ki) with k~_f = kr + i ki:
//        A_f C_f - B_f S_f = kr (qr C_f - qi S_f) + ki (qi C_f + qr S_f).
//    With u_f + i v_f = qbar_f (C_f + i S_f), i.e. the query centre rotated to the
//    future positions and averaged over them, the whole term is one dot product:
//        mean_delta S_trig = w . k~,     w = [u_0 .. u_{d/2-1}, v_0 .. v_{d/2-1}].
//    Per round: d/2 x 17 cosines and sines, then one w per (layer, query head).
//    Per key and head: a dot product of d numbers, as in attention itself.
//    Precision: the angles omega_f tau are taken in double with the f32 omega_f of
//    ops.cpp; the cached keys carry ops.cpp's f32 angle float(p) * omega_f, whose
//    rounding (about p * 6e-8 rad) is the only difference from the un-rotated form.
//
// 6. S_norm = sum_f (m_f - |qbar_f|) |k_f| needs only |k_f| = |k~_f| (a rotation
//    keeps lengths): the part of the query length that the centre does not
//    explain, credited in proportion to the key's length in each band.
//
// Where this follows the paper and design.md, and where kvscope simplifies:
//   follows     calibration on pre-RoPE queries after q_norm; qbar_f, m_f per
//               (layer, query head, band); S_trig + S_norm; 17 geometric offsets;
//               z-normalisation per head; max over the query heads of a GQA group.
//   simplifies  one selection for the whole sequence. design.md (from the authors'
//               code) ends with one score per (KV head, token), averaged over layers:
//               each KV head keeps its own tokens. kvscope's cache keeps or drops a
//               token in every layer and head at once (evict/policy.h), so the
//               per-KV-head scores are also averaged over the KV heads.
//               The round schedule (prune at budget + slack, protect the newest
//               `recent` tokens and the sinks) is the engine's EvictionSchedule; the
//               paper's setting is slack 128, recent 128.
// ============================================================================


double tri_omega(int band, int head_dim, double theta) {
  return double(rope_inv_freq(band, head_dim, theta));  // the f32 value rope() rotates by
}

// ---------------------------------------------------------------------------
// Scoring
// ---------------------------------------------------------------------------

TriScorer::TriScorer(const TriCalibration& cal, int64_t t) : heads_(cal.num_heads), dim_(cal.head_dim) {
  const int half = cal.bands();
  // C_f and S_f: the mean over the offsets of cos and sin of omega_f (t + delta), in double.
  std::vector<double> C(size_t(half), 0.0), S(size_t(half), 0.0);
  for (int f = 0; f < half; ++f) {
    const double omega = tri_omega(f, cal.head_dim, cal.rope_theta);
    for (int i = 0; i < kTriOffsets; ++i) {
      const double a = omega * (double(t) + tri_offset(i));
      C[f] += std::cos(a);
      S[f] += std::sin(a);
    }
    C[f] /= kTriOffsets;
    S[f] /= kTriOffsets;
  }
  const size_t rows = size_t(cal.num_layers) * cal.num_heads;
  w_.resize(rows * dim_);
  gap_.resize(rows * half);
  for (size_t r = 0; r < rows; ++r)
    for (int f = 0; f < half; ++f) {
      const size_t i = r * half + f;
      const double qr = cal.qbar_re[i], qi = cal.qbar_im[i];
      w_[r * dim_ + f] = float(qr * C[f] - qi * S[f]);         // u_f = Re(qbar_f (C_f + i S_f))
      w_[r * dim_ + f + half] = float(qi * C[f] + qr * S[f]);  // v_f = Im(qbar_f (C_f + i S_f))
      gap_[i] = float(double(cal.q_abs_mean[i]) - std::hypot(qr, qi));
    }
}

double TriScorer::trig(int layer, int head, const float* key) const {
  const float* w = future_query(layer, head);
  double s = 0;
  for (int i = 0; i < dim_; ++i) s += double(w[i]) * key[i];
  return s;
}

double TriScorer::norm(int layer, int head, const float* key) const {
  const int half = dim_ / 2;
  const float* g = norm_weights(layer, head);
  double s = 0;
  for (int f = 0; f < half; ++f) s += double(g[f]) * std::sqrt(double(key[f]) * key[f] + double(key[f + half]) * key[f + half]);
  return s;
}

// r = (r - mean(r)) / sd(r) over the n live keys: one query head's scores on a common
// scale. A head whose scores are all equal (sd ~ 0) gives zeros.
static void z_normalise(double* r, int n) {
  double mean = 0, var = 0;
  for (int j = 0; j < n; ++j) mean += r[j];
  mean /= n;
  for (int j = 0; j < n; ++j) var += (r[j] - mean) * (r[j] - mean);
  const double sd = std::sqrt(var / n);
  const double inv = sd > 1e-9 * std::max(1.0, std::abs(mean)) ? 1.0 / sd : 0.0;
  for (int j = 0; j < n; ++j) r[j] = (r[j] - mean) * inv;
}

// out[j] += mean over the K KV heads of (max over the G query heads of its group of raw[h][j]).
//   raw: [K * G, n]   out: [n]
// A NaN in any head of a group stays NaN (std::max(m, NaN) would drop it when it is not
// the group's first head), so select_keep refuses it by name.
static void add_mean_of_group_max(double* out, const double* raw, int K, int G, int n) {
  for (int g = 0; g < K; ++g)
    for (int j = 0; j < n; ++j) {
      double m = raw[size_t(g * G) * n + j];
      for (int h = g * G + 1; h < (g + 1) * G; ++h) {
        const double x = raw[size_t(h) * n + j];
        if (x > m || std::isnan(x)) m = x;
      }
      out[j] += m / K;
    }
}

std::vector<float> triattention_scores(const TriCalibration& cal, const ScoreContext& ctx) {
  if ((!ctx.kv && !ctx.backend) || !ctx.slots || !ctx.config)
    throw Error("triattention: the score context carries no cached keys (kv or backend, slots and config are needed)");
  const ModelConfig& c = *ctx.config;
  cal.check_matches(c, "triattention calibration" + (cal.text.empty() ? std::string() : " (text " + cal.text + ")"));
  const int n = int(ctx.pos.size());
  const LiveSlots& live = *ctx.slots;
  if (int(live.slots.size()) != n || int(live.pos.size()) != n)
    throw Error("triattention: the score context's slots and positions disagree (" + std::to_string(live.slots.size()) +
                " slots, " + std::to_string(n) + " positions)");
  if (n == 0) return {};

  // Table order -> ctx.pos order (ctx.pos is ascending).
  std::vector<int> where(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const auto it = std::lower_bound(ctx.pos.begin(), ctx.pos.end(), live.pos[i]);
    if (it == ctx.pos.end() || *it != live.pos[i])
      throw Error("triattention: slot position " + std::to_string(live.pos[i]) + " is not among the live positions");
    where[i] = int(it - ctx.pos.begin());
  }

  // The raw score of every key for every (layer, query head): mean over delta of
  // S_trig (w . k~) plus S_norm, computed where the keys are (CPU or GPU).
  const TriScorer scorer(cal, ctx.now);
  const int L = c.num_layers, H = c.num_heads, K = c.num_kv_heads, G = c.group_size();
  std::vector<double> table_raw(size_t(L) * H * n);  // [L, H, n] in table order
  if (ctx.backend)
    ctx.backend->key_scores(table_raw.data(), scorer.future_query(0, 0), scorer.norm_weights(0, 0), live.slots);
  else
    key_scores(table_raw.data(), scorer.future_query(0, 0), scorer.norm_weights(0, 0), live.slots, *ctx.kv,
               {H, K, c.head_dim});

  std::vector<double> per_layer(size_t(L) * n, 0.0);  // [L, n] mean over KV heads of the group max
  for (int l = 0; l < L; ++l) {
    std::vector<double> raw(size_t(H) * n);  // [H, n] in ctx.pos order
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < n; ++i) raw[size_t(h) * n + where[i]] = table_raw[(size_t(l) * H + h) * n + i];
    for (int h = 0; h < H; ++h) z_normalise(raw.data() + size_t(h) * n, n);
    add_mean_of_group_max(per_layer.data() + size_t(l) * n, raw.data(), K, G, n);
  }

  std::vector<float> scores(size_t(n), 0.0f);
  for (int j = 0; j < n; ++j) {
    double s = 0;
    for (int l = 0; l < L; ++l) s += per_layer[size_t(l) * n + j];  // fixed order: deterministic
    scores[j] = float(s / L);
  }
  return scores;
}

TriAttentionPolicy::TriAttentionPolicy(std::shared_ptr<const TriCalibration> calibration)
    : cal_(std::move(calibration)) {
  if (!cal_) throw Error("triattention: no calibration given");
}

}  // namespace kvscope
