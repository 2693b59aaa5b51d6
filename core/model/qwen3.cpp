#include "model/qwen3.h"

#include <algorithm>
#include <string>

#include "model/ops.h"
#include "util/error.h"

namespace kvscope {

KvCache::KvCache(const ModelConfig& c, int max_tokens_)
    : num_layers(c.num_layers), max_tokens(max_tokens_), kv_dim(c.kv_dim()),
      k(size_t(num_layers) * max_tokens * kv_dim), v(size_t(num_layers) * max_tokens * kv_dim) {}

void RunState::reserve(const ModelConfig& c, int T) {
  if (T <= capacity) return;
  capacity = T;
  const size_t t = size_t(T);
  x.resize(t * c.hidden_size);
  h.resize(t * c.hidden_size);
  q.resize(t * c.q_dim());
  k.resize(t * c.kv_dim());
  v.resize(t * c.kv_dim());
  att.resize(t * c.q_dim());
  gate.resize(t * c.intermediate_size);
  up.resize(t * c.intermediate_size);
  logits.resize(t * c.vocab_size);
}

// One decoder layer on T tokens: attention block then MLP block, both pre-norm residual.
static void layer_forward(const ModelConfig& c, const LayerWeights& w, int layer, KvCache& cache, RunState& s, int T,
                          int pos) {
  const int d = c.hidden_size, hd = c.head_dim;

  // Attention block.
  rmsnorm(s.h.data(), s.x.data(), w.input_norm, T, d, c.rms_norm_eps);
  matmul(s.q.data(), s.h.data(), w.q_proj, T);
  matmul(s.k.data(), s.h.data(), w.k_proj, T);
  matmul(s.v.data(), s.h.data(), w.v_proj, T);
  rmsnorm(s.q.data(), s.q.data(), w.q_norm, T * c.num_heads, hd, c.rms_norm_eps);  // per head, before RoPE
  rmsnorm(s.k.data(), s.k.data(), w.k_norm, T * c.num_kv_heads, hd, c.rms_norm_eps);
  for (int t = 0; t < T; ++t) {
    rope(s.q.data() + size_t(t) * c.q_dim(), c.num_heads, hd, pos + t, c.rope_theta);
    rope(s.k.data() + size_t(t) * c.kv_dim(), c.num_kv_heads, hd, pos + t, c.rope_theta);
    std::copy_n(s.k.data() + size_t(t) * c.kv_dim(), c.kv_dim(), cache.key(layer, pos + t));
    std::copy_n(s.v.data() + size_t(t) * c.kv_dim(), c.kv_dim(), cache.value(layer, pos + t));
  }
  attention(s.att.data(), s.q.data(), cache.key(layer, 0), cache.value(layer, 0), T, pos, c.num_heads, c.num_kv_heads, hd);
  matmul(s.h.data(), s.att.data(), w.o_proj, T);
  add_inplace(s.x.data(), s.h.data(), T * d);

  // MLP block.
  rmsnorm(s.h.data(), s.x.data(), w.post_norm, T, d, c.rms_norm_eps);
  matmul(s.gate.data(), s.h.data(), w.gate_proj, T);
  matmul(s.up.data(), s.h.data(), w.up_proj, T);
  swiglu(s.gate.data(), s.gate.data(), s.up.data(), T * c.intermediate_size);
  matmul(s.h.data(), s.gate.data(), w.down_proj, T);
  add_inplace(s.x.data(), s.h.data(), T * d);
}

const float* forward(const Model& model, KvCache& cache, RunState& s, const int* tokens, int T, int pos,
                     bool all_logits) {
  const ModelConfig& c = model.config;
  const Weights& w = model.weights;
  if (T <= 0) throw Error("forward: no tokens");
  if (pos < 0 || pos + T > cache.max_tokens)
    throw Error("forward: positions " + std::to_string(pos) + ".." + std::to_string(pos + T - 1) +
                " do not fit a cache of " + std::to_string(cache.max_tokens) + " tokens");
  for (int t = 0; t < T; ++t)
    if (tokens[t] < 0 || tokens[t] >= c.vocab_size)
      throw Error("forward: token id " + std::to_string(tokens[t]) + " is outside the vocabulary [0, " +
                  std::to_string(c.vocab_size) + ")");
  s.reserve(c, T);

  embed(s.x.data(), w.embed, tokens, T);
  for (int l = 0; l < c.num_layers; ++l) layer_forward(c, w.layers[l], l, cache, s, T, pos);

  // Final norm and lm_head, on every token or only the last one.
  const int first = all_logits ? 0 : T - 1, n = T - first;
  const float* x_out = s.x.data() + size_t(first) * c.hidden_size;
  rmsnorm(s.h.data(), x_out, w.final_norm, n, c.hidden_size, c.rms_norm_eps);
  matmul(s.logits.data(), s.h.data(), w.lm_head, n);
  return s.logits.data();
}

}  // namespace kvscope
