// Decode GEMV: Y = X W^T for a few vectors at once, with W in f32 or bf16.
// (CPU: model/matvec.cpp, matvec_f32_n / matvec_bf16_n)
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
// Decoding n sequences together (a serving step) gives n vectors x. The chunk
// of W a lane has read is used for all of them before the next is read: the lane
// keeps one running sum per vector, in registers, so n tokens cost one pass over
// the weights, not n. Up to kMaxVectors per launch; more take several passes.
//
// A matrix whose row length, or W's or x's address, does not allow 16-byte chunks
// takes the scalar loop (one weight per lane per step; chosen once per launch, in
// launch() below): same result, fewer bytes per request.
#include <algorithm>
#include <cstdint>

#include "common.cuh"
#include "cuda_check.h"
#include "kernels.h"

namespace kvscope::cuda {

constexpr int kRowsPerBlock = 8;  // 8 warps = 256 threads per block, one row each
constexpr int kMaxVectors = kMatvecVectors;  // vectors per launch: one running sum each, per lane

// The bf16 weights packed in one 32-bit word: the low half is the first (little-endian).
__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// The dot products of one row with the n vectors of x ([n, cols]), as partial sums
// spread over the lanes: sum[b] for vector b.
__device__ void row_dot_vec(float* sum, const float* w, const float* x, int cols, int n, int lane) {
  const float4* w4 = reinterpret_cast<const float4*>(w);
  const float4* x4 = reinterpret_cast<const float4*>(x);
  const int chunks = cols / 4;
  for (int i = lane; i < chunks; i += kWarp) {
    const float4 a = w4[i];  // read once, used for every vector
#pragma unroll
    for (int b = 0; b < kMaxVectors; ++b) {
      if (b == n) break;
      const float4 v = x4[size_t(b) * chunks + i];
      sum[b] += a.x * v.x + a.y * v.y + a.z * v.z + a.w * v.w;
    }
  }
}

__device__ void row_dot_vec(float* sum, const uint16_t* w, const float* x, int cols, int n, int lane) {
  const uint4* w8 = reinterpret_cast<const uint4*>(w);  // 8 bf16 per 16 bytes
  const float4* x4 = reinterpret_cast<const float4*>(x);
  const int chunks = cols / 8;
  for (int i = lane; i < chunks; i += kWarp) {
    const uint4 p = w8[i];
#pragma unroll
    for (int b = 0; b < kMaxVectors; ++b) {
      if (b == n) break;
      const float4 u = x4[size_t(b) * 2 * chunks + 2 * i], v = x4[size_t(b) * 2 * chunks + 2 * i + 1];
      sum[b] += bf16_lo(p.x) * u.x + bf16_hi(p.x) * u.y + bf16_lo(p.y) * u.z + bf16_hi(p.y) * u.w +
                bf16_lo(p.z) * v.x + bf16_hi(p.z) * v.y + bf16_lo(p.w) * v.z + bf16_hi(p.w) * v.w;
    }
  }
}

template <class W>
__device__ void row_dot_scalar(float* sum, const W* w, const float* x, int cols, int n, int lane) {
  for (int i = lane; i < cols; i += kWarp) {
    const float a = to_f32(w[i]);
#pragma unroll
    for (int b = 0; b < kMaxVectors; ++b) {
      if (b == n) break;
      sum[b] += a * x[size_t(b) * cols + i];
    }
  }
}

// y: [n, rows]   W_: [rows, cols]   x: [n, cols]   n <= kMaxVectors
template <class W, bool kVector>
__global__ void matvec_kernel(float* y, const W* W_, const float* x, int rows, int cols, int n) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;  // a whole warp leaves together
  const W* w = W_ + size_t(row) * cols;
  float sum[kMaxVectors];
#pragma unroll
  for (int b = 0; b < kMaxVectors; ++b) sum[b] = 0.0f;
  if (kVector)
    row_dot_vec(sum, w, x, cols, n, lane);
  else
    row_dot_scalar(sum, w, x, cols, n, lane);
#pragma unroll
  for (int b = 0; b < kMaxVectors; ++b) {
    if (b == n) break;  // n is the same in every lane, so the warp stays together for warp_sum
    const float total = warp_sum(sum[b]);
    if (lane == 0) y[size_t(b) * rows + row] = total;
  }
}

template <class W>
static void launch(float* y, const W* w, const float* x, int rows, int cols, int n) {
  // 16-byte chunks need every row to start on a 16-byte boundary, and x too.
  constexpr int per_chunk = 16 / sizeof(W);
  const bool vector = cols % per_chunk == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(x) % 16 == 0;
  const unsigned blocks = ceil_div(size_t(rows), kRowsPerBlock);
  for (int first = 0; first < n; first += kMaxVectors) {  // kMaxVectors vectors per pass over W
    const int m = std::min(kMaxVectors, n - first);
    float* yb = y + size_t(first) * rows;
    const float* xb = x + size_t(first) * cols;
    if (vector)
      matvec_kernel<W, true><<<blocks, kRowsPerBlock * kWarp>>>(yb, w, xb, rows, cols, m);
    else
      matvec_kernel<W, false><<<blocks, kRowsPerBlock * kWarp>>>(yb, w, xb, rows, cols, m);
    CUDA_CHECK_LAUNCH();
  }
}

void matvec(float* y, const void* W, WeightType type, const float* x, int rows, int cols, int n) {
  if (type == WeightType::F32)
    launch(y, static_cast<const float*>(W), x, rows, cols, n);
  else
    launch(y, static_cast<const uint16_t*>(W), x, rows, cols, n);
}

}  // namespace kvscope::cuda
