// Decode GEMV: y = W x, with W in f32 or bf16. (CPU: model/matvec.cpp)
//
// Decoding one token reads every weight once and does one multiply-add with
// it, so the product is limited by memory bandwidth: the kernel's job is to keep
// as many bytes in flight as the card can take, and to read each byte once.
//
// One warp per output row. The 32 lanes walk the row side by side: at each step
// lane l reads the l-th 16-byte chunk of the next 512 bytes, so the warp issues
// one fully coalesced request per step. A chunk is 4 f32 weights (a float4) or
// 8 bf16 weights (a uint4, split into 8 floats with shifts: bf16 is the high half
// of an f32). Each lane multiplies its chunk by the matching piece of x, keeps a
// running sum, and warp_sum adds the 32 sums at the end. x is small and read by
// every warp, so it is served from the L1/L2 caches, not from DRAM.
//
// Rows whose length or address does not allow 16-byte chunks take the scalar
// loop (one weight per lane per step): same result, fewer bytes per request.
#include <cstdint>

#include "common.cuh"
#include "cuda_check.h"
#include "kernels.h"

namespace kvscope::cuda {

constexpr int kRowsPerBlock = 8;  // 8 warps = 256 threads per block, one row each

// The bf16 weights packed in one 32-bit word: the low half is the first (little-endian).
__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// The dot product of one row with x, as partial sums spread over the lanes.
__device__ float row_dot_vec(const float* w, const float* x, int cols, int lane) {
  const float4* w4 = reinterpret_cast<const float4*>(w);
  const float4* x4 = reinterpret_cast<const float4*>(x);
  float sum = 0.0f;
  for (int i = lane; i < cols / 4; i += kWarp) {
    const float4 a = w4[i], b = x4[i];
    sum += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
  }
  return sum;
}

__device__ float row_dot_vec(const uint16_t* w, const float* x, int cols, int lane) {
  const uint4* w8 = reinterpret_cast<const uint4*>(w);  // 8 bf16 per 16 bytes
  const float4* x4 = reinterpret_cast<const float4*>(x);
  float sum = 0.0f;
  for (int i = lane; i < cols / 8; i += kWarp) {
    const uint4 p = w8[i];
    const float4 a = x4[2 * i], b = x4[2 * i + 1];
    sum += bf16_lo(p.x) * a.x + bf16_hi(p.x) * a.y + bf16_lo(p.y) * a.z + bf16_hi(p.y) * a.w +
           bf16_lo(p.z) * b.x + bf16_hi(p.z) * b.y + bf16_lo(p.w) * b.z + bf16_hi(p.w) * b.w;
  }
  return sum;
}

template <class W>
__device__ float row_dot_scalar(const W* w, const float* x, int cols, int lane) {
  float sum = 0.0f;
  for (int i = lane; i < cols; i += kWarp) sum += to_f32(w[i]) * x[i];
  return sum;
}

template <class W, bool kVector>
__global__ void matvec_kernel(float* y, const W* W_, const float* x, int rows, int cols) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;  // a whole warp leaves together
  const W* w = W_ + size_t(row) * cols;
  float sum = kVector ? row_dot_vec(w, x, cols, lane) : row_dot_scalar(w, x, cols, lane);
  sum = warp_sum(sum);
  if (lane == 0) y[row] = sum;
}

template <class W>
static void launch(float* y, const W* w, const float* x, int rows, int cols) {
  // 16-byte chunks need every row to start on a 16-byte boundary, and x too.
  constexpr int per_chunk = 16 / sizeof(W);
  const bool vector = cols % per_chunk == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(x) % 16 == 0;
  const unsigned blocks = ceil_div(size_t(rows), kRowsPerBlock);
  if (vector)
    matvec_kernel<W, true><<<blocks, kRowsPerBlock * kWarp>>>(y, w, x, rows, cols);
  else
    matvec_kernel<W, false><<<blocks, kRowsPerBlock * kWarp>>>(y, w, x, rows, cols);
  CUDA_CHECK_LAUNCH();
}

void matvec(float* y, const void* W, WeightType type, const float* x, int rows, int cols) {
  if (type == WeightType::F32)
    launch(y, static_cast<const float*>(W), x, rows, cols);
  else
    launch(y, static_cast<const uint16_t*>(W), x, rows, cols);
}

}  // namespace kvscope::cuda
