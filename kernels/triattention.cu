// TriAttention's key scores on the GPU: the per-key sums of evict/triattention.cpp.
// (CPU: key_scores in model/key_scores.cpp.)
//
// For layer l, query head h and cached (post-RoPE) key k of h's KV head:
//   raw = w[l, h] . k  +  sum_f gap[l, h, f] * |k_f|,   |k_f| = sqrt(k[f]^2 + k[f + d/2]^2)
// w is the head's "future query" (calibrated centre rotated to the positions
// ahead, averaged over the offsets) and gap the part of the query length the
// centre does not explain (see triattention.cpp for the derivation).
//
// One warp per (layer, head, key). Lane i takes the bands f = i, i+32, ...: for
// each it reads the band's two key numbers k[f], k[f + d/2] (the rotate-half
// pair), adds w[f] k[f] + w[f + d/2] k[f + d/2] + gap[f] |k_f|, and warp_sum
// adds the lanes. In double, like the CPU: the host then z-normalises per head
// and ranks the keys, and the ranks should not depend on where the sums ran.
#include "common.cuh"
#include "cuda_check.h"
#include "kernels.h"

namespace kvscope::cuda {

constexpr int kKeysPerBlock = 8;  // 8 warps

__global__ void key_scores_kernel(double* raw, const float* w, const float* gap, const int* slots, int n,
                                  const float* k_cache, size_t layer_floats, Heads hs) {
  const int i = blockIdx.x * kKeysPerBlock + threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int h = blockIdx.y, l = blockIdx.z, H = hs.n_heads, hd = hs.head_dim, half = hd / 2;
  if (i >= n) return;
  const int kv_head = h / (H / hs.n_kv_heads);
  const float* k = k_cache + l * layer_floats + size_t(slots[i]) * (hs.n_kv_heads * hd) + size_t(kv_head) * hd;
  const float* wh = w + (size_t(l) * H + h) * hd;
  const float* gh = gap + (size_t(l) * H + h) * half;

  double s = 0.0;
  for (int f = lane; f < half; f += kWarp) {
    const double re = k[f], im = k[f + half];
    s += double(wh[f]) * re + double(wh[f + half]) * im + double(gh[f]) * sqrt(re * re + im * im);
  }
  s = warp_sum(s);
  if (lane == 0) raw[(size_t(l) * H + h) * n + i] = s;
}

void key_scores(double* raw, const float* w, const float* gap, const int* slots, int n, const float* k_cache,
                int num_layers, size_t layer_floats, Heads h) {
  if (n == 0) return;
  key_scores_kernel<<<dim3(ceil_div(size_t(n), kKeysPerBlock), h.n_heads, num_layers), kKeysPerBlock * kWarp>>>(
      raw, w, gap, slots, n, k_cache, layer_floats, h);
  CUDA_CHECK_LAUNCH();
}

}  // namespace kvscope::cuda
