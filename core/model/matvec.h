// Matrix-vector products for decoding: y = W x, with W in f32 or bf16.
//
// Decoding one token multiplies the current activation vector by every weight
// matrix of the model once, so each weight is read from memory once and used in
// exactly one multiply-add.  A core can do ~32 multiply-adds per cycle but DRAM
// delivers only a few bytes per cycle: these kernels are limited by memory
// bandwidth, not arithmetic, and are judged by bytes of W read per second.
// Storing W in bf16 halves the bytes and so doubles the token rate.
#pragma once

#include <cstdint>

namespace kvscope {

// y[r] = sum_c W[r*cols + c] * x[c] for r in [0, rows).
//
// W is row-major [rows, cols] -- the PyTorch nn.Linear layout [out, in] -- and
// dense (row stride == cols).  x has cols floats, y has rows floats; y must not
// overlap W or x.  Accumulation is in f32.  Runs on omp_get_max_threads() OpenMP
// threads, each taking a few long runs of consecutive rows; small products (under
// 64Ki multiply-adds: weights x vectors, so the _n forms below go parallel on smaller
// W) and calls from inside a parallel region run on the calling thread.
void matvec_f32(const float* W, const float* x, float* y, int rows, int cols);

// The same with W in bfloat16 (raw bits, as stored in the checkpoint).  Each weight
// is widened to f32 exactly; x stays f32 (it is never rounded to bf16).
void matvec_bf16(const uint16_t* W, const float* x, float* y, int rows, int cols);

// The same for n vectors at once (decoding n sequences together):
//   Y[i*rows + r] = sum_c W[r*cols + c] * X[i*cols + c]      X: [n, cols]  Y: [n, rows]
// Each row of W is read from memory once and used for all n vectors (it stays in
// L1 between them), so n sequences cost about one pass over the weights, not n.
// Every sum is computed exactly as matvec_f32 / matvec_bf16 compute it, to the bit.
void matvec_f32_n(const float* W, const float* X, float* Y, int rows, int cols, int n);
void matvec_bf16_n(const uint16_t* W, const float* X, float* Y, int rows, int cols, int n);

}  // namespace kvscope
