// Attention over the paged KV cache, two ways, with the same result.
//
// Both read K/V only through the sequence's block table: the live slots in table
// order, holes skipped, each with the absolute position its slot records. A query
// at position p sees the keys at positions <= p (causal by position, not by slot,
// so it stays right when hole reuse puts new tokens in old slots).
//
//   flash  FlashAttention's loop: a tile of queries (with the query heads of one KV
//          head, GQA) against one tile of keys at a time, S = Q K^T and O += exp(S - m) V as
//          two small matrix products, and per row a running max m and sum l (the
//          online softmax); never holds a row of scores, and reads each K and V row
//          once for the whole tile of queries. (GPU: kernels/flash_attention.cu.)
//   eager  materialises softmax(q K^T / sqrt(d)) for a whole head, [T, n], and so
//          can hand the attention probabilities to the policies that need them
//          (H2O, SnapKV): column sums of P over the queries t >= sum_from.
//
// Tiles are cut from the live keys in order, not from physical blocks, so the
// arithmetic depends only on the sequence of live keys: compaction, which keeps
// that sequence and only moves slots, leaves both outputs bit-for-bit unchanged.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "cache/kv_storage.h"

namespace kvscope {

enum class AttentionPath { Flash, Eager };

// The flash path's tiles: this many keys are scored before the running sums are
// updated, and this many queries (each with every query head of a KV head) walk the
// keys together.
constexpr int kFlashTile = 32;
constexpr int kFlashQueryTile = 32;

// Below this many multiply-adds (queries x heads x keys x head_dim) attention runs on
// one thread, and so do TriAttention's key scores (layers x heads x keys x head_dim,
// model/key_scores.cpp).  One decode query of the bundled model over 1,024 keys is
// 131k: split over 2 cores, `kvscope eval` took 1.3x as long as on one (team start-up
// and waiting at the join outweigh ~30 us of work).  Prefill and long contexts of the
// 0.6B shape (16 heads x 128) pass it.
constexpr double kMinParallelAttention = 1e6;

// The slots attention reads for one sequence, in block-table order.
struct LiveSlots {
  std::vector<SlotRef> slots;    // [n]
  std::vector<int64_t> pos;      // [n]  the token position each slot holds
  std::vector<int> table_index;  // [n]  logical slot index: table block * block_size + slot
};
LiveSlots live_slots(const PagedKvCache& cache, int seq);

struct AttentionShape {
  int n_heads, n_kv_heads, head_dim;
};

// out: [T, n_heads * head_dim]; q: [T, n_heads * head_dim] after q_norm and RoPE;
// q_pos: [T] the queries' positions.
void attention_flash(float* out, const float* q, const int64_t* q_pos, int T, const LiveSlots& keys,
                     const KvStorage& kv, int layer, AttentionShape shape);

// As attention_flash, and adds to prob_sums[h * table_slots + table_index[j]] the
// probability that query head h gives key j, summed over the queries t >= sum_from.
// prob_sums may be null.                         prob_sums: [n_heads, table_slots]
void attention_eager(float* out, const float* q, const int64_t* q_pos, int T, const LiveSlots& keys,
                     const KvStorage& kv, int layer, AttentionShape shape, int sum_from, float* prob_sums,
                     int table_slots);

// Eager attention's scratch for T queries over n keys against the machine's memory:
// P [T, n] floats, with copies of one KV head's K and V [n, head_dim] and of its
// queries and output [T, head_dim], on each OpenMP thread. kvscope::Error "not enough
// memory for eager attention's probabilities (...)" when it cannot fit; the forward
// pass asks before it changes anything (a long prompt under H2O or SnapKV). Under
// 64 MiB in all it is taken to fit without looking (every decode step asks).
void check_eager_attention_fits(int64_t T, int64_t n, int head_dim);

// What a memory check names when eager attention's probabilities do not fit, on the
// CPU or the GPU: "eager attention's probabilities (T queries x n keys<spread>; H2O
// and SnapKV need them)", spread saying how many copies of [T, n] there are
// (", on each of 2 threads", " x 16 heads").
std::string eager_probabilities(int64_t T, int64_t n, const std::string& spread);

}  // namespace kvscope
