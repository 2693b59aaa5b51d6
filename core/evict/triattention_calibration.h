// TriAttention's calibration: the centre of a model's pre-RoPE queries in every
// frequency band, measured offline over a text, and the JSON file that keeps it.
//
//   calibrate()       model + text -> TriCalibration (runs the model, averages its queries)
//   TriCalibrator     the running sums calibrate() keeps, for queries from anywhere
//   TriCalibration    the centres and where they came from; save / load as JSON
//
// What the centres are for (scoring keys): evict/triattention.h.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/weights.h"

namespace kvscope {

// The per-band query statistics of a model, and where they came from.
struct TriCalibration {
  // The shape the arrays are for (checked against a model before use).
  int num_layers = 0, num_heads = 0, head_dim = 0;
  double rope_theta = 0;
  // Per layer, query head and band f in [0, head_dim/2):  [num_layers, num_heads, head_dim/2]
  std::vector<float> qbar_re, qbar_im;  // qbar_f = mean_t (q[f] + i q[f + d/2])   (pre-RoPE, after q_norm)
  std::vector<float> q_abs_mean;        // m_f    = mean_t |q[f] + i q[f + d/2]|

  // Provenance, recorded in the file: the rest of the model's numbers and the text.
  int num_kv_heads = 0, hidden_size = 0;  // 0 = not recorded (not checked)
  std::string model;                      // the model folder it was made with
  std::string text;                       // the text file it was made from
  int64_t tokens = 0;                     // query tokens averaged over
  int chunk = 0;                          // tokens per fresh cache (the longest context seen)

  int bands() const { return head_dim / 2; }
  size_t index(int layer, int head, int band) const {
    return (size_t(layer) * num_heads + head) * size_t(bands()) + band;
  }

  // kvscope::Error "SOURCE: ..." if the calibration was made for a model of another shape.
  void check_matches(const ModelConfig& c, const std::string& source) const;

  // JSON (format "kvscope.triattention.calibration", version 1; see triattention_calibration_file.cpp).
  // kvscope::Error naming the file if it cannot be written or holds a non-finite number.
  void save(const std::string& path) const;
  // kvscope::Error naming the file: unreadable, not JSON (e.g. truncated), another
  // format or version, missing fields, a count that is not an int, arrays of the
  // wrong shape, NaN or infinite values, or (second form) made for a model of
  // another shape. Fuzzed by tests/fuzz/calibration_fuzz.cpp.
  static TriCalibration load(const std::string& path);
  static TriCalibration load(const std::string& path, const ModelConfig& expect);
};

// Accumulates query statistics: sums in double, averaged by finish().
class TriCalibrator {
 public:
  explicit TriCalibrator(const ModelConfig& c);
  TriCalibrator(int num_layers, int num_heads, int head_dim, double rope_theta);

  // Adds T tokens' queries in the layout ForwardOptions::queries fills:
  //                                           queries: [num_layers, T, num_heads * head_dim]
  void add(const float* queries, int T);
  int64_t tokens() const { return tokens_; }
  // The centres so far; kvscope::Error if no token was added.
  TriCalibration finish() const;

 private:
  TriCalibration shape_;
  std::vector<double> sum_re_, sum_im_, sum_abs_;  // [num_layers, num_heads, head_dim/2]
  int64_t tokens_ = 0;
};

struct CalibrateOptions {
  int chunk = 0;    // tokens per fresh paged cache; 0 = min(1024, max_position_embeddings)
  int batch = 256;  // tokens per forward call inside a chunk (bounds the activations)
  // Called after every forward call: tokens done, tokens in all.
  std::function<void(int64_t done, int64_t total)> progress;
};

// Runs the model over `tokens` in chunks (each a fresh sequence starting at
// position 0) and averages the pre-RoPE queries of every token.
// kvscope::Error for no tokens or a chunk outside [1, max_position_embeddings].
TriCalibration calibrate(const Model& model, const std::vector<int>& tokens, const CalibrateOptions& options = {});

// The ratio |qbar_f| / m_f that n queries of one length give when they point every
// way at random: the sum of n random unit vectors in the plane has a length of
// about sqrt(pi n) / 2 (a Rayleigh distribution), so the ratio is about
// sqrt(pi / (4 n)). A calibration's ratios near it say nothing about a direction.
double tri_noise_ratio(int64_t n);

}  // namespace kvscope
