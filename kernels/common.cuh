// Small device helpers shared by the kernels.
#pragma once

#include <cstdint>

namespace kvscope::cuda {

constexpr int kWarp = 32;

// Weights come as f32 or as bf16 bits; either way the kernels compute in f32.
// bf16 -> f32 is exact: the 16 bits become the high half of the f32 (model/bf16.h).
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(uint16_t b) { return __uint_as_float(uint32_t(b) << 16); }

// The sum of `x` over the 32 lanes of a warp, in every lane: each round adds the
// value of the lane `offset` away (butterfly), so after 5 rounds all lanes agree.
// warp_sum and warp_max name every lane (the mask 0xffffffff): all 32 lanes of the
// warp must call them together, never from a branch that only some lanes take.
__device__ __forceinline__ float warp_sum(float x) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}
__device__ __forceinline__ double warp_sum(double x) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}
__device__ __forceinline__ float warp_max(float x) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

// The sum of `x` over all threads of the block, returned to every thread.
// Each warp sums its lanes, warp leaders park their sums in shared memory,
// and the first warp sums those. `scratch` holds one float per warp (<= 32).
__device__ __forceinline__ float block_sum(float x, float* scratch) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = (blockDim.x + kWarp - 1) / kWarp;
  x = warp_sum(x);
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = lane < warps ? scratch[lane] : 0.0f;
  x = warp_sum(x);  // every warp does it, so every thread ends with the total
  __syncthreads();  // scratch may be reused right after
  return x;
}
__device__ __forceinline__ float block_max(float x, float* scratch) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = (blockDim.x + kWarp - 1) / kWarp;
  x = warp_max(x);
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = lane < warps ? scratch[lane] : -INFINITY;
  x = warp_max(x);
  __syncthreads();
  return x;
}

inline unsigned ceil_div(size_t a, size_t b) { return unsigned((a + b - 1) / b); }

}  // namespace kvscope::cuda
