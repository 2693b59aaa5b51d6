// RoPE, rotate-half form (Qwen, Hugging Face): dimension i of a head is paired
// with i + head_dim/2 and the pair is rotated by the angle pos * inv_freq[i].
//
// One thread per (token, head, pair): it reads its two numbers, rotates them
// and writes them back. No thread touches another's pair, so it runs in place.
//
// inv_freq[i] = theta^(-2i/d) is computed once on the host with the same f32
// expression as ops.cpp, so the angles float(pos) * inv_freq[i] are the CPU's
// bit for bit; sinf/cosf are within 2 ulp of the exact value (CUDA's bound; glibc's
// are within 1, so the two may differ by 3), and nvcc fuses the rotation's
// multiply-adds (one rounding, not two): a few ulp in all.
#include "common.cuh"
#include "cuda_check.h"
#include "kernels.h"

namespace kvscope::cuda {

__global__ void rope_kernel(float* x, const int* pos, const float* inv_freq, int T, int n_heads, int head_dim) {
  const int half = head_dim / 2;
  const size_t idx = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= size_t(T) * n_heads * half) return;
  const int i = int(idx % half);           // the pair (i, i + half)
  const size_t row = idx / half;           // t * n_heads + h: one head of one token
  const int t = int(row / n_heads);

  const float angle = float(pos[t]) * inv_freq[i];
  float s, c;
  sincosf(angle, &s, &c);
  float* v = x + row * head_dim;
  const float a = v[i], b = v[i + half];
  v[i] = a * c - b * s;
  v[i + half] = b * c + a * s;
}

void rope(float* x, const int* pos, const float* inv_freq, int T, int n_heads, int head_dim) {
  const size_t pairs = size_t(T) * n_heads * (head_dim / 2);
  rope_kernel<<<ceil_div(pairs, 256), 256>>>(x, pos, inv_freq, T, n_heads, head_dim);
  CUDA_CHECK_LAUNCH();
}

}  // namespace kvscope::cuda
