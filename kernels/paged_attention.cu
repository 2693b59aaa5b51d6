// Paged attention for decode: one query per head against every key in the
// sequence's block table, with online softmax. (CPU: attention_flash.)
//
// Decode is memory-bound: each cached K and V row is read once and used in one
// dot product. So the work is cut to keep the whole card reading: the table is
// split into slices of kSliceSlots logical slots, and one thread block handles
// one (query, query head, slice). Its 4 warps take the slice's keys in turn,
// warp w the keys w, w+4, w+8, ... For one key the warp's 32 lanes hold
// dimensions lane, lane+32, ... of the query (in registers) and read the same
// dimensions of the key: a coalesced read of one K row, a warp_sum for the dot
// product, then the same lanes read the V row.
//
// Online softmax (Milakov & Gimelshein 2018): each warp keeps a running max m,
// a running sum l of exp(s - m) and a running output acc = sum exp(s - m) v.
// When a new score raises the max, what is held is rescaled by exp(m_old - m_new).
// Holes (slot_pos -1) and tokens after the query are skipped before K is read.
//
// Two kernels:
//   1. per slice: the warps' (m, l, acc) are merged through shared memory into
//      one partial result per block, written to the workspace;
//   2. per (query, head): the slices' partials are merged the same way and
//      divided by the total sum.
// GQA: the query heads of a group read the same K/V rows; the second reader
// mostly finds them in L2.
//
// A serving step decodes many sequences at once: query row t is then sequence t's
// new token, and it reads sequence t's own block table (kv.row_start, kv.row_slots;
// vLLM's block_tables and seq_lens). The grid is sized for the longest table; the
// slices past a shorter table see no key and hand the merge an empty partial.
#include <cstdint>

#include "common.cuh"
#include "cuda_check.h"
#include "kernels.h"
#include "paged_kv.cuh"

namespace kvscope::cuda {

constexpr int kSliceSlots = 256;     // logical slots per thread block
constexpr int kWarps = 4;            // warps per block
constexpr int kMaxDimsPerLane = 8;   // head_dim <= 8 * 32 = 256

static int slices(int table_slots) { return int(ceil_div(size_t(table_slots), kSliceSlots)); }

// The workspace: for every (query, head, slice), m, l and acc[head_dim].
size_t paged_attention_workspace(int T, Heads h, int table_slots) {
  return size_t(T) * h.n_heads * slices(table_slots) * (h.head_dim + 2);
}

__global__ void paged_attention_slice_kernel(float* workspace, const float* q, const int* q_pos, PagedKv kv, Heads hs,
                                             float scale) {
  const int h = blockIdx.x, slice = blockIdx.y, t = blockIdx.z;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int hd = hs.head_dim, kv_dim = hs.n_kv_heads * hd;
  const int kv_head = h / (hs.n_heads / hs.n_kv_heads);
  const int p_query = q_pos[t];
  const RowTable table = row_table(kv, t);  // the whole of kv's, or row t's own in a batch

  // This lane's dimensions of the query, and its share of the running output.
  const float* qh = q + (size_t(t) * hs.n_heads + h) * hd;
  float qr[kMaxDimsPerLane], acc[kMaxDimsPerLane];
#pragma unroll
  for (int i = 0; i < kMaxDimsPerLane; ++i) {
    const int d = lane + i * kWarp;
    qr[i] = d < hd ? qh[d] : 0.0f;
    acc[i] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;

  const int begin = slice * kSliceSlots, end = min(begin + kSliceSlots, table.slots);
  for (int j = begin + warp; j < end; j += kWarps) {
    const int p = table.slot_pos[j];
    if (p < 0 || p > p_query) continue;  // a hole, or a token the query may not see (same j: the warp agrees)
    const size_t row = slot_row(table.blocks, kv.block_size, j) * kv_dim + size_t(kv_head) * hd;
    const float* k = kv.k + row;
    const float* v = kv.v + row;

    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < kMaxDimsPerLane; ++i)
      if (lane + i * kWarp < hd) dot += qr[i] * k[lane + i * kWarp];
    const float s = warp_sum(dot) * scale;

    const float m_new = fmaxf(m, s);
    const float correction = expf(m - m_new);  // exp(-inf) = 0 for the first key
    const float weight = expf(s - m_new);
    l = l * correction + weight;
#pragma unroll
    for (int i = 0; i < kMaxDimsPerLane; ++i)
      if (lane + i * kWarp < hd) acc[i] = acc[i] * correction + weight * v[lane + i * kWarp];
    m = m_new;
  }

  // Merge the block's warps. Shared memory: each warp's m, l and acc.
  __shared__ float warp_m[kWarps], warp_l[kWarps];
  __shared__ float warp_acc[kWarps][kMaxDimsPerLane * kWarp];
  if (lane == 0) {
    warp_m[warp] = m;
    warp_l[warp] = l;
  }
#pragma unroll
  for (int i = 0; i < kMaxDimsPerLane; ++i) warp_acc[warp][lane + i * kWarp] = acc[i];
  __syncthreads();

  float M = -INFINITY;  // the block's max; a warp that saw no key has m = -inf and adds nothing
  for (int w = 0; w < kWarps; ++w) M = fmaxf(M, warp_m[w]);
  float* out = workspace + ((size_t(t) * hs.n_heads + h) * gridDim.y + slice) * (hd + 2);
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float sum = 0.0f;
    for (int w = 0; w < kWarps; ++w)
      if (warp_m[w] > -INFINITY) sum += warp_acc[w][d] * expf(warp_m[w] - M);
    out[2 + d] = sum;
  }
  if (threadIdx.x == 0) {
    float L = 0.0f;
    for (int w = 0; w < kWarps; ++w)
      if (warp_m[w] > -INFINITY) L += warp_l[w] * expf(warp_m[w] - M);
    out[0] = M;
    out[1] = L;
  }
}

// One block per (head, query): thread d merges dimension d over the slices.
__global__ void paged_attention_merge_kernel(float* out, const float* workspace, Heads hs, int n_slices) {
  const int h = blockIdx.x, t = blockIdx.y, hd = hs.head_dim;
  const float* part = workspace + (size_t(t) * hs.n_heads + h) * n_slices * (hd + 2);
  float M = -INFINITY;
  for (int s = 0; s < n_slices; ++s) M = fmaxf(M, part[s * (hd + 2)]);
  float L = 0.0f;
  for (int s = 0; s < n_slices; ++s)
    if (part[s * (hd + 2)] > -INFINITY) L += part[s * (hd + 2) + 1] * expf(part[s * (hd + 2)] - M);
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float sum = 0.0f;
    for (int s = 0; s < n_slices; ++s)
      if (part[s * (hd + 2)] > -INFINITY) sum += part[s * (hd + 2) + 2 + d] * expf(part[s * (hd + 2)] - M);
    out[(size_t(t) * hs.n_heads + h) * hd + d] = sum / L;  // L > 0: a query always sees itself
  }
}

void paged_attention(float* out, const float* q, const int* q_pos, int T, const PagedKv& kv, Heads h,
                     float* workspace) {
  if (h.head_dim > kMaxDimsPerLane * kWarp) throw Error("paged_attention: head_dim above 256");
  if (T > kMaxPagedQueries)
    throw Error("paged_attention: at most " + std::to_string(kMaxPagedQueries) + " queries at once (a grid's y and z"
                " axes), got " + std::to_string(T));
  const int n_slices = slices(kv.table_slots);
  const float scale = 1.0f / sqrtf(float(h.head_dim));
  paged_attention_slice_kernel<<<dim3(h.n_heads, n_slices, T), kWarps * kWarp>>>(workspace, q, q_pos, kv, h, scale);
  CUDA_CHECK_LAUNCH();
  paged_attention_merge_kernel<<<dim3(h.n_heads, T), 128>>>(out, workspace, h, n_slices);
  CUDA_CHECK_LAUNCH();
}

}  // namespace kvscope::cuda
