// Compaction: execute the host's plan of moves on the K/V storage.
// (CPU: KvStorage::apply; the plan: PagedKvCache::plan_compaction.)
//
// A move copies one slot's row (kv_dim floats) to another slot, in K and V of
// every layer. The plan must run "in order": a move may write a slot that an
// earlier move read (survivors slide forward into slots just vacated), so a
// naive one-thread-block-per-move launch would race.
//
// The trick: parallelise over the columns, not over the moves. One thread owns
// one 16-byte column (4 floats) of the rows of one layer's K or V, and replays
// the whole plan on that column. Columns never interact, so each thread only
// has to respect the order on its own column, and neighbouring threads touch
// neighbouring columns of the same row: coalesced. For Qwen3-0.6B (28 layers,
// kv_dim 1024) that is 28 * 2 * 256 = 14,336 threads.
//
// To keep several reads in flight, a thread reads the sources of kBatch
// consecutive moves into registers, then writes their destinations. For a
// compaction plan that gives the in-order result. There, a destination is a hole
// or the source of an EARLIER move (cache/kv_cache.h), so:
//   - no move reads a slot an earlier move wrote: reading ahead reads the right data;
//   - a move may write a slot an earlier move reads: in a batch every read comes
//     before every write, and earlier batches are finished.
#include <cstdint>

#include "common.cuh"
#include "cuda_check.h"
#include "kernels.h"

namespace kvscope::cuda {

constexpr int kBatch = 8;

template <class Vec>  // float4 (16-byte columns) or float
__global__ void compact_kernel(float* k, float* v, const int* from, const int* to, int moves, int num_layers,
                               size_t layer_floats, int kv_dim) {
  constexpr int kFloats = sizeof(Vec) / sizeof(float);
  const int vecs = kv_dim / kFloats;  // columns per row
  const size_t col = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= size_t(num_layers) * 2 * vecs) return;
  const int c = int(col % vecs);
  const bool is_v = (col / vecs) % 2;
  const size_t layer = col / (2 * size_t(vecs));
  Vec* rows = reinterpret_cast<Vec*>((is_v ? v : k) + layer * layer_floats);  // [slots][vecs]

  for (int m0 = 0; m0 < moves; m0 += kBatch) {
    const int n = min(kBatch, moves - m0);
    Vec held[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
      if (b < n) held[b] = rows[size_t(from[m0 + b]) * vecs + c];
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
      if (b < n) rows[size_t(to[m0 + b]) * vecs + c] = held[b];
  }
}

void compact(float* k, float* v, const int* from, const int* to, int moves, int num_layers, size_t layer_floats,
             int kv_dim) {
  if (moves == 0) return;
  const bool vec4 = kv_dim % 4 == 0 && layer_floats % 4 == 0 && reinterpret_cast<uintptr_t>(k) % 16 == 0 &&
                    reinterpret_cast<uintptr_t>(v) % 16 == 0;
  const size_t columns = size_t(num_layers) * 2 * (vec4 ? kv_dim / 4 : kv_dim);
  if (vec4)
    compact_kernel<float4><<<ceil_div(columns, 256), 256>>>(k, v, from, to, moves, num_layers, layer_floats, kv_dim);
  else
    compact_kernel<float><<<ceil_div(columns, 256), 256>>>(k, v, from, to, moves, num_layers, layer_floats, kv_dim);
  CUDA_CHECK_LAUNCH();
}

}  // namespace kvscope::cuda
