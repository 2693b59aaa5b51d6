// Eager attention: the whole probability matrix, kept. (CPU: attention_eager.)
//
// FlashAttention never holds a row of probabilities; H2O and SnapKV need them
// (how much attention each cached token received). This path materialises
//   P[h, t, j] = softmax_j(q_t . k_j / sqrt(d))      [n_heads, T, table_slots]
// in global memory, in four simple kernels, each a textbook pattern:
//
//   1. scores   one warp per (head, query, slot): lanes split the head's
//               dimensions, warp_sum gives the dot product; masked slots -inf
//   2. softmax  one block per (head, query) row: block max, exp, block sum, divide
//   3. output   one block per (head, query): thread d sums P[h, t, j] V[j, d] over j
//   4. colsums  one thread per (head, slot): prob_sums[h, j] += sum over the
//               queries t >= sum_from of P[h, t, j], in query order
//
// Slots are indexed as in the block table (logical order), holes included with
// probability 0, so prob_sums lines up with the CPU's table_index.
#include "common.cuh"
#include "cuda_check.h"
#include "kernels.h"

namespace kvscope::cuda {

constexpr int kScoreWarps = 8;  // slots per block in kernel 1

__global__ void eager_scores_kernel(float* probs, const float* q, const int* q_pos, int T, PagedKv kv, Heads hs,
                                    float scale) {
  const int j = blockIdx.x * kScoreWarps + threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int t = blockIdx.y, h = blockIdx.z, hd = hs.head_dim;
  if (j >= kv.table_slots) return;
  const int p = kv.slot_pos[j];
  float s = -INFINITY;
  if (p >= 0 && p <= q_pos[t]) {
    const int kv_head = h / (hs.n_heads / hs.n_kv_heads);
    const size_t row = (size_t(kv.block_table[j / kv.block_size]) * kv.block_size + j % kv.block_size) *
                           (hs.n_kv_heads * hd) + size_t(kv_head) * hd;
    const float* qh = q + (size_t(t) * hs.n_heads + h) * hd;
    float dot = 0.0f;
    for (int d = lane; d < hd; d += kWarp) dot += qh[d] * kv.k[row + d];
    s = warp_sum(dot) * scale;
  }
  if (lane == 0) probs[(size_t(h) * T + t) * kv.table_slots + j] = s;
}

__global__ void eager_softmax_kernel(float* probs, int T, int n) {
  __shared__ float scratch[kWarp];
  float* row = probs + (size_t(blockIdx.y) * T + blockIdx.x) * n;  // head blockIdx.y, query blockIdx.x
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < n; j += blockDim.x) mx = fmaxf(mx, row[j]);
  mx = block_max(mx, scratch);
  float sum = 0.0f;
  for (int j = threadIdx.x; j < n; j += blockDim.x) sum += (row[j] = expf(row[j] - mx));  // masked: exp(-inf) = 0
  sum = block_sum(sum, scratch);
  for (int j = threadIdx.x; j < n; j += blockDim.x) row[j] /= sum;
}

__global__ void eager_output_kernel(float* out, const float* probs, int T, PagedKv kv, Heads hs) {
  const int t = blockIdx.x, h = blockIdx.y, hd = hs.head_dim;
  const int kv_head = h / (hs.n_heads / hs.n_kv_heads);
  const float* p = probs + (size_t(h) * T + t) * kv.table_slots;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float acc = 0.0f;
    for (int j = 0; j < kv.table_slots; ++j) {
      if (p[j] == 0.0f) continue;  // masked or a hole (the same j for every thread: no divergence)
      const size_t row = (size_t(kv.block_table[j / kv.block_size]) * kv.block_size + j % kv.block_size) *
                             (hs.n_kv_heads * hd) + size_t(kv_head) * hd;
      acc += p[j] * kv.v[row + d];
    }
    out[(size_t(t) * hs.n_heads + h) * hd + d] = acc;
  }
}

__global__ void eager_colsum_kernel(float* prob_sums, const float* probs, int T, int n, int sum_from) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x, h = blockIdx.y;
  if (j >= n) return;
  float s = prob_sums[size_t(h) * n + j];
  for (int t = sum_from; t < T; ++t) s += probs[(size_t(h) * T + t) * n + j];  // neighbouring threads: neighbouring j
  prob_sums[size_t(h) * n + j] = s;
}

void eager_attention(float* out, float* probs, float* prob_sums, int sum_from, const float* q, const int* q_pos,
                     int T, const PagedKv& kv, Heads h) {
  if (kv.row_start) throw Error("eager_attention: one block table for all queries (row tables are for paged_attention)");
  const float scale = 1.0f / sqrtf(float(h.head_dim));
  const int n = kv.table_slots;
  eager_scores_kernel<<<dim3(ceil_div(size_t(n), kScoreWarps), T, h.n_heads), kScoreWarps * kWarp>>>(probs, q, q_pos,
                                                                                                    T, kv, h, scale);
  CUDA_CHECK_LAUNCH();
  eager_softmax_kernel<<<dim3(T, h.n_heads), 256>>>(probs, T, n);
  CUDA_CHECK_LAUNCH();
  eager_output_kernel<<<dim3(T, h.n_heads), 128>>>(out, probs, T, kv, h);
  CUDA_CHECK_LAUNCH();
  if (prob_sums && sum_from < T) {
    eager_colsum_kernel<<<dim3(ceil_div(size_t(n), 256), h.n_heads), 256>>>(prob_sums, probs, T, n, sum_from);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace kvscope::cuda
