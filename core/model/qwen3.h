// The Qwen3 decoder: one forward(tokens) for prefill and decode alike, at the
// positions the paged cache gives the sequence next.
//
// In the spirit of llama2.c: plain structs for the state, one function that
// runs the layers. For each layer (pre-norm residual blocks):
//
//   h  = rmsnorm(x) ;  q, k, v = h Wq^T, h Wk^T, h Wv^T
//   q, k = rmsnorm per head (q_norm, k_norm), then RoPE at each token's position
//   paged K/V cache <- k, v ;  x += attention(q, K, V) Wo^T   (K, V read through the block table)
//   h  = rmsnorm(x) ;  x += (silu(h Wg^T) * (h Wu^T)) Wd^T
//
// then logits = rmsnorm(x) W_lm^T.
#pragma once

#include <vector>

#include "cache/kv_cache.h"
#include "cache/kv_storage.h"
#include "model/attention.h"
#include "model/weights.h"

namespace kvscope {

// Activations of one forward call, sized for T tokens at a time.
struct RunState {
  int capacity = 0;            // T the buffers hold
  std::vector<float> x;        // [T, hidden]        the residual stream
  std::vector<float> h;        // [T, hidden]        normed input of a block / block output
  std::vector<float> q;        // [T, q_dim]
  std::vector<float> k;        // [T, kv_dim]
  std::vector<float> v;        // [T, kv_dim]
  std::vector<float> att;      // [T, q_dim]         attention output, before o_proj
  std::vector<float> gate;     // [T, intermediate]
  std::vector<float> up;       // [T, intermediate]
  std::vector<float> logits;   // [logit_rows, vocab]: T with all_logits, else 1; forward_batch: one per item

  void reserve(const ModelConfig& c, int T, int logit_rows);
};

struct ForwardOptions {
  bool all_logits = false;                      // logits for every token, or only the last
  AttentionPath attention = AttentionPath::Flash;
  // Eager attention only: prob_sums receives, per layer and query head, the
  // probability each slot of the block table got from the queries t >= sum_from.
  int sum_from = 0;
  std::vector<float>* prob_sums = nullptr;      // [num_layers, n_heads, table blocks * block_size]
  // The queries after q_norm and before RoPE (what TriAttention calibrates on).
  std::vector<float>* queries = nullptr;        // [num_layers, T, q_dim]
};

// The host half of every forward call, whatever device does the arithmetic:
// checks the tokens, the room and the positions (kvscope::Error, changing nothing),
// then places the T new tokens in the cache and lists what attention will read.
struct Placement {
  std::vector<SlotRef> slots;  // [T] where each new token's K/V goes
  std::vector<int64_t> pos;    // [T] each new token's position
  LiveSlots keys;              // what attention reads, the new tokens included
  int table_slots = 0;         // slots the block table spans: blocks * block_size
};
Placement place_tokens(const ModelConfig& c, PagedKvCache& cache, int seq, const int* tokens, int T);

// Probability sums come from eager attention only: asked of flash they would stay
// 0, and H2O or SnapKV would rank every token alike. kvscope::Error then.
void check_prob_sums_path(AttentionPath attention, const std::vector<float>* prob_sums);

// Runs tokens[0..T) of sequence `seq` at its next positions, appending their K/V
// to the paged cache. Returns the logits: [T, vocab] with all_logits, else [1, vocab].
// Throws kvscope::Error, changing nothing, if a token id is out of range or the
// block pool has no room for T more tokens.
const float* forward(const Model& model, PagedKvCache& cache, KvStorage& kv, int seq, RunState& s, const int* tokens,
                     int T, const ForwardOptions& options = {});

// Batching: several sequences in one forward pass.
//
// Every item's tokens become rows of one activation matrix [rows, hidden]; only
// RoPE, the K/V writes and attention go item by item, each through its own block
// table at its own positions. A decoding sequence gives one row, a prefilling one
// a chunk of its prompt. The decode rows share one matrix-vector pass over each
// weight matrix (model/matvec.h: each weight row read once for all of them); a
// prefill chunk is a GEMM of its own, as it would be alone.
struct BatchItem {
  int seq = -1;
  std::vector<int> tokens;                      // [T] its new tokens
  AttentionPath attention = AttentionPath::Flash;
  int sum_from = 0;                             // eager only, as in ForwardOptions
  std::vector<float>* prob_sums = nullptr;      // [num_layers, n_heads, its table blocks * block_size]
};

// Checks every item as place_tokens and check_prob_sums_path do, that no sequence comes twice, and that
// the pool has the blocks for all of them together: kvscope::PoolExhausted otherwise
// ("block pool exhausted: the batch ..."). Changes nothing.
void check_batch(const ModelConfig& c, const PagedKvCache& cache, const std::vector<BatchItem>& items);
// check_batch, then places every item in order: one Placement per item.
std::vector<Placement> place_batch(const ModelConfig& c, PagedKvCache& cache, const std::vector<BatchItem>& items);

// Runs the items in one pass. Returns the logits of each item's last token:
// [items, vocab]. Each sequence gets exactly the logits it would get alone, the
// same sums in the same order (tests/serve_test.cpp, Batch.*).
const float* forward_batch(const Model& model, PagedKvCache& cache, KvStorage& kv, RunState& s,
                           const std::vector<BatchItem>& items);

}  // namespace kvscope
