// Elementwise operations: one thread per element, nothing shared.
//
//   swiglu       out = silu(gate) * up, silu(g) = g / (1 + e^-g)   (the MLP's gate)
//   add_inplace  x += y                                            (the residual connection)
//   widen_bf16   out = the f32 value of each bf16                  (for cuBLAS, which wants f32)
#include "common.cuh"
#include "cuda_check.h"
#include "kernels.h"

namespace kvscope::cuda {

__global__ void swiglu_kernel(float* out, const float* gate, const float* up, size_t n) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

__global__ void add_kernel(float* x, const float* y, size_t n) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] += y[i];
}

__global__ void widen_bf16_kernel(float* out, const uint16_t* in, size_t n) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = to_f32(in[i]);
}

void swiglu(float* out, const float* gate, const float* up, size_t n) {
  swiglu_kernel<<<ceil_div(n, 256), 256>>>(out, gate, up, n);
  CUDA_CHECK_LAUNCH();
}

void add_inplace(float* x, const float* y, size_t n) {
  add_kernel<<<ceil_div(n, 256), 256>>>(x, y, n);
  CUDA_CHECK_LAUNCH();
}

void widen_bf16(float* out, const uint16_t* in, size_t n) {
  widen_bf16_kernel<<<ceil_div(n, 256), 256>>>(out, in, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace kvscope::cuda
