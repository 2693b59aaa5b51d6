// Error checks for the CUDA runtime and cuBLAS: any failure becomes a
// kvscope::Error naming the call, so the program prints one line and exits 1.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string>

#include "util/error.h"

namespace kvscope::cuda {

inline void check(cudaError_t err, const char* call, const char* file, int line) {
  if (err != cudaSuccess)
    throw Error(std::string("CUDA: ") + call + ": " + cudaGetErrorString(err) + " (" + file + ":" + std::to_string(line) + ")");
}
inline void check(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw Error(std::string("cuBLAS: ") + call + ": status " + std::to_string(int(status)) + " (" + file + ":" +
                std::to_string(line) + ")");
}

}  // namespace kvscope::cuda

#define CUDA_CHECK(call) ::kvscope::cuda::check((call), #call, __FILE__, __LINE__)
// After a kernel launch: the launch itself can fail (bad configuration, no device).
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
