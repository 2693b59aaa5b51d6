// Which CUDA GPUs this process can use. Plain C++: callers need no CUDA headers.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace kvscope::cuda {

struct GpuInfo {
  int index = 0;
  std::string name;
  int compute_major = 0, compute_minor = 0;
  size_t memory_bytes = 0;
  int memory_clock_khz = 0;   // peak memory clock
  int memory_bus_bits = 0;    // memory bus width
  int l2_bytes = 0;           // L2 cache size (0: not reported)

  // Peak DRAM bandwidth in bytes/s: two transfers per clock (DDR) over the bus;
  // 0 when the driver reports no memory clock or bus width (then "n/a" in the tables).
  double peak_bandwidth() const { return 2.0 * memory_clock_khz * 1e3 * memory_bus_bits / 8; }
  // "peak memory bandwidth 4917 GB/s = 2 x 3201 MHz x 6144 bits / 8", or why it is unknown.
  std::string peak_text() const {
    if (peak_bandwidth() <= 0) return "peak memory bandwidth unknown (the driver reports no memory clock or bus width)";
    char s[128];
    std::snprintf(s, sizeof s, "peak memory bandwidth %.0f GB/s = 2 x %.0f MHz x %d bits / 8", peak_bandwidth() / 1e9,
                  memory_clock_khz / 1e3, memory_bus_bits);
    return s;
  }
  // Whether `bytes` fit in the L2 cache: read again and again, they may come from
  // there rather than from DRAM. False when the size is unknown.
  bool fits_in_l2(double bytes) const { return l2_bytes > 0 && bytes <= l2_bytes; }
};

// The GPUs present. With no driver or no device, an empty list and `why`
// says what the CUDA runtime answered (any error means "no GPU").
std::vector<GpuInfo> list_gpus(std::string& why);

// True when there is at least one GPU; otherwise false and `why` as above.
bool gpu_available(std::string& why);

}  // namespace kvscope::cuda
