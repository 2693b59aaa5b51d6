// cuBLAS, opened at its first call instead of at program start.
//
// Linked the usual way (-lcublas), libcublasLt runs its initialisers in every
// process before main: about 0.45 s and 220 MB resident on this project's
// development machine, GPU or not. That was the price of every kvscope command
// (`kvscope memory` included) and of each of the test binary's ~420 processes
// under ctest. Only the GPU's prefill GEMM (gemm.cu) uses cuBLAS, so the program
// is not linked with it: this file defines the three cuBLAS functions kvscope
// calls, and each forwards to the real one, from the library opened with dlopen
// the first time any of them runs.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <string>

#include "util/error.h"

namespace {

const std::string kLibrary = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);  // the major version built against

// By name (LD_LIBRARY_PATH, the program's run path, the system's library cache),
// else from the folder of the CUDA runtime this program is linked with.
void* open_cublas() {
  if (void* h = dlopen(kLibrary.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
  const std::string why = dlerror();
  Dl_info runtime{};
  if (dladdr(reinterpret_cast<void*>(&cudaGetDeviceCount), &runtime) && runtime.dli_fname) {
    const std::string path = runtime.dli_fname;
    if (void* h = dlopen((path.substr(0, path.rfind('/') + 1) + kLibrary).c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
  }
  throw kvscope::Error("cuBLAS: cannot load " + kLibrary + " (" + why + "); the GPU's prefill GEMMs need it");
}

// The library, opened once (a failed open throws, and the next call tries again).
void* cublas() {
  static void* library = open_cublas();
  return library;
}

// The real function `name`, of type F.
template <class F>
F* real(const char* name) {
  void* f = dlsym(cublas(), name);
  if (!f) throw kvscope::Error("cuBLAS: " + kLibrary + " has no " + name);
  return reinterpret_cast<F*>(f);
}

}  // namespace

// cublas_v2.h names these cublasCreate and cublasSgemm (macros for the _v2 symbols).
extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  static auto* f = real<decltype(cublasCreate_v2)>("cublasCreate_v2");
  return f(handle);
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  static auto* f = real<decltype(cublasSetMathMode)>("cublasSetMathMode");
  return f(handle, mode);
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                              int k, const float* alpha, const float* A, int lda, const float* B, int ldb,
                              const float* beta, float* C, int ldc) {
  static auto* f = real<decltype(cublasSgemm_v2)>("cublasSgemm_v2");
  return f(handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // extern "C"
