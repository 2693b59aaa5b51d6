// The one cuBLAS call kvscope makes, on a CPU (see cuda_device.h): a plain
// column-major SGEMM with f32 sums, standing in for the tuned one.
#pragma once

enum cublasStatus_t { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_INVALID_VALUE = 7 };
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum cublasMath_t { CUBLAS_DEFAULT_MATH = 0 };
typedef struct cublasContext* cublasHandle_t;

cublasStatus_t cublasCreate(cublasHandle_t* handle);
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode);
// C = alpha op(A) op(B) + beta C, column-major: op(A) m x k, op(B) k x n, C m x n.
cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k,
                           const float* alpha, const float* A, int lda, const float* B, int ldb, const float* beta,
                           float* C, int ldc);
