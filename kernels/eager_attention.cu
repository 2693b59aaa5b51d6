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
//
// A serving step in which several sequences decode under H2O asks this of all of
// them at once: query row t is then sequence t's new token, reading its own table
// (kv.row_start, as in paged_attention). Row t's P is padded to the longest table
// with zeros, and kernel 4 becomes one thread per (row, head, slot) adding that
// row's single query to the row's own sums.
#include "common.cuh"
#include "cuda_check.h"
#include "kernels.h"
#include "paged_kv.cuh"

namespace kvscope::cuda {

constexpr int kScoreWarps = 8;  // slots per block in kernel 1

__global__ void eager_scores_kernel(float* probs, const float* q, const int* q_pos, int T, PagedKv kv, Heads hs,
                                    float scale) {
  const int j = blockIdx.x * kScoreWarps + threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int t = blockIdx.y, h = blockIdx.z, hd = hs.head_dim;
  if (j >= kv.table_slots) return;
  const RowTable table = row_table(kv, t);
  const int p = j < table.slots ? table.slot_pos[j] : -1;  // past a shorter row's table: as a hole
  float s = -INFINITY;
  if (p >= 0 && p <= q_pos[t]) {
    const int kv_head = h / (hs.n_heads / hs.n_kv_heads);
    const size_t row = slot_row(table.blocks, kv.block_size, j) * (hs.n_kv_heads * hd) + size_t(kv_head) * hd;
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
  const RowTable table = row_table(kv, t);
  const float* p = probs + (size_t(h) * T + t) * kv.table_slots;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float acc = 0.0f;
    for (int j = 0; j < table.slots; ++j) {
      if (p[j] == 0.0f) continue;  // masked or a hole (the same j for every thread: no divergence)
      const size_t row = slot_row(table.blocks, kv.block_size, j) * (hs.n_kv_heads * hd) + size_t(kv_head) * hd;
      acc += p[j] * kv.v[row + d];
    }
    out[(size_t(t) * hs.n_heads + h) * hd + d] = acc;
  }
}

// One table: prob_sums[h, j] += P[h, t, j] for t = sum_from .. T-1.
__global__ void eager_colsum_kernel(float* prob_sums, const float* probs, int T, int n, int sum_from) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x, h = blockIdx.y;
  if (j >= n) return;
  float s = prob_sums[size_t(h) * n + j];
  for (int t = sum_from; t < T; ++t) s += probs[(size_t(h) * T + t) * n + j];  // neighbouring threads: neighbouring j
  prob_sums[size_t(h) * n + j] = s;
}

// A table per row: row t's sums, [n_heads, its slots] at prob_sums + row_sums[t], += P[h, t, j].
__global__ void eager_row_sums_kernel(float* prob_sums, const int64_t* row_sums, const float* probs, int T, PagedKv kv) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x, h = blockIdx.y, t = blockIdx.z;
  const int n = row_table(kv, t).slots;
  if (j >= n || row_sums[t] < 0) return;
  prob_sums[row_sums[t] + size_t(h) * n + j] += probs[(size_t(h) * T + t) * kv.table_slots + j];
}

void eager_attention(float* out, float* probs, float* prob_sums, int sum_from, const float* q, const int* q_pos,
                     int T, const PagedKv& kv, Heads h, const int64_t* row_sums) {
  if (kv.row_start && prob_sums && !row_sums)
    throw Error("eager_attention: with a table per row, row_sums must say where each row's sums go");
  if (T > kMaxEagerQueries)
    throw Error("eager_attention: at most " + std::to_string(kMaxEagerQueries) + " queries at once (a grid's y and z"
                " axes), got " + std::to_string(T));
  const float scale = 1.0f / sqrtf(float(h.head_dim));
  const int n = kv.table_slots;
  eager_scores_kernel<<<dim3(ceil_div(size_t(n), kScoreWarps), T, h.n_heads), kScoreWarps * kWarp>>>(probs, q, q_pos,
                                                                                                    T, kv, h, scale);
  CUDA_CHECK_LAUNCH();
  eager_softmax_kernel<<<dim3(T, h.n_heads), 256>>>(probs, T, n);
  CUDA_CHECK_LAUNCH();
  eager_output_kernel<<<dim3(T, h.n_heads), 128>>>(out, probs, T, kv, h);
  CUDA_CHECK_LAUNCH();
  if (prob_sums && kv.row_start) {
    eager_row_sums_kernel<<<dim3(ceil_div(size_t(n), 256), h.n_heads, T), 256>>>(prob_sums, row_sums, probs, T, kv);
    CUDA_CHECK_LAUNCH();
  } else if (prob_sums && sum_from < T) {
    eager_colsum_kernel<<<dim3(ceil_div(size_t(n), 256), h.n_heads), 256>>>(prob_sums, probs, T, n, sum_from);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace kvscope::cuda
