// Helpers shared by the `kvscope bench gpu-*` commands (builds with CUDA only):
// the GPU and its peak memory bandwidth for the table header, a GPU clock,
// and a paged cache's table as the kernels read it.
#pragma once

#ifdef KVSCOPE_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "cli/bench_util.h"
#include "cuda_check.h"
#include "gpu_devices.h"
#include "util/error.h"

namespace kvscope::cli {

// The GPU the benchmarks run on (device 0); kvscope::Error "COMMAND: no CUDA GPU found (...)" without one.
inline cuda::GpuInfo bench_gpu(const std::string& command) {
  std::string why;
  const std::vector<cuda::GpuInfo> gpus = cuda::list_gpus(why);
  if (gpus.empty()) throw Error(command + ": no CUDA GPU found (" + why + ")");
  return gpus[0];
}

inline void print_gpu_machine(const cuda::GpuInfo& g) {
  const std::string l2 = g.l2_bytes <= 0          ? ""
                         : g.l2_bytes < (1 << 20) ? ", L2 " + std::to_string(g.l2_bytes >> 10) + " KiB"
                                                  : ", L2 " + std::to_string(g.l2_bytes >> 20) + " MiB";
  std::printf("machine: %s (sm_%d%d, %.1f GiB, %s%s), host %s\n", g.name.c_str(), g.compute_major, g.compute_minor,
              double(g.memory_bytes) / (1u << 30), g.peak_text().c_str(), l2.c_str(), cpu_name().c_str());
}

// Seconds per call of fn() on the GPU: one warm-up call, then the best of 3 runs
// of `calls` back-to-back calls timed with CUDA events (so launch gaps count).
template <class Fn>
double gpu_seconds(int calls, Fn&& fn) {
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  fn();
  float best_ms = 1e30f;
  for (int run = 0; run < 3; ++run) {
    CUDA_CHECK(cudaEventRecord(start));
    for (int i = 0; i < calls; ++i) fn();
    CUDA_CHECK(cudaEventRecord(stop));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    best_ms = std::min(best_ms, ms);
  }
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  return best_ms / 1e3 / calls;
}

// The block table and the position of every logical slot (-1 = empty), as the kernels read them.
inline void table_of(const PagedKvCache& cache, int seq, std::vector<int>& blocks, std::vector<int>& slot_pos) {
  const Sequence& s = cache.sequence(seq);
  blocks = s.blocks;
  slot_pos.assign(s.blocks.size() * size_t(cache.block_size()), -1);
  for (size_t i = 0; i < s.blocks.size(); ++i)
    for (int j = 0; j < cache.block_size(); ++j)
      slot_pos[i * cache.block_size() + j] = int(cache.position({s.blocks[i], j}));
}

}  // namespace kvscope::cli
#endif
