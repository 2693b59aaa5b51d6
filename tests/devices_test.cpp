// What the benchmarks print: serve-bench's median, and the GPU benchmarks' peak
// bandwidth (the formula with its inputs, and "n/a", never "inf%", where the driver
// reports no memory clock).
#include <gtest/gtest.h>

#include <string>

#include "cli/bench_util.h"
#ifdef KVSCOPE_HAVE_CUDA
#include "gpu_devices.h"
#endif

namespace kvscope {
namespace {

TEST(BenchText, MedianOfAnOddOrEvenCount) {
  EXPECT_EQ(cli::median({3, 1, 2}), 2);
  EXPECT_EQ(cli::median({4, 1, 3, 2}), 2.5);
  EXPECT_EQ(cli::median({7}), 7);
}

TEST(BenchText, PercentOfAnUnknownWholeIsNotAvailable) {
  EXPECT_EQ(cli::percent_of(1, 4), "25%");
  EXPECT_EQ(cli::percent_of(3, 2), "150%");
  EXPECT_EQ(cli::percent_of(1, 0), "n/a");
  EXPECT_EQ(cli::percent_of(0, 0), "n/a");
  EXPECT_EQ(cli::percent_of(1, -1), "n/a");
}

#ifdef KVSCOPE_HAVE_CUDA
TEST(BenchText, PeakBandwidthShowsItsInputsOrSaysItIsUnknown) {
  cuda::GpuInfo h200;
  h200.memory_clock_khz = 3201000;  // what an H200 reports (device library, KINDS.md)
  h200.memory_bus_bits = 6144;
  EXPECT_DOUBLE_EQ(h200.peak_bandwidth(), 2.0 * 3201e6 * 6144 / 8);
  EXPECT_EQ(h200.peak_text(), "peak memory bandwidth 4917 GB/s = 2 x 3201 MHz x 6144 bits / 8");

  const cuda::GpuInfo silent;  // no memory clock, no bus width
  EXPECT_EQ(silent.peak_bandwidth(), 0);
  EXPECT_EQ(silent.peak_text(), "peak memory bandwidth unknown (the driver reports no memory clock or bus width)");
}

// bench gpu-attention marks a row "(in L2)" by this: never when the size is unknown.
TEST(BenchText, FitsInL2OnlyWhenTheSizeIsKnownAndHoldsIt) {
  cuda::GpuInfo h100;
  h100.l2_bytes = 50 << 20;
  EXPECT_TRUE(h100.fits_in_l2(8.4e6));   // decode at 1K tokens: 8.4 MB of K/V
  EXPECT_TRUE(h100.fits_in_l2(50 << 20));
  EXPECT_FALSE(h100.fits_in_l2((50 << 20) + 1));
  EXPECT_FALSE(h100.fits_in_l2(134e6));  // 16K tokens
  EXPECT_FALSE(cuda::GpuInfo{}.fits_in_l2(1));
}
#endif

}  // namespace
}  // namespace kvscope
