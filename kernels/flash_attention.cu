// Prefill attention, tiled like FlashAttention (Dao et al. 2022), reading K/V
// through the block table. (CPU: attention_flash.)
//
// One thread block takes a tile of kQueryTile queries of one head and walks the
// table a tile of kKeyTile slots at a time. Shared memory holds:
//
//   Q  [kQueryTile][head_dim + 1]   the block's queries, loaded once
//   K  [kKeyTile][head_dim + 1]     this tile of keys   (gathered through the block table)
//   V  [kKeyTile][head_dim + 1]     this tile of values
//   S  [kQueryTile][kKeyTile]       scores, then exp(s - m_new), of this tile
//   O  [kQueryTile][head_dim]       the running output
//   m, l, correction [kQueryTile]  running max, running sum, this tile's correction factor
//   query_pos [kQueryTile], key_pos [kKeyTile]   (int) the positions of the queries and this tile's keys
//
// The +1 on the rows of K is padding: in step 3 a warp's threads read the same
// dimension of 32 different keys; with rows of head_dim + 1 floats those addresses
// fall in 32 different banks instead of one. (Q and V share the layout: in step 3
// the warp reads one Q element, a broadcast, and in step 5 consecutive V elements.)
//
// Per key tile, with a __syncthreads between steps:
//   2. the first kKeyTile threads load the tile's positions, which every thread
//      then reads; a tile whose keys all come after the block's latest query is
//      skipped whole, as on the CPU (in a causal prefill, about half of them);
//      else all threads load K, V (each slot's row is contiguous: coalesced);
//   3. all threads compute S = Q K^T / sqrt(d), masked by position (holes, later tokens);
//   4. one thread per query row folds S into its running softmax: new max, correction
//      factor exp(m_old - m_new), weights p = exp(s - m_new) (not yet divided by the
//      sum, so not P), running sum;
//   5. all threads update O = O * correction + p V, one (row, dim) entry at a time.
// At the end O / l is the attention output. Only the tiles live in fast memory,
// never a row of scores: memory stays O(tile), whatever the context.
#include "common.cuh"
#include "cuda_check.h"
#include "kernels.h"
#include "paged_kv.cuh"

namespace kvscope::cuda {

constexpr int kQueryTile = 16;
constexpr int kKeyTile = 32;
constexpr int kThreads = 128;

static size_t shared_bytes(int hd) {
  const size_t ld = size_t(hd) + 1;
  const size_t floats = (kQueryTile + 2 * kKeyTile) * ld + kQueryTile * kKeyTile + kQueryTile * size_t(hd) +
                        3 * kQueryTile;
  return floats * sizeof(float) + (kQueryTile + kKeyTile) * sizeof(int);
}

__global__ void flash_attention_kernel(float* out, const float* q, const int* q_pos, int T, PagedKv kv, Heads hs,
                                       float scale) {
  const int hd = hs.head_dim, ld = hd + 1, kv_dim = hs.n_kv_heads * hd;
  const int h = blockIdx.y, t0 = blockIdx.x * kQueryTile, n_q = min(kQueryTile, T - t0);
  const int kv_head = h / (hs.n_heads / hs.n_kv_heads);

  extern __shared__ float smem[];
  float* Q = smem;
  float* K = Q + kQueryTile * ld;
  float* V = K + kKeyTile * ld;
  float* S = V + kKeyTile * ld;
  float* O = S + kQueryTile * kKeyTile;
  float* m = O + kQueryTile * hd;
  float* l = m + kQueryTile;
  float* correction = l + kQueryTile;
  int* query_pos = reinterpret_cast<int*>(correction + kQueryTile);
  int* key_pos = query_pos + kQueryTile;

  // 1. The query tile (rows past T are zeros with position -1: they see nothing).
  for (int e = threadIdx.x; e < kQueryTile * hd; e += blockDim.x) {
    const int r = e / hd, d = e % hd;
    Q[r * ld + d] = r < n_q ? q[(size_t(t0 + r) * hs.n_heads + h) * hd + d] : 0.0f;
    O[e] = 0.0f;
  }
  if (threadIdx.x < kQueryTile) {
    m[threadIdx.x] = -INFINITY;
    l[threadIdx.x] = 0.0f;
    query_pos[threadIdx.x] = int(threadIdx.x) < n_q ? q_pos[t0 + threadIdx.x] : -1;
  }

  __syncthreads();
  int last_query = -1;  // the block's latest query: keys after it are masked for every row
  for (int r = 0; r < kQueryTile; ++r) last_query = max(last_query, query_pos[r]);

  for (int j0 = 0; j0 < kv.table_slots; j0 += kKeyTile) {
    __syncthreads();  // the previous tile's positions, V and S are no longer read
    // 2. This tile's positions; then, unless no query may see any of them, its keys
    //    and values, gathered through the block table. Every thread reads the same
    //    positions, so the whole block skips or none of it does.
    if (threadIdx.x < kKeyTile)
      key_pos[threadIdx.x] = j0 + int(threadIdx.x) < kv.table_slots ? kv.slot_pos[j0 + threadIdx.x] : -1;
    __syncthreads();
    bool any_visible = false;
    for (int jj = 0; jj < kKeyTile; ++jj) any_visible |= key_pos[jj] >= 0 && key_pos[jj] <= last_query;
    if (!any_visible) continue;  // a hole or a later token in every slot: the tile adds nothing
    for (int e = threadIdx.x; e < kKeyTile * hd; e += blockDim.x) {
      const int jj = e / hd, d = e % hd, j = j0 + jj;
      // A hole or an unwritten slot is never read: its P is 0, but 0 * (a stale NaN or
      // inf) is NaN, and the paged and eager kernels skip such slots too.
      float kx = 0.0f, vx = 0.0f;
      if (key_pos[jj] >= 0) {  // -1 also past the table's end
        const size_t row = slot_row(kv.block_table, kv.block_size, j) * kv_dim + size_t(kv_head) * hd;
        kx = kv.k[row + d];
        vx = kv.v[row + d];
      }
      K[jj * ld + d] = kx;
      V[jj * ld + d] = vx;
    }
    __syncthreads();

    // 3. Scores, masked by position: a hole (-1) or a later token gets -inf.
    for (int e = threadIdx.x; e < kQueryTile * kKeyTile; e += blockDim.x) {
      const int r = e / kKeyTile, jj = e % kKeyTile, p = key_pos[jj];
      float s = -INFINITY;
      if (p >= 0 && p <= query_pos[r]) {
        float dot = 0.0f;
        for (int d = 0; d < hd; ++d) dot += Q[r * ld + d] * K[jj * ld + d];
        s = dot * scale;
      }
      S[e] = s;
    }
    __syncthreads();

    // 4. Online softmax, one thread per query row.
    if (threadIdx.x < kQueryTile) {
      const int r = threadIdx.x;
      float* row = S + r * kKeyTile;
      float m_tile = -INFINITY;
      for (int jj = 0; jj < kKeyTile; ++jj) m_tile = fmaxf(m_tile, row[jj]);
      const float m_new = fmaxf(m[r], m_tile);
      if (m_new == -INFINITY) {  // nothing visible yet: keep O, l, m as they are
        correction[r] = 1.0f;
        for (int jj = 0; jj < kKeyTile; ++jj) row[jj] = 0.0f;
      } else {
        correction[r] = expf(m[r] - m_new);  // 0 when m[r] was -inf
        float sum = 0.0f;
        for (int jj = 0; jj < kKeyTile; ++jj) sum += (row[jj] = expf(row[jj] - m_new));  // exp(-inf) = 0
        l[r] = l[r] * correction[r] + sum;
        m[r] = m_new;
      }
    }
    __syncthreads();

    // 5. O = O * correction + p V.
    for (int e = threadIdx.x; e < kQueryTile * hd; e += blockDim.x) {
      const int r = e / hd, d = e % hd;
      float acc = O[e] * correction[r];
      for (int jj = 0; jj < kKeyTile; ++jj) acc += S[r * kKeyTile + jj] * V[jj * ld + d];
      O[e] = acc;
    }
  }
  __syncthreads();

  // 6. Normalise and write the tile's outputs.
  for (int e = threadIdx.x; e < n_q * hd; e += blockDim.x) {
    const int r = e / hd, d = e % hd;
    out[(size_t(t0 + r) * hs.n_heads + h) * hd + d] = O[e] / l[r];
  }
}

void flash_attention(float* out, const float* q, const int* q_pos, int T, const PagedKv& kv, Heads h) {
  if (kv.row_start) throw Error("flash_attention: one block table for all queries (row tables are for paged_attention)");
  const size_t bytes = shared_bytes(h.head_dim);
  // Above 48 KiB of shared memory a kernel must ask for it (head_dim 128 needs 51,904 bytes, 50.7 KiB).
  CUDA_CHECK(cudaFuncSetAttribute(flash_attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  const float scale = 1.0f / sqrtf(float(h.head_dim));
  flash_attention_kernel<<<dim3(ceil_div(size_t(T), kQueryTile), h.n_heads), kThreads, bytes>>>(out, q, q_pos, T, kv,
                                                                                               h, scale);
  CUDA_CHECK_LAUNCH();
}

}  // namespace kvscope::cuda
