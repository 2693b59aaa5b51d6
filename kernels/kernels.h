// The CUDA kernels of kvscope: one host function per operation, one small .cu
// file per family. Plain C++: callers need no CUDA headers.
//
// Every pointer is device memory. Shapes are row-major, in the comments;
// T = tokens processed together (the prompt in prefill, 1 in decode).
// Activations and the K/V cache are f32; weight matrices are f32 or bf16 bits,
// widened exactly to f32 as they are read. Each function's CPU reference is named
// beside it: the tests (tests/gpu_*_test.cpp) compare the two on random inputs.
// Everything runs on the default stream, in the order it is called.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvscope::cuda {

enum class WeightType { F32, BF16 };

// ---- the decoder's operations (CPU: model/ops.h) -------------------------------------------

// out[t, :] = table[tokens[t], :]                         table: [vocab, d]  out: [T, d]   (embed.cu)
void embed(float* out, const void* table, WeightType type, const int* tokens, int T, int d);

// out = x / sqrt(mean(x^2) + eps) * weight, per row; out may alias x.
// rows = T for the residual stream, T * heads for q_norm / k_norm.   x, out: [rows, n]   (rmsnorm.cu)
void rmsnorm(float* out, const float* x, const float* weight, int rows, int n, float eps);

// Rotate-half RoPE in place: pairs dimension i with i + head_dim/2, angle pos[t] * inv_freq[i].
//   x: [T, n_heads, head_dim]   pos: [T]   inv_freq: [head_dim/2] (computed on the host as ops.cpp does)   (rope.cu)
void rope(float* x, const int* pos, const float* inv_freq, int T, int n_heads, int head_dim);

// out = silu(gate) * up;  x += y;  out = bf16 widened to f32.       [n]   (elementwise.cu)
void swiglu(float* out, const float* gate, const float* up, size_t n);
void add_inplace(float* x, const float* y, size_t n);
void widen_bf16(float* out, const uint16_t* in, size_t n);

// Decode: y = W x, the memory-bound matrix-vector product, for n vectors at once
// (n sequences decoding together). One pass over W serves kMatvecVectors of them,
// so W is read ceil(n / kMatvecVectors) times: once for up to 8 sequences.
// CPU: matvec_f32_n / matvec_bf16_n in model/matvec.h.
//   W: [rows, cols]   x: [n, cols]   y: [n, rows]                                    (matvec.cu)
constexpr int kMatvecVectors = 8;
void matvec(float* y, const void* W, WeightType type, const float* x, int rows, int cols, int n = 1);

// Prefill: out = x W^T with cuBLAS in f32 (CPU: matmul in model/ops.h). bf16 W is widened
// a band of rows at a time into `scratch` (scratch_floats >= cols), as the CPU does.
//   x: [T, cols]   W: [rows, cols]   out: [T, rows]                                   (gemm.cu)
void matmul(float* out, const float* x, const void* W, WeightType type, int T, int rows, int cols, float* scratch,
            size_t scratch_floats);
// Opens cuBLAS and makes its handle (the first matmul would): a backend calls it when
// it is made, so that no timed step pays the ~0.5 s.                                (gemm.cu)
void prepare_matmul();

// ---- the paged K/V cache (CPU: model/qwen3.cpp, model/attention.cpp) ---------------------

// Writes the new tokens' K and V rows into the slots the mapping names.
//   k_cache, v_cache: [slots, kv_dim] (one layer)   k, v: [T, kv_dim]   slot_mapping: [T] block * block_size + slot
void kv_write(float* k_cache, float* v_cache, const float* k, const float* v, const int* slot_mapping, int T,
              int kv_dim);  // (kv_write.cu)

// One layer of the paged cache as the attention kernels read it: through the block table.
struct PagedKv {
  const float* k = nullptr;            // [num_blocks, block_size, kv_dim]  this layer's keys, after RoPE
  const float* v = nullptr;            // [num_blocks, block_size, kv_dim]
  const int* block_table = nullptr;    // [table_slots / block_size]  logical block -> physical block
  const int* slot_pos = nullptr;       // [table_slots]  position of the token in each logical slot, -1 = empty
  int table_slots = 0;                 // logical slots the table spans: blocks * block_size
  int block_size = 0;
  // paged_attention and eager_attention: one table per query row, for several sequences
  // decoding in one launch (as vLLM's block_tables). Row t reads the slots [row_start[t],
  // row_start[t] + row_slots[t]) of block_table and slot_pos; row_start[t] is a
  // multiple of block_size, and table_slots is then the longest row_slots.
  const int* row_start = nullptr;      // [T]
  const int* row_slots = nullptr;      // [T]
};

struct Heads {
  int n_heads, n_kv_heads, head_dim;   // GQA: query head h reads KV head h / (n_heads / n_kv_heads)
};

// In all three attention kernels a query at position p sees the slots holding a position <= p
// (causal by position, holes skipped); q and out are [T, n_heads * head_dim], q_pos is [T], T >= 1.
// The caller writes every query's own K/V first (kv_write), so each query sees one slot at
// least: a query that saw none would divide by a softmax sum of 0 (NaN, as on the CPU).

// Decode attention: one pass over the table with online softmax, split across thread
// blocks; `workspace` holds the blocks' partial results. With kv.row_start set, each
// query row reads its own table (a batch of decoding sequences).           (paged_attention.cu)
size_t paged_attention_workspace(int T, Heads h, int table_slots);  // floats
void paged_attention(float* out, const float* q, const int* q_pos, int T, const PagedKv& kv, Heads h,
                     float* workspace);
// Its grids put the queries on the z (slices) and y (merge) axes, which hold at most
// 65,535: more queries than this at once are refused (kvscope::Error), before any launch.
constexpr int kMaxPagedQueries = 65535;

// Prefill attention, tiled like FlashAttention: tiles of queries against tiles of keys in
// shared memory, never a full row of scores.                                (flash_attention.cu)
void flash_attention(float* out, const float* q, const int* q_pos, int T, const PagedKv& kv, Heads h);

// Eager attention: materialises P = softmax(q K^T / sqrt(d)) in `probs` and, when prob_sums
// is not null, adds to prob_sums[h, j] the probability head h's queries t >= sum_from gave
// slot j (what H2O and SnapKV need; CPU: attention_eager).                 (eager_attention.cu)
//   probs: [n_heads, T, table_slots] (workspace)   prob_sums: [n_heads, table_slots]
// With kv.row_start set (decoding sequences, one row each, every row its own table),
// sum_from is not used: row t's sums are at prob_sums + row_sums[t], [n_heads, row_slots[t]],
// and a row whose row_sums[t] is -1 is not summed.   row_sums: [T]
void eager_attention(float* out, float* probs, float* prob_sums, int sum_from, const float* q, const int* q_pos,
                     int T, const PagedKv& kv, Heads h, const int64_t* row_sums = nullptr);
// Its kernels put one thread block per query on a grid's y or z axis, which holds at most
// 65,535: more queries than this at once are refused (kvscope::Error), before any launch.
constexpr int kMaxEagerQueries = 65535;

// TriAttention's key scores for n cached keys, every layer (CPU: key_scores in model/key_scores.h):
//   raw[(l * n_heads + h) * n + i] = w[l, h] . k_i + gap[l, h] . |k_i|     in double
//   k_cache: [num_layers, layer_floats] with slot rows of kv_dim   slots: [n] block * block_size + slot
//   w: [num_layers, n_heads, head_dim]   gap: [num_layers, n_heads, head_dim/2]   raw: [num_layers, n_heads, n]
void key_scores(double* raw, const float* w, const float* gap, const int* slots, int n, const float* k_cache,
                int num_layers, size_t layer_floats, Heads h);  // (triattention.cu)

// Executes a compaction plan on K and V of every layer (CPU: KvStorage::apply):
// moves[i] copies slot from[i] to slot to[i], with the result of plan order for a
// plan whose every destination is a hole or an earlier move's source, as
// PagedKvCache::plan_compaction makes them (the kernel reads ahead).  (compaction.cu)
//   k, v: [num_layers, layer_floats] with slot rows of kv_dim   from, to: [moves] block * block_size + slot
void compact(float* k, float* v, const int* from, const int* to, int moves, int num_layers, size_t layer_floats,
             int kv_dim);

}  // namespace kvscope::cuda
