#include "model/qwen3.h"

#include <algorithm>
#include <string>

#include "model/ops.h"
#include "util/error.h"
#include "util/format.h"
#include "util/omp_errors.h"

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

// One sequence's part of a forward call.
struct Piece {
  int row0 = 0, T = 0;   // its rows of the activations: [row0, row0 + T)
  Placement place;       // where its tokens go, their positions, what its attention reads
  AttentionPath attention = AttentionPath::Flash;
  int sum_from = 0;
  std::vector<float>* prob_sums = nullptr;  // [num_layers, n_heads, place.table_slots]
};

// Everything a layer needs to know about this call.
struct Step {
  const ModelConfig& c;
  RunState& s;
  int rows;                           // tokens of all pieces together
  int decode_rows;                    // rows [0, decode_rows): the pieces of one token
  const std::vector<Piece>& pieces;
  std::vector<float>* queries;        // [num_layers, rows, q_dim] when set
  KvStorage& kv;
};

// RoPE, the K/V writes and attention of one piece: the only part of a layer that
// depends on which sequence a row belongs to.
static void piece_attention(const Step& st, const Piece& p, int layer) {
  const ModelConfig& c = st.c;
  RunState& s = st.s;
  const int hd = c.head_dim;
  float* q = s.q.data() + size_t(p.row0) * c.q_dim();          // [p.T, q_dim]
  float* k = s.k.data() + size_t(p.row0) * c.kv_dim();         // [p.T, kv_dim]
  const float* v = s.v.data() + size_t(p.row0) * c.kv_dim();   // [p.T, kv_dim]
  float* att = s.att.data() + size_t(p.row0) * c.q_dim();      // [p.T, q_dim]
  for (int t = 0; t < p.T; ++t) {
    rope(q + size_t(t) * c.q_dim(), c.num_heads, hd, int(p.place.pos[t]), c.rope_theta);
    rope(k + size_t(t) * c.kv_dim(), c.num_kv_heads, hd, int(p.place.pos[t]), c.rope_theta);
    std::copy_n(k + size_t(t) * c.kv_dim(), c.kv_dim(), st.kv.key(layer, p.place.slots[t]));
    std::copy_n(v + size_t(t) * c.kv_dim(), c.kv_dim(), st.kv.value(layer, p.place.slots[t]));
  }
  const AttentionShape shape{c.num_heads, c.num_kv_heads, hd};
  if (p.attention == AttentionPath::Flash) {
    attention_flash(att, q, p.place.pos.data(), p.T, p.place.keys, st.kv, layer, shape);
  } else {
    const int table = p.place.table_slots;
    float* sums = p.prob_sums ? p.prob_sums->data() + size_t(layer) * c.num_heads * table : nullptr;
    attention_eager(att, q, p.place.pos.data(), p.T, p.place.keys, st.kv, layer, shape, p.sum_from, sums, table);
  }
}

// out = in W^T on every row, as each piece would get it alone: the decode rows
// share one matrix-vector pass over W (read once for all of them), and each
// prefill chunk is a GEMM of its own. in: [rows, W.cols]  out: [rows, W.rows]
static void linear(const Step& st, float* out, const float* in, const Matrix& W) {
  if (st.decode_rows > 0) matmul_rows(out, in, W, st.decode_rows);
  for (const Piece& p : st.pieces) {
    if (p.row0 < st.decode_rows) continue;
    float* o = out + size_t(p.row0) * W.rows;
    const float* x = in + size_t(p.row0) * W.cols;
    if (p.T == 1) matmul_rows(o, x, W, 1);
    else matmul(o, x, W, p.T);
  }
}

// One decoder layer on all rows: attention block then MLP block, both pre-norm residual.
static void layer_forward(const Step& st, const LayerWeights& w, int layer) {
  const ModelConfig& c = st.c;
  RunState& s = st.s;
  const int T = st.rows, d = c.hidden_size, hd = c.head_dim;

  // Attention block.
  rmsnorm(s.h.data(), s.x.data(), w.input_norm, T, d, c.rms_norm_eps);
  linear(st, s.q.data(), s.h.data(), w.q_proj);
  linear(st, s.k.data(), s.h.data(), w.k_proj);
  linear(st, s.v.data(), s.h.data(), w.v_proj);
  rmsnorm(s.q.data(), s.q.data(), w.q_norm, T * c.num_heads, hd, c.rms_norm_eps);  // per head, before RoPE
  rmsnorm(s.k.data(), s.k.data(), w.k_norm, T * c.num_kv_heads, hd, c.rms_norm_eps);
  if (st.queries)
    std::copy_n(s.q.data(), size_t(T) * c.q_dim(), st.queries->data() + size_t(layer) * T * c.q_dim());
  // Sequences are independent here (own rows, own slots, own keys): several at once
  // share the threads one by one; a lone one uses them inside attention.
  const int n = int(st.pieces.size());
  OmpErrors errors;  // an exception cannot leave the region: rethrown after it
#pragma omp parallel for schedule(dynamic, 1) if (n > 1)
  for (int i = 0; i < n; ++i) errors.run([&] { piece_attention(st, st.pieces[size_t(i)], layer); });
  errors.rethrow();
  linear(st, s.h.data(), s.att.data(), w.o_proj);
  add_inplace(s.x.data(), s.h.data(), size_t(T) * d);

  // MLP block.
  rmsnorm(s.h.data(), s.x.data(), w.post_norm, T, d, c.rms_norm_eps);
  linear(st, s.gate.data(), s.h.data(), w.gate_proj);
  linear(st, s.up.data(), s.h.data(), w.up_proj);
  swiglu(s.gate.data(), s.gate.data(), s.up.data(), size_t(T) * c.intermediate_size);
  linear(st, s.h.data(), s.gate.data(), w.down_proj);
  add_inplace(s.x.data(), s.h.data(), size_t(T) * d);
}

// The checks of place_tokens that need no room in the pool.
static void check_tokens(const ModelConfig& c, const PagedKvCache& cache, int seq, const int* tokens, int T) {
  if (T <= 0) throw Error("forward: no tokens");
  for (int t = 0; t < T; ++t)
    if (tokens[t] < 0 || tokens[t] >= c.vocab_size)
      throw Error("forward: token id " + std::to_string(tokens[t]) + " is outside the vocabulary [0, " +
                  std::to_string(c.vocab_size) + ")");
  if (cache.sequence(seq).next_pos + T > c.max_position_embeddings)
    throw Error("forward: position " + std::to_string(cache.sequence(seq).next_pos + T - 1) +
                " is past the model's max_position_embeddings (" + std::to_string(c.max_position_embeddings) + ")");
}

Placement place_tokens(const ModelConfig& c, PagedKvCache& cache, int seq, const int* tokens, int T) {
  check_tokens(c, cache, seq, tokens, T);
  // Refused before anything is written: the sequence stays as it was and can
  // retry the same step once blocks are freed; other sequences are untouched.
  if (cache.room(seq) < T)
    throw PoolExhausted("block pool exhausted: sequence " + std::to_string(seq) + " needs room for " +
                        plural(T, "more token") + ", the pool has " + std::to_string(cache.room(seq)) + " (" +
                        plural(cache.pool().num_free(), "free block") + " of " + std::to_string(cache.block_size()) +
                        "); the step is refused and the sequence is unchanged");

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

void check_prob_sums_path(AttentionPath attention, const std::vector<float>* prob_sums) {
  if (prob_sums && attention != AttentionPath::Eager)
    throw Error("forward: attention probability sums are asked of flash attention, which keeps no probabilities; "
                "use eager attention");
}

void check_batch(const ModelConfig& c, const PagedKvCache& cache, const std::vector<BatchItem>& items) {
  if (items.empty()) throw Error("forward: an empty batch");
  std::vector<int> seqs;
  int64_t blocks = 0;
  for (const BatchItem& it : items) {
    check_tokens(c, cache, it.seq, it.tokens.data(), int(it.tokens.size()));
    check_prob_sums_path(it.attention, it.prob_sums);
    if (std::find(seqs.begin(), seqs.end(), it.seq) != seqs.end())
      throw Error("forward: sequence " + std::to_string(it.seq) + " comes twice in one batch");
    seqs.push_back(it.seq);
    blocks += cache.blocks_needed(it.seq, int64_t(it.tokens.size()));
  }
  if (blocks > cache.pool().num_free())
    throw PoolExhausted("block pool exhausted: the batch of " + plural(int64_t(items.size()), "sequence") + " needs " +
                        plural(blocks, "more block") + ", the pool has " +
                        std::to_string(cache.pool().num_free()) + " free; the step is refused and no sequence is changed");
}

std::vector<Placement> place_batch(const ModelConfig& c, PagedKvCache& cache, const std::vector<BatchItem>& items) {
  check_batch(c, cache, items);
  std::vector<Placement> placed;
  for (const BatchItem& it : items) placed.push_back(place_tokens(c, cache, it.seq, it.tokens.data(), int(it.tokens.size())));
  return placed;
}

// Embedding, then every layer, over the pieces' rows. tokens: [rows]
static void run_layers(const Model& model, KvStorage& kv, RunState& s, const int* tokens, int rows,
                       const std::vector<Piece>& pieces, std::vector<float>* queries) {
  const ModelConfig& c = model.config;
  for (const Piece& p : pieces)
    if (p.prob_sums) p.prob_sums->assign(size_t(c.num_layers) * c.num_heads * p.place.table_slots, 0.0f);
  if (queries) queries->resize(size_t(c.num_layers) * rows * c.q_dim());
  int decode_rows = 0;  // the leading pieces of one token (forward_batch puts them first)
  for (size_t i = 0; i < pieces.size() && pieces[i].T == 1; ++i) ++decode_rows;
  const Step step{c, s, rows, decode_rows, pieces, queries, kv};
  embed(s.x.data(), model.weights.embed, tokens, rows);
  for (int l = 0; l < c.num_layers; ++l) layer_forward(step, model.weights.layers[l], l);
}

const float* forward(const Model& model, PagedKvCache& cache, KvStorage& kv, int seq, RunState& s, const int* tokens,
                     int T, const ForwardOptions& options) {
  const ModelConfig& c = model.config;
  const Weights& w = model.weights;
  check_prob_sums_path(options.attention, options.prob_sums);
  if (options.attention == AttentionPath::Eager)  // before the tokens are placed: nothing changes
    check_eager_attention_fits(T, int64_t(cache.sequence(seq).live) + T, c.head_dim);
  std::vector<Piece> pieces(1);
  pieces[0] = {0, T, place_tokens(c, cache, seq, tokens, T), options.attention, options.sum_from, options.prob_sums};
  s.reserve(c, T, options.all_logits ? T : 1);
  run_layers(model, kv, s, tokens, T, pieces, options.queries);

  // Final norm and lm_head, on every token or only the last one.
  const int first = options.all_logits ? 0 : T - 1, n = T - first;
  rmsnorm(s.h.data(), s.x.data() + size_t(first) * c.hidden_size, w.final_norm, n, c.hidden_size, c.rms_norm_eps);
  matmul(s.logits.data(), s.h.data(), w.lm_head, n);
  return s.logits.data();
}

const float* forward_batch(const Model& model, PagedKvCache& cache, KvStorage& kv, RunState& s,
                           const std::vector<BatchItem>& items) {
  const ModelConfig& c = model.config;
  const Weights& w = model.weights;
  for (const BatchItem& it : items)  // before anything is placed
    if (it.attention == AttentionPath::Eager) {
      const int64_t T = int64_t(it.tokens.size());
      check_eager_attention_fits(T, int64_t(cache.sequence(it.seq).live) + T, c.head_dim);
    }
  std::vector<Placement> placed = place_batch(c, cache, items);
  // Rows: the decode items first (one each), then the prefill chunks.
  std::vector<size_t> order;  // items in row order
  for (size_t i = 0; i < items.size(); ++i)
    if (items[i].tokens.size() == 1) order.push_back(i);
  for (size_t i = 0; i < items.size(); ++i)
    if (items[i].tokens.size() > 1) order.push_back(i);
  std::vector<Piece> pieces;  // in row order
  std::vector<int> row_of(items.size());  // item -> its last row
  std::vector<int> tokens;    // [rows]
  for (size_t i : order) {
    const BatchItem& it = items[i];
    pieces.push_back({int(tokens.size()), int(it.tokens.size()), std::move(placed[i]), it.attention, it.sum_from,
                      it.prob_sums});
    tokens.insert(tokens.end(), it.tokens.begin(), it.tokens.end());
    row_of[i] = int(tokens.size()) - 1;
  }
  const int rows = int(tokens.size()), n = int(items.size());
  s.reserve(c, rows, n);
  run_layers(model, kv, s, tokens.data(), rows, pieces, nullptr);

  // Final norm and lm_head on each item's last row, gathered into h in item order.  [n, hidden]
  const int d = c.hidden_size;
  for (int i = 0; i < n; ++i) std::copy_n(s.x.data() + size_t(row_of[i]) * d, d, s.h.data() + size_t(i) * d);
  rmsnorm(s.h.data(), s.h.data(), w.final_norm, n, d, c.rms_norm_eps);
  matmul_rows(s.logits.data(), s.h.data(), w.lm_head, n);  // as a lone forward does for its last token
  return s.logits.data();
}

}  // namespace kvscope
