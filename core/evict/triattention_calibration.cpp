// TriAttention's calibration: the query centres (TriCalibrator, calibrate). The file
// that keeps them: triattention_calibration_file.cpp. The scoring: triattention.cpp.
#include "evict/triattention_calibration.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "model/qwen3.h"
#include "util/error.h"

namespace kvscope {

double tri_noise_ratio(int64_t n) { return std::sqrt(M_PI / (4.0 * double(n))); }

// ---------------------------------------------------------------------------
// Calibration
// ---------------------------------------------------------------------------

TriCalibrator::TriCalibrator(const ModelConfig& c)
    : TriCalibrator(c.num_layers, c.num_heads, c.head_dim, c.rope_theta) {
  shape_.num_kv_heads = c.num_kv_heads;
  shape_.hidden_size = c.hidden_size;
}

TriCalibrator::TriCalibrator(int num_layers, int num_heads, int head_dim, double rope_theta) {
  if (num_layers < 1 || num_heads < 1 || head_dim < 2 || head_dim % 2)
    throw Error("triattention: calibration needs layers >= 1, heads >= 1 and an even head_dim");
  shape_.num_layers = num_layers;
  shape_.num_heads = num_heads;
  shape_.head_dim = head_dim;
  shape_.rope_theta = rope_theta;
  const size_t n = size_t(num_layers) * num_heads * (head_dim / 2);
  sum_re_.assign(n, 0.0);
  sum_im_.assign(n, 0.0);
  sum_abs_.assign(n, 0.0);
}

void TriCalibrator::add(const float* queries, int T) {
  const int L = shape_.num_layers, H = shape_.num_heads, d = shape_.head_dim, half = d / 2;
  const size_t q_dim = size_t(H) * d;
  for (int l = 0; l < L; ++l)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < H; ++h) {
        const float* q = queries + (size_t(l) * T + t) * q_dim + size_t(h) * d;
        const size_t at = shape_.index(l, h, 0);
        for (int f = 0; f < half; ++f) {
          const double re = q[f], im = q[f + half];
          sum_re_[at + f] += re;
          sum_im_[at + f] += im;
          sum_abs_[at + f] += std::sqrt(re * re + im * im);
        }
      }
  tokens_ += T;
}

TriCalibration TriCalibrator::finish() const {
  if (tokens_ == 0) throw Error("triattention: calibration saw no tokens");
  TriCalibration c = shape_;
  const size_t n = sum_re_.size();
  c.qbar_re.resize(n);
  c.qbar_im.resize(n);
  c.q_abs_mean.resize(n);
  for (size_t i = 0; i < n; ++i) {
    c.qbar_re[i] = float(sum_re_[i] / double(tokens_));
    c.qbar_im[i] = float(sum_im_[i] / double(tokens_));
    c.q_abs_mean[i] = float(sum_abs_[i] / double(tokens_));
  }
  c.tokens = tokens_;
  return c;
}

TriCalibration calibrate(const Model& model, const std::vector<int>& tokens, const CalibrateOptions& options) {
  const ModelConfig& c = model.config;
  if (tokens.empty()) throw Error("calibrate: no tokens to calibrate on");
  const int chunk = options.chunk > 0 ? options.chunk : std::min(1024, c.max_position_embeddings);
  if (options.chunk < 0 || chunk > c.max_position_embeddings)
    throw Error("calibrate: --chunk " + std::to_string(options.chunk) + " is outside [1, max_position_embeddings = " +
                std::to_string(c.max_position_embeddings) + "]");
  const int batch = std::max(1, options.batch);
  constexpr int kBlock = 16;

  TriCalibrator acc(c);
  RunState state;
  std::vector<float> queries;
  ForwardOptions fo;
  fo.queries = &queries;
  const int64_t total = int64_t(tokens.size());
  for (int64_t start = 0; start < total; start += chunk) {
    // A fresh sequence per chunk: its tokens sit at positions 0 .. len-1.
    const int len = int(std::min<int64_t>(chunk, total - start));
    PagedKvCache cache((len + kBlock - 1) / kBlock, kBlock, MemoryStrategy::HolesOnly);
    KvStorage kv(c, cache.num_blocks(), kBlock);
    const int seq = cache.add_sequence();
    for (int b = 0; b < len; b += batch) {
      const int T = std::min(batch, len - b);
      forward(model, cache, kv, seq, state, tokens.data() + start + b, T, fo);
      acc.add(queries.data(), T);
      if (options.progress) options.progress(start + b + T, total);
    }
  }
  TriCalibration cal = acc.finish();
  cal.chunk = chunk;
  return cal;
}

}  // namespace kvscope
