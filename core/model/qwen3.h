// The Qwen3 decoder: one forward(tokens, pos) for prefill and decode alike.
//
// In the spirit of llama2.c: plain structs for the state, one function that
// runs the layers. For each layer (pre-norm residual blocks):
//
//   h  = rmsnorm(x) ;  q, k, v = h Wq^T, h Wk^T, h Wv^T
//   q, k = rmsnorm per head (q_norm, k_norm), then RoPE at each token's position
//   K/V cache <- k, v ;  x += attention(q, K, V) Wo^T
//   h  = rmsnorm(x) ;  x += (silu(h Wg^T) * (h Wu^T)) Wd^T
//
// then logits = rmsnorm(x) W_lm^T.
#pragma once

#include <vector>

#include "model/weights.h"

namespace kvscope {

// The simplest K/V cache: per layer, one contiguous array, row p holds position p.
// Keys are stored after RoPE.
struct KvCache {
  int num_layers = 0;
  int max_tokens = 0;
  int kv_dim = 0;
  std::vector<float> k;  // [num_layers, max_tokens, kv_dim]
  std::vector<float> v;  // [num_layers, max_tokens, kv_dim]

  KvCache(const ModelConfig& c, int max_tokens);
  float* key(int layer, int pos) { return k.data() + (size_t(layer) * max_tokens + pos) * kv_dim; }
  float* value(int layer, int pos) { return v.data() + (size_t(layer) * max_tokens + pos) * kv_dim; }
};

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
  std::vector<float> logits;   // [T or 1, vocab]

  void reserve(const ModelConfig& c, int T);
};

// Runs tokens[0..T) at positions pos .. pos+T-1, appending their K/V to the cache.
// Returns the logits: [T, vocab] if all_logits, else [1, vocab] for the last token.
// Throws kvscope::Error if the cache is too small or a token id is out of range.
const float* forward(const Model& model, KvCache& cache, RunState& s, const int* tokens, int T, int pos,
                     bool all_logits = false);

}  // namespace kvscope
