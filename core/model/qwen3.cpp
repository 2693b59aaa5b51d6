#include "model/qwen3.h"

#include <algorithm>
#include <string>

#include "model/ops.h"
#include "util/error.h"

namespace kvscope {

void RunState::reserve(const ModelConfig& c, int T, int logit_rows) {
  if (logits.size() < size_t(logit_rows) * c.vocab_size) logits.resize(size_t(logit_rows) * c.vocab_size);
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
}

// Everything a layer needs to know about this call.
struct Step {
  const ModelConfig& c;
  RunState& s;
  int T;
  const std::vector<SlotRef>& slots;  // [T] where each new token's K/V goes
  const std::vector<int64_t>& pos;    // [T] each new token's position
  const ForwardOptions& options;
  KvStorage& kv;
  const LiveSlots& keys;              // what attention reads, after the new tokens are written
  int table_slots;
};

// One decoder layer on T tokens: attention block then MLP block, both pre-norm residual.
static void layer_forward(const Step& st, const LayerWeights& w, int layer) {
  const ModelConfig& c = st.c;
  RunState& s = st.s;
  const int T = st.T, d = c.hidden_size, hd = c.head_dim;

  // Attention block.
  rmsnorm(s.h.data(), s.x.data(), w.input_norm, T, d, c.rms_norm_eps);
  matmul(s.q.data(), s.h.data(), w.q_proj, T);
  matmul(s.k.data(), s.h.data(), w.k_proj, T);
  matmul(s.v.data(), s.h.data(), w.v_proj, T);
  rmsnorm(s.q.data(), s.q.data(), w.q_norm, T * c.num_heads, hd, c.rms_norm_eps);  // per head, before RoPE
  rmsnorm(s.k.data(), s.k.data(), w.k_norm, T * c.num_kv_heads, hd, c.rms_norm_eps);
  if (st.options.queries)
    std::copy_n(s.q.data(), size_t(T) * c.q_dim(), st.options.queries->data() + size_t(layer) * T * c.q_dim());
  for (int t = 0; t < T; ++t) {
    rope(s.q.data() + size_t(t) * c.q_dim(), c.num_heads, hd, int(st.pos[t]), c.rope_theta);
    rope(s.k.data() + size_t(t) * c.kv_dim(), c.num_kv_heads, hd, int(st.pos[t]), c.rope_theta);
    std::copy_n(s.k.data() + size_t(t) * c.kv_dim(), c.kv_dim(), st.kv.key(layer, st.slots[t]));
    std::copy_n(s.v.data() + size_t(t) * c.kv_dim(), c.kv_dim(), st.kv.value(layer, st.slots[t]));
  }
  const AttentionShape shape{c.num_heads, c.num_kv_heads, hd};
  if (st.options.attention == AttentionPath::Flash) {
    attention_flash(s.att.data(), s.q.data(), st.pos.data(), T, st.keys, st.kv, layer, shape);
  } else {
    float* sums = st.options.prob_sums
                      ? st.options.prob_sums->data() + size_t(layer) * c.num_heads * st.table_slots
                      : nullptr;
    attention_eager(s.att.data(), s.q.data(), st.pos.data(), T, st.keys, st.kv, layer, shape, st.options.sum_from,
                    sums, st.table_slots);
  }
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

Placement place_tokens(const ModelConfig& c, PagedKvCache& cache, int seq, const int* tokens, int T) {
  if (T <= 0) throw Error("forward: no tokens");
  for (int t = 0; t < T; ++t)
    if (tokens[t] < 0 || tokens[t] >= c.vocab_size)
      throw Error("forward: token id " + std::to_string(tokens[t]) + " is outside the vocabulary [0, " +
                  std::to_string(c.vocab_size) + ")");
  // Refused before anything is written: the sequence stays as it was and can
  // retry the same step once blocks are freed; other sequences are untouched.
  if (cache.room(seq) < T)
    throw Error("block pool exhausted: sequence " + std::to_string(seq) + " needs room for " + std::to_string(T) +
                (T == 1 ? " more token" : " more tokens") + ", the pool has " + std::to_string(cache.room(seq)) + " (" +
                std::to_string(cache.pool().num_free()) + " free blocks of " + std::to_string(cache.block_size()) +
                "); the step is refused and the sequence is unchanged (free blocks, then retry)");
  if (cache.sequence(seq).next_pos + T > c.max_position_embeddings)
    throw Error("forward: position " + std::to_string(cache.sequence(seq).next_pos + T - 1) +
                " is past the model's max_position_embeddings (" + std::to_string(c.max_position_embeddings) + ")");

  // Place the new tokens first: each gets a slot and its position.
  Placement p;
  p.slots.resize(size_t(T));
  p.pos.resize(size_t(T));
  for (int t = 0; t < T; ++t) {
    p.pos[t] = cache.sequence(seq).next_pos;
    p.slots[t] = cache.append(seq);
  }
  p.keys = live_slots(cache, seq);
  p.table_slots = int(cache.sequence(seq).blocks.size()) * cache.block_size();
  return p;
}

const float* forward(const Model& model, PagedKvCache& cache, KvStorage& kv, int seq, RunState& s, const int* tokens,
                     int T, const ForwardOptions& options) {
  const ModelConfig& c = model.config;
  const Weights& w = model.weights;
  const Placement p = place_tokens(c, cache, seq, tokens, T);
  s.reserve(c, T, options.all_logits ? T : 1);
  if (options.prob_sums) options.prob_sums->assign(size_t(c.num_layers) * c.num_heads * p.table_slots, 0.0f);
  if (options.queries) options.queries->resize(size_t(c.num_layers) * T * c.q_dim());

  const Step step{c, s, T, p.slots, p.pos, options, kv, p.keys, p.table_slots};
  embed(s.x.data(), w.embed, tokens, T);
  for (int l = 0; l < c.num_layers; ++l) layer_forward(step, w.layers[l], l);

  // Final norm and lm_head, on every token or only the last one.
  const int first = options.all_logits ? 0 : T - 1, n = T - first;
  rmsnorm(s.h.data(), s.x.data() + size_t(first) * c.hidden_size, w.final_norm, n, c.hidden_size, c.rms_norm_eps);
  matmul(s.logits.data(), s.h.data(), w.lm_head, n);
  return s.logits.data();
}

}  // namespace kvscope
