// The operations of a Qwen3 decoder, one function each, on plain float arrays.
//
// Shapes are in the comments: T is the number of tokens processed together
// (the prompt length in prefill, 1 in decode). Everything is f32 except the
// weight matrices, which may be BF16 (widened on the fly).
#pragma once

#include "model/weights.h"

namespace kvscope {

// out[t, :] = table[tokens[t], :]                       out: [T, hidden]
void embed(float* out, const Matrix& table, const int* tokens, int T);

// out = x / sqrt(mean(x^2) + eps) * weight, for each of `rows` rows of length n.
// out may alias x.                                        x, out: [rows, n]
void rmsnorm(float* out, const float* x, const float* weight, int rows, int n, float eps);

// out = x W^T: the Linear layer.                           x: [T, W.cols]  out: [T, W.rows]
// T == 1 is the decode case: a memory-bound matrix-vector product (model/matvec.h);
// T > 1 is a compute-bound GEMM done by Eigen.
void matmul(float* out, const float* x, const Matrix& W, int T);

// The same product for T rows that are T separate decode steps: one matrix-vector
// pass over W for all of them (matvec_f32_n), each row of out exactly, to the bit,
// what matmul(out_row, x_row, W, 1) gives.            x: [T, W.cols]  out: [T, W.rows]
void matmul_rows(float* out, const float* x, const Matrix& W, int T);

// Rotary embedding, rotate-half form, in place on one token's heads.
// Pairs dimension i with i + head_dim/2 and rotates it by pos * theta^(-2i/head_dim).
//                                                          x: [n_heads, head_dim]
void rope(float* x, int n_heads, int head_dim, int pos, double theta);
// RoPE's frequency of band i, theta^(-2i/head_dim) in radians per position, computed in
// f32 as Hugging Face does. rope(), the CUDA backend's table and TriAttention's omega all
// take it from here, so they agree to the bit.
float rope_inv_freq(int i, int head_dim, double theta);

// out = silu(gate) * up, elementwise; silu(g) = g / (1 + e^-g).   [n]
void swiglu(float* out, const float* gate, const float* up, size_t n);

// x += y, elementwise (the residual connection).                  [n]
void add_inplace(float* x, const float* y, size_t n);

}  // namespace kvscope
