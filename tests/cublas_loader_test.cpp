// kernels/cublas_loader.cpp: the programs are not linked with cuBLAS (whose
// initialisers cost every process 0.45 s and 220 MB), and its first call opens it.
#include <gtest/gtest.h>

#ifdef KVSCOPE_HAVE_CUDA
#include <cublas_v2.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "gpu_devices.h"

namespace kvscope {
namespace {

// What `ldd` says this test program loads at start.
std::string libraries_at_start() {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return "";
  self[n] = '\0';
  std::string out;
  if (FILE* p = popen(("ldd '" + std::string(self) + "' 2>&1").c_str(), "r")) {
    char buf[512];
    while (fgets(buf, sizeof buf, p)) out += buf;
    pclose(p);
  }
  return out;
}

bool mapped_now(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.find(name) != std::string::npos) return true;
  return false;
}

TEST(CublasLoader, TheProgramsAreNotLinkedWithCublas) {
  const std::string libs = libraries_at_start();
  ASSERT_NE(libs.find("libcudart"), std::string::npos) << "ldd printed:\n" << libs;  // ldd ran and read it
  EXPECT_EQ(libs.find("libcublas"), std::string::npos) << "ldd printed:\n" << libs;
}

TEST(CublasLoader, TheFirstCallOpensTheLibrary) {
  cublasHandle_t handle = nullptr;
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  ASSERT_NO_THROW(status = cublasCreate(&handle));  // opened, and the function found in it
  EXPECT_TRUE(mapped_now("libcublas.so"));
  // The real function answered: with a GPU it makes a handle, without one it refuses.
  std::string why;
  if (cuda::gpu_available(why))
    EXPECT_EQ(status, CUBLAS_STATUS_SUCCESS);
  else
    EXPECT_NE(status, CUBLAS_STATUS_SUCCESS) << "no GPU (" << why << "), yet cublasCreate succeeded";
}

}  // namespace
}  // namespace kvscope

#else
TEST(CublasLoader, BuiltWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#endif
