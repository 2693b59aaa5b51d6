// Which CUDA GPUs this process can use. Plain C++: callers need no CUDA headers.
#pragma once

#include <string>
#include <vector>

namespace kvscope::cuda {

struct GpuInfo {
  int index = 0;
  std::string name;
  int compute_major = 0, compute_minor = 0;
  size_t memory_bytes = 0;
};

// The GPUs present. With no driver or no device, an empty list and `why`
// says what the CUDA runtime answered (any error means "no GPU").
std::vector<GpuInfo> list_gpus(std::string& why);

}  // namespace kvscope::cuda
