// KV write: the new tokens' keys and values go into the paged cache, each to
// the slot the host's slot mapping names (block * block_size + slot).
//
// One thread block per token; its threads copy the token's K row and V row
// (kv_dim floats each, all KV heads side by side) with coalesced reads and writes.
// This is the only place new K/V enter the cache; keys arrive already rotated.
#include "common.cuh"
#include "cuda_check.h"
#include "kernels.h"

namespace kvscope::cuda {

__global__ void kv_write_kernel(float* k_cache, float* v_cache, const float* k, const float* v,
                                const int* slot_mapping, int kv_dim) {
  const int t = blockIdx.x;
  const size_t dst = size_t(slot_mapping[t]) * kv_dim, src = size_t(t) * kv_dim;
  for (int i = threadIdx.x; i < kv_dim; i += blockDim.x) {
    k_cache[dst + i] = k[src + i];
    v_cache[dst + i] = v[src + i];
  }
}

void kv_write(float* k_cache, float* v_cache, const float* k, const float* v, const int* slot_mapping, int T,
              int kv_dim) {
  kv_write_kernel<<<T, 256>>>(k_cache, v_cache, k, v, slot_mapping, kv_dim);
  CUDA_CHECK_LAUNCH();
}

}  // namespace kvscope::cuda
