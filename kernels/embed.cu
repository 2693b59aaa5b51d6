// Embedding: each token's row of the table, gathered into the residual stream.
//
// One thread block per token; its threads stride along the row, so consecutive
// threads read consecutive weights (one coalesced transaction per warp).
#include "common.cuh"
#include "cuda_check.h"
#include "kernels.h"

namespace kvscope::cuda {

template <class W>
__global__ void embed_kernel(float* out, const W* table, const int* tokens, int d) {
  const int t = blockIdx.x;
  const W* row = table + size_t(tokens[t]) * d;
  for (int i = threadIdx.x; i < d; i += blockDim.x) out[size_t(t) * d + i] = to_f32(row[i]);
}

void embed(float* out, const void* table, WeightType type, const int* tokens, int T, int d) {
  if (type == WeightType::F32)
    embed_kernel<<<T, 256>>>(out, static_cast<const float*>(table), tokens, d);
  else
    embed_kernel<<<T, 256>>>(out, static_cast<const uint16_t*>(table), tokens, d);
  CUDA_CHECK_LAUNCH();
}

}  // namespace kvscope::cuda
