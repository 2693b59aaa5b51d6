#include <cuda_runtime.h>

#include "gpu_devices.h"

namespace kvscope::cuda {

std::vector<GpuInfo> list_gpus(std::string& why) {
  std::vector<GpuInfo> gpus;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {  // e.g. no driver: treat every error as "no GPU"
    why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(err);
    if (err == cudaErrorInsufficientDriver)  // what a machine with no NVIDIA driver at all gets too
      why += ": no NVIDIA driver is loaded, or it is older than this build's CUDA runtime";
    cudaGetLastError();  // clear the sticky error
    return gpus;
  }
  if (count == 0) why = "the CUDA runtime found no device";
  // A call that fails here leaves its error pending, and the next launch check
  // (CUDA_CHECK_LAUNCH) would report it against an unrelated kernel: clear it.
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    GpuInfo g{i, p.name, p.major, p.minor, p.totalGlobalMem};
    // Without these the peak bandwidth is "unknown" (GpuInfo::peak_text).
    if (cudaDeviceGetAttribute(&g.memory_clock_khz, cudaDevAttrMemoryClockRate, i) != cudaSuccess ||
        cudaDeviceGetAttribute(&g.memory_bus_bits, cudaDevAttrGlobalMemoryBusWidth, i) != cudaSuccess) {
      cudaGetLastError();
      g.memory_clock_khz = g.memory_bus_bits = 0;
    }
    if (cudaDeviceGetAttribute(&g.l2_bytes, cudaDevAttrL2CacheSize, i) != cudaSuccess) {
      cudaGetLastError();
      g.l2_bytes = 0;
    }
    gpus.push_back(g);
  }
  return gpus;
}

bool gpu_available(std::string& why) { return !list_gpus(why).empty(); }

}  // namespace kvscope::cuda
