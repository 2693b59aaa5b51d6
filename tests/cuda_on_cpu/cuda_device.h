// The CUDA device language on a CPU, enough for the kernels in kernels/.
//
// A stand-in, for checking the kernels' logic where there is no GPU (most
// machines this project is built on): the same .cu sources, rewritten only at
// their launch sites by translate.py, run here and are compared with the CPU
// operations by the same tests (tests/gpu_*_test.cpp) that run on a real GPU.
//
// How a launch runs (runtime.cpp):
//   - the blocks of the grid run one after another (first to last, or the reverse);
//   - the threads of a block are fibers (ucontext), each on its own stack, run
//     one at a time until they reach a barrier or return: all of them in turn,
//     first to last, or (CUDA_ON_CPU_ORDER=reverse) one warp as far as it can go,
//     last to first, so that a missing barrier shows whichever way data flows;
//   - __syncthreads() waits until every thread of the block is there, and fails unless
//     they all reached the same one (its file and line, and how many they passed) and
//     none has returned: a barrier in code that some threads skip is undefined on a GPU;
//   - __shfl_xor_sync: each lane offers its value, waits for its warp, and reads
//     its partner's (the mask must be the full warp's, in a block of whole warps);
//   - a function-level `__shared__` array becomes `static`: one per kernel, and
//     blocks do not overlap, so it is exactly the block's shared memory (but it
//     keeps the previous block's values, where a GPU's would be garbage);
//   - `extern __shared__` memory is all-ones bytes (NaN floats) at the start of
//     every block, so a read before any write shows.
//
// What this cannot show: speed, real concurrency (threads run in two valid orders,
// not all orders), the GPU's expf/sinf rounding, cuBLAS (a plain SGEMM stands in),
// or the hardware's limits beyond the launch checks in runtime.cpp. Results from it
// are never GPU results.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};

// Set by the scheduler before it resumes a thread.
extern dim3 threadIdx, blockIdx, blockDim, gridDim;

inline float __uint_as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }

namespace kvscope::cuda_on_cpu {
void sync_block(const char* file, unsigned line);  // where the __syncthreads() is
double shuffle_xor(unsigned mask, double x, int lane_mask);  // float and double travel exactly as double
void* dynamic_shared_memory();
// Runs `thread` once for every thread of every block of the grid: what kernel<<<grid, block, smem>>>(...) does.
// `kernel_name` is for its shared-memory opt-in (cudaFuncSetAttribute).
void launch(const char* kernel_name, dim3 grid, dim3 block, size_t shared_bytes, const std::function<void()>& thread);
}  // namespace kvscope::cuda_on_cpu

// Its default arguments are the caller's place, so that threads at different barriers show.
inline void __syncthreads(const char* file = __builtin_FILE(), unsigned line = __builtin_LINE()) {
  kvscope::cuda_on_cpu::sync_block(file, line);
}
inline float __shfl_xor_sync(unsigned mask, float x, int lane_mask) {
  return float(kvscope::cuda_on_cpu::shuffle_xor(mask, x, lane_mask));
}
inline double __shfl_xor_sync(unsigned mask, double x, int lane_mask) {
  return kvscope::cuda_on_cpu::shuffle_xor(mask, x, lane_mask);
}
