// RMSNorm: y = x / sqrt(mean(x^2) + eps) * weight, one row at a time.
//
// One thread block per row. Each thread squares and sums every blockDim-th
// element of the row; block_sum (common.cuh) adds the partial sums through
// 32 floats of shared memory; then every thread scales its own elements.
// The same kernel serves the residual stream (rows = T, n = hidden) and the
// per-head q_norm / k_norm (rows = T * heads, n = head_dim).
//
// CPU: rmsnorm in model/ops.cpp sums in double; here the sum is f32 (as in
// Hugging Face), so results differ in the last bits.
#include "common.cuh"
#include "cuda_check.h"
#include "kernels.h"

namespace kvscope::cuda {

__global__ void rmsnorm_kernel(float* out, const float* x, const float* weight, int n, float eps) {
  __shared__ float scratch[kWarp];  // one partial sum per warp
  const float* xr = x + size_t(blockIdx.x) * n;
  float* yr = out + size_t(blockIdx.x) * n;

  float sum_sq = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) sum_sq += xr[i] * xr[i];
  sum_sq = block_sum(sum_sq, scratch);  // also a barrier: every read of the row is done

  const float inv_rms = 1.0f / sqrtf(sum_sq / n + eps);
  // Thread i rewrites only the elements it read itself, so out may alias x.
  for (int i = threadIdx.x; i < n; i += blockDim.x) yr[i] = weight[i] * (xr[i] * inv_rms);
}

void rmsnorm(float* out, const float* x, const float* weight, int rows, int n, float eps) {
  // Short rows (a head of 64 or 128) get one thread per element; long ones 256 threads.
  const int threads = n >= 256 ? 256 : int(ceil_div(size_t(n), kWarp)) * kWarp;
  rmsnorm_kernel<<<rows, threads>>>(out, x, weight, n, eps);
  CUDA_CHECK_LAUNCH();
}

}  // namespace kvscope::cuda
