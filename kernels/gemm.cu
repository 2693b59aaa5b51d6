// Prefill GEMM: out = x W^T, the Linear layer on T tokens at once, by cuBLAS.
// (CPU: matmul in model/ops.cpp, Eigen.)
//
// cuBLAS is column-major. A row-major matrix is the transposed column-major one,
// so with out [T, rows], x [T, cols], W [rows, cols] row-major:
//   out^T (rows x T, column-major, ld rows) = W (W^T col-major: cols x rows, ld cols, transposed) * x^T (cols x T, ld cols)
// which is cublasSgemm(OP_T, OP_N, m = rows, n = T, k = cols).
//
// bf16 weights: like the CPU, a band of rows is widened to f32 into scratch and
// multiplied; x stays f32 (never rounded to bf16). The products are plain f32:
// the handle's math mode is CUBLAS_DEFAULT_MATH, which does not use TF32.
//
// The library is opened by prepare_matmul() when a CudaBackend is made (or by
// the first GEMM, whichever comes first), not at program start (cublas_loader.cpp).
#include <cublas_v2.h>

#include <algorithm>

#include "common.cuh"
#include "cuda_check.h"
#include "kernels.h"

namespace kvscope::cuda {

// One handle for the process, made by prepare_matmul() or the first GEMM (and never
// destroyed: the driver reclaims it at exit). Uses the default stream, like every
// kernel here.
static cublasHandle_t blas() {
  static cublasHandle_t handle = [] {
    cublasHandle_t h;
    CUDA_CHECK(cublasCreate(&h));
    CUDA_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
    return h;
  }();
  return handle;
}

void prepare_matmul() { blas(); }

// out[:, 0..rows) with row stride ld_out = x W^T, W f32 [rows, cols].
static void sgemm(float* out, int ld_out, const float* x, const float* W, int T, int rows, int cols) {
  const float one = 1.0f, zero = 0.0f;
  CUDA_CHECK(cublasSgemm(blas(), CUBLAS_OP_T, CUBLAS_OP_N, rows, T, cols, &one, W, cols, x, cols, &zero, out, ld_out));
}

void matmul(float* out, const float* x, const void* W, WeightType type, int T, int rows, int cols, float* scratch,
            size_t scratch_floats) {
  if (type == WeightType::F32) {
    sgemm(out, rows, x, static_cast<const float*>(W), T, rows, cols);
    return;
  }
  if (scratch_floats < size_t(cols)) throw Error("matmul: the bf16 scratch holds less than one row");
  const int band = int(std::min<size_t>(scratch_floats / cols, size_t(rows)));
  const uint16_t* w = static_cast<const uint16_t*>(W);
  for (int r0 = 0; r0 < rows; r0 += band) {
    const int n = std::min(band, rows - r0);
    widen_bf16(scratch, w + size_t(r0) * cols, size_t(n) * cols);
    sgemm(out + r0, rows, x, scratch, T, n, cols);  // stream order: the next widen waits for this GEMM
  }
}

}  // namespace kvscope::cuda
