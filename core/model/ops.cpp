#include "model/ops.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "model/bf16.h"
#include "model/matvec.h"
#include "util/omp_errors.h"

namespace kvscope {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMatrix>;
using Map = Eigen::Map<RowMatrix, 0, Eigen::OuterStride<>>;

void embed(float* out, const Matrix& table, const int* tokens, int T) {
  const int d = table.cols;
  for (int t = 0; t < T; ++t) {
    const size_t row = size_t(tokens[t]) * d;
    if (table.dtype == DType::F32) {
      std::memcpy(out + size_t(t) * d, table.f32() + row, d * sizeof(float));
    } else {
      for (int i = 0; i < d; ++i) out[size_t(t) * d + i] = bf16_to_f32(table.bf16()[row + i]);
    }
  }
}

void rmsnorm(float* out, const float* x, const float* weight, int rows, int n, float eps) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + size_t(r) * n;
    float* yr = out + size_t(r) * n;
    double sum_sq = 0;  // summed in double (Hugging Face sums in f32: the two agree to float rounding)
    for (int i = 0; i < n; ++i) sum_sq += double(xr[i]) * xr[i];
    const float inv_rms = 1.0f / std::sqrt(float(sum_sq / n) + eps);
    for (int i = 0; i < n; ++i) yr[i] = weight[i] * (xr[i] * inv_rms);
  }
}

void matmul(float* out, const float* x, const Matrix& W, int T) {
  if (T == 1) {  // decode: read every weight once
    if (W.dtype == DType::F32) matvec_f32(W.f32(), x, out, W.rows, W.cols);
    else matvec_bf16(W.bf16(), x, out, W.rows, W.cols);
    return;
  }
  // Prefill: Eigen's GEMM, one band of weight rows at a time, the bands shared out over
  // the threads. Each band is a single-threaded product (Eigen's own threading is off:
  // EIGEN_DONT_PARALLELIZE, core/CMakeLists.txt) of the same shape whatever the thread
  // count, so every output sums its terms in the same order: --threads changes the
  // speed, never the numbers. BF16 bands are widened to f32 first, which also keeps
  // the scratch small (the whole lm_head would be 600 MB in f32).
  constexpr int kBand = 256;  // weight rows per band
  const int bands = (W.rows + kBand - 1) / kBand;
  const ConstMap X(x, T, W.cols);  // [T, cols]
  OmpErrors errors;  // an exception cannot leave the region (Eigen's scratch, `widened`): rethrown after it
#pragma omp parallel if (bands > 1)
  {
    std::vector<float> widened;  // [kBand, cols]  this thread's BF16 band in f32
#pragma omp for schedule(dynamic, 1)
    for (int b = 0; b < bands; ++b) errors.run([&] {
      const int r0 = b * kBand, rows = std::min(kBand, W.rows - r0);
      const float* band = nullptr;  // [rows, cols]
      if (W.dtype == DType::F32) {
        band = W.f32() + size_t(r0) * W.cols;
      } else {
        widened.resize(size_t(kBand) * W.cols);  // once per thread
        const uint16_t* src = W.bf16() + size_t(r0) * W.cols;
        for (size_t i = 0; i < size_t(rows) * W.cols; ++i) widened[i] = bf16_to_f32(src[i]);
        band = widened.data();
      }
      Map(out + r0, T, rows, Eigen::OuterStride<>(W.rows)).noalias() = X * ConstMap(band, rows, W.cols).transpose();
    });
  }
  errors.rethrow();
}

void matmul_rows(float* out, const float* x, const Matrix& W, int T) {
  if (W.dtype == DType::F32) matvec_f32_n(W.f32(), x, out, W.rows, W.cols, T);
  else matvec_bf16_n(W.bf16(), x, out, W.rows, W.cols, T);
}

float rope_inv_freq(int i, int head_dim, double theta) {
  return 1.0f / std::pow(float(theta), float(2 * i) / float(head_dim));
}

void rope(float* x, int n_heads, int head_dim, int pos, double theta) {
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    const float angle = float(pos) * rope_inv_freq(i, head_dim, theta);  // in f32, as Hugging Face
    const float c = std::cos(angle), s = std::sin(angle);
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + size_t(h) * head_dim;
      const float a = v[i], b = v[i + half];  // rotate_half pairs i with i + d/2
      v[i] = a * c - b * s;
      v[i + half] = b * c + a * s;
    }
  }
}

void swiglu(float* out, const float* gate, const float* up, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void add_inplace(float* x, const float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] += y[i];
}

}  // namespace kvscope
