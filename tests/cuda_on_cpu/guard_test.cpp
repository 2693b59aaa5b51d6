// The stand-in's own checks, which a GPU does not make, so they are built only into
// kvscope_gpu_tests_on_cpu: a kernel or a copy that writes outside its buffer stops
// the program, naming what wrote and where (runtime.cpp, the guard zones).
#include <gtest/gtest.h>

#include <vector>

#include "device_array.h"
#include "kernels.h"

namespace kvscope {
namespace {

using cuda::DeviceArray;

// What stops the program: the stand-in's check after the write, or, in the sanitizer
// build, where the zones are poisoned, AddressSanitizer at the write itself.
#if defined(__SANITIZE_ADDRESS__)
const char* stopped_by(const char*) { return "AddressSanitizer: use-after-poison"; }
#else
const char* stopped_by(const char* stand_in) { return stand_in; }
#endif

// RoPE over 3 rows of one head of 128 floats, in a buffer of 2 rows (1,024 bytes): the
// threads of row 2 rotate the 128 floats past the end.
void rope_one_row_too_many() {
  DeviceArray<float> x, inv_freq;
  DeviceArray<int> pos;
  x.upload(std::vector<float>(2 * 128, 0.5f));
  inv_freq.upload(std::vector<float>(64, 1.0f));
  pos.upload(std::vector<int>{0, 1, 2});
  cuda::rope(x.get(), pos.get(), inv_freq.get(), 3, 1, 128);
}

// A copy of 9 floats into a buffer of 8.
void copy_one_float_too_many() {
  DeviceArray<float> x(8);
  const std::vector<float> nine(9, 1.0f);
  cudaMemcpy(x.get(), nine.data(), nine.size() * sizeof(float), cudaMemcpyHostToDevice);
}

TEST(CudaOnCpu, AWriteOutsideABufferNamesTheKernel) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(rope_one_row_too_many(),
               stopped_by("cuda_on_cpu: the kernel rope_kernel wrote past the end of a buffer of 1024 bytes, at its "
                          "byte 1024"));
}

TEST(CudaOnCpu, ACopyPastABufferIsNamed) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(copy_one_float_too_many(),
               stopped_by("cuda_on_cpu: a cudaMemcpy wrote past the end of a buffer of 32 bytes, at its byte 32"));
}

}  // namespace
}  // namespace kvscope
