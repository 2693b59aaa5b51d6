#include <cuda_runtime.h>

#include "gpu_devices.h"

namespace kvscope::cuda {

std::vector<GpuInfo> list_gpus(std::string& why) {
  std::vector<GpuInfo> gpus;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {  // e.g. no driver: treat every error as "no GPU"
    why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(err);
    cudaGetLastError();  // clear the sticky error
    return gpus;
  }
  if (count == 0) why = "the CUDA runtime found no device";
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    GpuInfo g{i, p.name, p.major, p.minor, p.totalGlobalMem};
    cudaDeviceGetAttribute(&g.memory_clock_khz, cudaDevAttrMemoryClockRate, i);
    cudaDeviceGetAttribute(&g.memory_bus_bits, cudaDevAttrGlobalMemoryBusWidth, i);
    gpus.push_back(g);
  }
  return gpus;
}

bool gpu_available(std::string& why) { return !list_gpus(why).empty(); }

}  // namespace kvscope::cuda
