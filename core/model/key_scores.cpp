#include "model/key_scores.h"

#include <cmath>

#include "util/omp_errors.h"

namespace kvscope {

void key_scores(double* raw, const float* w, const float* gap, const std::vector<SlotRef>& slots,
                const KvStorage& kv, AttentionShape shape) {
  const int L = kv.num_layers, H = shape.n_heads, G = shape.n_heads / shape.n_kv_heads, d = shape.head_dim,
            half = d / 2;
  const int n = int(slots.size());
  OmpErrors errors;
#pragma omp parallel for schedule(dynamic, 1) if (double(L) * H * n * d > kMinParallelAttention)
  for (int l = 0; l < L; ++l) errors.run([&] {
    std::vector<double> kabs(static_cast<size_t>(half));  // [head_dim/2] |k_f| of the key's band f
    for (int i = 0; i < n; ++i) {
      const float* key = kv.key(l, slots[i]);
      for (int g = 0; g < shape.n_kv_heads; ++g) {
        const float* k = key + size_t(g) * d;
        for (int f = 0; f < half; ++f) kabs[f] = std::sqrt(double(k[f]) * k[f] + double(k[f + half]) * k[f + half]);
        for (int h = g * G; h < (g + 1) * G; ++h) {
          const float* wh = w + (size_t(l) * H + h) * d;
          const float* gh = gap + (size_t(l) * H + h) * half;
          double s_trig = 0, s_norm = 0;
          for (int j = 0; j < d; ++j) s_trig += double(wh[j]) * k[j];        // w . k~
          for (int f = 0; f < half; ++f) s_norm += double(gh[f]) * kabs[f];  // gap . |k|
          raw[(size_t(l) * H + h) * n + i] = s_trig + s_norm;
        }
      }
    }
  });
  errors.rethrow();
}

}  // namespace kvscope
