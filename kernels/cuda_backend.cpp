#include "cuda_backend.h"

#include <algorithm>
#include <cmath>

#include "cache/kv_storage.h"
#include "model/attention.h"
#include "model/ops.h"
#include "gpu_devices.h"
#include "util/error.h"
#include "util/format.h"
#include "util/memory_check.h"

namespace kvscope::cuda {

std::unique_ptr<Backend> make_backend(const Model& model, int num_blocks, int block_size) {
  std::string why;
  if (!gpu_available(why)) throw Error("no CUDA GPU found (" + why + ")");
  return std::make_unique<CudaBackend>(model, num_blocks, block_size);
}

// The two big allocations are sized by the user: the weights (--model, --weights)
// and the paged K/V storage (--blocks, --kv-memory). Each is checked against the
// GPU's free memory first, so that one too big is named as what it is rather than
// as cudaMalloc's "out of memory".
//   held: bytes of the buffer the new one replaces (freed before it is allocated)
static void check_fits_on_gpu(size_t bytes, const std::string& what, size_t held = 0) {
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    cudaGetLastError();  // not left for the next launch check to report; cudaMalloc will say why
    return;
  }
  free_bytes += held;
  if (bytes > free_bytes)
    throw Error("not enough GPU memory for " + what + ": " + gigabytes(bytes) + " needed, " + gigabytes(free_bytes) +
                " free (of " + gigabytes(total_bytes) + ")");
}

// ---------------------------------------------------------------------------
// Weights: uploaded once
// ---------------------------------------------------------------------------

const void* CudaBackend::upload(const void* host, size_t bytes) {
  if (auto it = uploaded_.find(host); it != uploaded_.end()) return it->second;
  DeviceArray<char> copy(bytes);
  CUDA_CHECK(cudaMemcpy(copy.get(), host, bytes, cudaMemcpyHostToDevice));
  const void* device = copy.get();
  weight_memory_.push_back(std::move(copy));
  uploaded_[host] = device;
  return device;
}

CudaBackend::DeviceMatrix CudaBackend::upload(const Matrix& m) {
  if (m.dtype != DType::F32 && m.dtype != DType::BF16) throw Error("cuda backend: matrices must be f32 or bf16");
  return {upload(m.data, m.bytes()), m.dtype == DType::F32 ? WeightType::F32 : WeightType::BF16, m.rows, m.cols};
}

CudaBackend::CudaBackend(const Model& model, int num_blocks, int block_size)
    : model_(model), num_blocks_(num_blocks), block_size_(block_size) {
  const ModelConfig& c = model.config;
  const Weights& w = model.weights;
  check_fits_on_gpu(w.matrix_bytes(), "the weights");
  embed_ = upload(w.embed);
  lm_head_ = upload(w.lm_head);  // tied: the same host pointer, so the same device copy
  final_norm_ = upload_vector(w.final_norm, c.hidden_size);
  for (const LayerWeights& lw : w.layers) {
    DeviceLayer d;
    d.input_norm = upload_vector(lw.input_norm, c.hidden_size);
    d.post_norm = upload_vector(lw.post_norm, c.hidden_size);
    d.q_norm = upload_vector(lw.q_norm, c.head_dim);
    d.k_norm = upload_vector(lw.k_norm, c.head_dim);
    d.q_proj = upload(lw.q_proj);
    d.k_proj = upload(lw.k_proj);
    d.v_proj = upload(lw.v_proj);
    d.o_proj = upload(lw.o_proj);
    d.gate_proj = upload(lw.gate_proj);
    d.up_proj = upload(lw.up_proj);
    d.down_proj = upload(lw.down_proj);
    layers_.push_back(d);
  }
  // RoPE frequencies, the CPU's to the bit.
  std::vector<float> inv_freq(size_t(c.head_dim / 2));
  for (int i = 0; i < c.head_dim / 2; ++i) inv_freq[i] = rope_inv_freq(i, c.head_dim, c.rope_theta);
  inv_freq_.upload(inv_freq);

  check_fits_on_gpu(2 * storage_floats() * sizeof(float), KvStorage::describe(c, num_blocks, block_size));
  k_.reserve(storage_floats());
  v_.reserve(storage_floats());
  k_.zero(storage_floats());
  v_.zero(storage_floats());
  prepare_matmul();  // cuBLAS opened and its handle made now, not in the first (timed) prefill
}

// ---------------------------------------------------------------------------
// Forward
// ---------------------------------------------------------------------------

// out = x W^T for n rows of x, by the decode GEMV (each weight read once for every 8 of them).
void CudaBackend::gemv(float* out, const float* x, const DeviceMatrix& W, int n) {
  matvec(out, W.data, W.type, x, W.rows, W.cols, n);
}

// out = x W^T for T rows of x, by cuBLAS.
void CudaBackend::gemm(float* out, const float* x, const DeviceMatrix& W, int T) {
  if (W.type == WeightType::BF16) gemm_scratch_.reserve(size_t(16) << 20);  // 64 MiB: bands of widened rows
  matmul(out, x, W.data, W.type, T, W.rows, W.cols, gemm_scratch_.get(), gemm_scratch_.size());
}

// out = x W^T for every row of the step, as the CPU's batched pass does: the decode
// rows (one per decoding sequence, first) in one GEMV, each prefill chunk in a GEMM
// of its own, as it would be alone.
//   x: [rows, W.cols]   out: [rows, W.rows]
void CudaBackend::linear(float* out, const float* x, const DeviceMatrix& W) {
  if (decode_rows_ > 0) gemv(out, x, W, decode_rows_);
  for (const StepPiece& p : pieces_)
    if (p.T > 1) gemm(out + size_t(p.row) * W.rows, x + size_t(p.row) * W.cols, W, p.T);
}

// One prefill chunk's attention in layer l: its rows of q against its own block table.
void CudaBackend::piece_attention(const StepPiece& p, int l) {
  const ModelConfig& c = model_.config;
  const Heads heads{c.num_heads, c.num_kv_heads, c.head_dim};
  const PagedKv kv{k_.get() + l * layer_floats(), v_.get() + l * layer_floats(),
                   block_table_.get() + p.table_offset / block_size_, slot_pos_.get() + p.table_offset,
                   p.table_slots, block_size_};
  float* out = att_.get() + size_t(p.row) * c.q_dim();
  const float* q = q_.get() + size_t(p.row) * c.q_dim();
  const int* q_pos = q_pos_.get() + p.row;
  if (p.attention == AttentionPath::Eager) {
    float* sums = p.prob_sums ? prob_sums_.get() + l * sums_per_layer_ + p.sums_offset : nullptr;
    eager_attention(out, probs_.get(), sums, p.sum_from, q, q_pos, p.T, kv, heads);
  } else {
    flash_attention(out, q, q_pos, p.T, kv, heads);
  }
}

// The decoding sequences that need no probabilities (the first paged_rows_ rows):
// one paged attention launch for all of them, each row through its own table.
void CudaBackend::paged_rows_attention(int l) {
  const ModelConfig& c = model_.config;
  const PagedKv kv{k_.get() + l * layer_floats(), v_.get() + l * layer_floats(), block_table_.get(), slot_pos_.get(),
                   paged_max_slots_, block_size_, row_start_.get(), row_slots_.get()};
  paged_attention(att_.get(), q_.get(), q_pos_.get(), paged_rows_, kv, {c.num_heads, c.num_kv_heads, c.head_dim},
                  attention_workspace_.get());
}

// The decoding sequences that ask for probabilities (H2O; rows paged_rows_ to
// decode_rows_): one run of the eager kernels for all of them, each row through its
// own table, each adding its probabilities to its own sums.
void CudaBackend::eager_rows_attention(int l) {
  const ModelConfig& c = model_.config;
  const int first = paged_rows_, n = decode_rows_ - paged_rows_;
  const PagedKv kv{k_.get() + l * layer_floats(), v_.get() + l * layer_floats(), block_table_.get(), slot_pos_.get(),
                   eager_max_slots_, block_size_, row_start_.get() + first, row_slots_.get() + first};
  float* sums = sums_per_layer_ ? prob_sums_.get() + l * sums_per_layer_ : nullptr;
  eager_attention(att_.get() + size_t(first) * c.q_dim(), probs_.get(), sums, 0, q_.get() + size_t(first) * c.q_dim(),
                  q_pos_.get() + first, n, kv, {c.num_heads, c.num_kv_heads, c.head_dim}, eager_row_sums_.get());
}

// Layer l over all rows of the step. Only RoPE's positions, the K/V writes and
// attention tell the sequences apart; everything else treats the rows as one matrix.
void CudaBackend::layer_forward(int l, std::vector<float>* queries) {
  const ModelConfig& c = model_.config;
  const DeviceLayer& w = layers_[l];
  const int d = c.hidden_size, hd = c.head_dim, T = rows_;

  // Attention block.
  rmsnorm(h_.get(), x_.get(), w.input_norm, T, d, c.rms_norm_eps);
  linear(q_.get(), h_.get(), w.q_proj);
  linear(k_new_.get(), h_.get(), w.k_proj);
  linear(v_new_.get(), h_.get(), w.v_proj);
  rmsnorm(q_.get(), q_.get(), w.q_norm, T * c.num_heads, hd, c.rms_norm_eps);  // per head, before RoPE
  rmsnorm(k_new_.get(), k_new_.get(), w.k_norm, T * c.num_kv_heads, hd, c.rms_norm_eps);
  if (queries) q_.download(queries->data() + size_t(l) * T * c.q_dim(), size_t(T) * c.q_dim());
  rope(q_.get(), q_pos_.get(), inv_freq_.get(), T, c.num_heads, hd);
  rope(k_new_.get(), q_pos_.get(), inv_freq_.get(), T, c.num_kv_heads, hd);
  kv_write(k_.get() + l * layer_floats(), v_.get() + l * layer_floats(), k_new_.get(), v_new_.get(),
           slot_mapping_.get(), T, c.kv_dim());
  if (paged_rows_ > 0) paged_rows_attention(l);
  if (decode_rows_ > paged_rows_) eager_rows_attention(l);
  for (size_t i = size_t(decode_rows_); i < pieces_.size(); ++i) piece_attention(pieces_[i], l);
  linear(h_.get(), att_.get(), w.o_proj);
  add_inplace(x_.get(), h_.get(), size_t(T) * d);

  // MLP block.
  rmsnorm(h_.get(), x_.get(), w.post_norm, T, d, c.rms_norm_eps);
  linear(gate_.get(), h_.get(), w.gate_proj);
  linear(up_.get(), h_.get(), w.up_proj);
  swiglu(gate_.get(), gate_.get(), up_.get(), size_t(T) * c.intermediate_size);
  linear(h_.get(), gate_.get(), w.down_proj);
  add_inplace(x_.get(), h_.get(), size_t(T) * d);
}

// Uploads what the GPU needs to know about a step, in int32: every row's token,
// slot (block * block_size + slot) and position, and each piece's block table with
// the position held in each of its slots, the tables one after another; for the
// leading decode rows, where each one's table starts and how long it is, and for
// the eager ones among them where their probability sums go. Sizes the activations
// and the attention scratch for it.
void CudaBackend::upload_step(const std::vector<int>& tokens, const std::vector<const Placement*>& placed,
                              const std::vector<const std::vector<int>*>& tables) {
  const ModelConfig& c = model_.config;
  std::vector<int> slot_mapping, q_pos;       // [rows] where each row's K/V goes (block * block_size + slot), its position
  std::vector<int> block_table;               // [the pieces' table blocks] their tables, one after another
  std::vector<int> slot_pos;                  // [the tables' slots] each slot's position; -1: a hole, or not written yet
  std::vector<int> row_start, row_slots;      // [decode rows]
  size_t probs = 0;                           // floats of P for the largest eager prefill chunk
  sums_per_layer_ = 0;
  for (size_t i = 0; i < pieces_.size(); ++i) {
    StepPiece& piece = pieces_[i];
    const Placement& p = *placed[i];
    for (int t = 0; t < piece.T; ++t) {
      slot_mapping.push_back(p.slots[t].block * block_size_ + p.slots[t].slot);
      q_pos.push_back(int(p.pos[t]));
    }
    piece.table_offset = int(slot_pos.size());
    piece.table_slots = p.table_slots;
    block_table.insert(block_table.end(), tables[i]->begin(), tables[i]->end());
    slot_pos.resize(slot_pos.size() + size_t(p.table_slots), -1);
    for (size_t k = 0; k < p.keys.pos.size(); ++k) slot_pos[piece.table_offset + p.keys.table_index[k]] = int(p.keys.pos[k]);
    if (piece.T == 1 && row_start.size() == i) {  // the leading decode pieces
      row_start.push_back(piece.table_offset);
      row_slots.push_back(piece.table_slots);
    } else if (piece.attention == AttentionPath::Eager) {
      probs = std::max(probs, size_t(c.num_heads) * piece.T * p.table_slots);
    }
    if (piece.prob_sums) {
      piece.sums_offset = sums_per_layer_;
      sums_per_layer_ += size_t(c.num_heads) * p.table_slots;
    }
  }
  decode_rows_ = int(row_start.size());
  paged_rows_ = paged_max_slots_ = 0;
  for (; paged_rows_ < decode_rows_ && is_paged(pieces_[paged_rows_]); ++paged_rows_)
    paged_max_slots_ = std::max(paged_max_slots_, row_slots[paged_rows_]);
  // The eager decode rows: their P padded to the longest of their tables, and where their sums go.
  std::vector<int64_t> row_sums;  // [eager decode rows]
  eager_max_slots_ = 0;
  for (int r = paged_rows_; r < decode_rows_; ++r) {
    const StepPiece& piece = pieces_[r];
    row_sums.push_back(piece.prob_sums && piece.sum_from == 0 ? int64_t(piece.sums_offset) : -1);
    eager_max_slots_ = std::max(eager_max_slots_, piece.table_slots);
  }
  probs = std::max(probs, size_t(c.num_heads) * (decode_rows_ - paged_rows_) * eager_max_slots_);

  tokens_.upload(tokens);
  slot_mapping_.upload(slot_mapping);
  q_pos_.upload(q_pos);
  block_table_.upload(block_table);
  slot_pos_.upload(slot_pos);
  row_start_.upload(row_start);
  row_slots_.upload(row_slots);
  eager_row_sums_.upload(row_sums);
  probs_.reserve(probs);
  attention_workspace_.reserve(paged_attention_workspace(paged_rows_, {c.num_heads, c.num_kv_heads, c.head_dim},
                                                         paged_max_slots_));
  prob_sums_.reserve(c.num_layers * sums_per_layer_);
  prob_sums_.zero(c.num_layers * sums_per_layer_);

  // Activations for every row (as RunState).
  rows_ = int(tokens.size());
  const size_t r = size_t(rows_);
  x_.reserve(r * c.hidden_size);
  h_.reserve(r * c.hidden_size);
  q_.reserve(r * c.q_dim());
  k_new_.reserve(r * c.kv_dim());
  v_new_.reserve(r * c.kv_dim());
  att_.reserve(r * c.q_dim());
  gate_.reserve(r * c.intermediate_size);
  up_.reserve(r * c.intermediate_size);
}

// Embedding and every layer over the step's rows; then each piece's attention
// probability sums back to the host.
void CudaBackend::run_layers(std::vector<float>* queries) {
  const ModelConfig& c = model_.config;
  if (queries) queries->resize(size_t(c.num_layers) * rows_ * c.q_dim());
  embed(x_.get(), embed_.data, embed_.type, tokens_.get(), rows_, c.hidden_size);
  for (int l = 0; l < c.num_layers; ++l) layer_forward(l, queries);
  download_prob_sums();
}

// Every layer's sums in one copy, then each piece's into its host vector:
// prob_sums_ is [num_layers, sums_per_layer_], a piece's are [num_layers, n_heads, table_slots].
void CudaBackend::download_prob_sums() {
  const ModelConfig& c = model_.config;
  if (sums_per_layer_ == 0) return;
  prob_sums_host_.resize(c.num_layers * sums_per_layer_);
  prob_sums_.download(prob_sums_host_.data(), prob_sums_host_.size());
  for (const StepPiece& p : pieces_) {
    if (!p.prob_sums) continue;
    const size_t n = size_t(c.num_heads) * p.table_slots;
    p.prob_sums->resize(c.num_layers * n);
    for (int l = 0; l < c.num_layers; ++l) {
      const float* from = prob_sums_host_.data() + l * sums_per_layer_ + p.sums_offset;
      std::copy(from, from + n, p.prob_sums->data() + l * n);
    }
  }
}

// An eager piece of T queries for sequence seq, asked before its tokens are placed so
// that a refusal changes nothing (as the CPU's check_eager_attention_fits): at most
// kMaxEagerQueries of them, and P [n_heads, T, table slots] within the GPU's free
// memory, the table being the blocks it holds and those the T tokens will take.
void CudaBackend::check_eager_fits(const PagedKvCache& cache, int seq, int T) const {
  const int heads = model_.config.num_heads;
  const int64_t n = (int64_t(cache.sequence(seq).blocks.size()) + cache.blocks_needed(seq, T)) * block_size_;
  if (T > kMaxEagerQueries)
    throw Error("eager attention on the GPU takes at most " + commas(kMaxEagerQueries) + " queries at once, got " +
                commas(T) + " (H2O and SnapKV need it over the whole prompt): run it on the CPU (--device cpu)");
  const size_t bytes = size_t(heads) * size_t(T) * size_t(n) * sizeof(float);
  if (bytes > probs_.size() * sizeof(float))
    check_fits_on_gpu(bytes, eager_probabilities(T, n, " x " + plural(heads, "head")), probs_.size() * sizeof(float));
}

void CudaBackend::check_pool(const PagedKvCache& cache) const {
  if (cache.num_blocks() != num_blocks_ || cache.block_size() != block_size_)
    throw Error("cuda backend: the cache's pool does not match the storage it was made for");
}

const float* CudaBackend::forward(PagedKvCache& cache, int seq, const int* tokens, int T,
                                  const ForwardOptions& options) {
  const ModelConfig& c = model_.config;
  check_pool(cache);
  check_prob_sums_path(options.attention, options.prob_sums);
  if (options.attention == AttentionPath::Eager) check_eager_fits(cache, seq, T);
  const Placement p = place_tokens(c, cache, seq, tokens, T);
  pieces_ = {StepPiece{0, T, options.attention, options.sum_from, options.prob_sums}};
  upload_step(std::vector<int>(tokens, tokens + T), {&p}, {&cache.sequence(seq).blocks});
  run_layers(options.queries);

  // Final norm and lm_head, on every token or only the last one.
  const int first = options.all_logits ? 0 : T - 1, n = T - first;
  logits_.reserve(size_t(n) * c.vocab_size);
  rmsnorm(h_.get(), x_.get() + size_t(first) * c.hidden_size, final_norm_, n, c.hidden_size, c.rms_norm_eps);
  if (n == 1)
    gemv(logits_.get(), h_.get(), lm_head_, 1);
  else
    gemm(logits_.get(), h_.get(), lm_head_, n);
  logits_host_.resize(size_t(n) * c.vocab_size);
  logits_.download(logits_host_.data(), logits_host_.size());  // waits for the GPU
  return logits_host_.data();
}

// The whole batch in one pass, rows laid out as the CPU's forward_batch lays them,
// the decode items first (one row each) and then the prefill chunks; among the
// decode items, those on the paged kernel come before those asking for probabilities.
const float* CudaBackend::forward_batch(PagedKvCache& cache, const std::vector<BatchItem>& items) {
  const ModelConfig& c = model_.config;
  check_pool(cache);
  for (const BatchItem& it : items)  // the prefill chunks; the decode rows' P is one row per sequence
    if (it.attention == AttentionPath::Eager && it.tokens.size() > 1)
      check_eager_fits(cache, it.seq, int(it.tokens.size()));
  const std::vector<Placement> placed = place_batch(c, cache, items);
  std::vector<size_t> order;  // items in row order
  for (size_t i = 0; i < items.size(); ++i)
    if (items[i].tokens.size() == 1 && items[i].attention != AttentionPath::Eager) order.push_back(i);
  for (size_t i = 0; i < items.size(); ++i)
    if (items[i].tokens.size() == 1 && items[i].attention == AttentionPath::Eager) order.push_back(i);
  for (size_t i = 0; i < items.size(); ++i)
    if (items[i].tokens.size() > 1) order.push_back(i);
  pieces_.clear();
  std::vector<int> tokens;  // [rows]
  std::vector<const Placement*> placements;
  std::vector<const std::vector<int>*> tables;
  std::vector<int> last_row(items.size());  // item -> its last row
  for (size_t i : order) {
    const BatchItem& it = items[i];
    pieces_.push_back({int(tokens.size()), int(it.tokens.size()), it.attention, it.sum_from, it.prob_sums});
    tokens.insert(tokens.end(), it.tokens.begin(), it.tokens.end());
    last_row[i] = int(tokens.size()) - 1;
    placements.push_back(&placed[i]);
    tables.push_back(&cache.sequence(it.seq).blocks);
  }
  upload_step(tokens, placements, tables);
  run_layers(nullptr);

  // Final norm and lm_head on each item's last row, gathered into h in item order  [n, hidden]
  // by the embedding kernel, with x as the table and the rows as the tokens.
  const int d = c.hidden_size, n = int(items.size());
  last_rows_.upload(last_row);
  embed(h_.get(), x_.get(), WeightType::F32, last_rows_.get(), n, d);
  rmsnorm(h_.get(), h_.get(), final_norm_, n, d, c.rms_norm_eps);
  logits_.reserve(size_t(n) * c.vocab_size);
  gemv(logits_.get(), h_.get(), lm_head_, n);  // as a lone forward does for its last token
  logits_host_.resize(size_t(n) * c.vocab_size);
  logits_.download(logits_host_.data(), logits_host_.size());
  return logits_host_.data();
}

// ---------------------------------------------------------------------------
// Compaction and TriAttention scores
// ---------------------------------------------------------------------------

size_t CudaBackend::compact(const std::vector<Move>& plan) {
  std::vector<int> from(plan.size()), to(plan.size());
  for (size_t i = 0; i < plan.size(); ++i) {
    from[i] = plan[i].from.block * block_size_ + plan[i].from.slot;
    to[i] = plan[i].to.block * block_size_ + plan[i].to.slot;
  }
  move_from_.upload(from);
  move_to_.upload(to);
  const ModelConfig& c = model_.config;
  cuda::compact(k_.get(), v_.get(), move_from_.get(), move_to_.get(), int(plan.size()), c.num_layers, layer_floats(),
                c.kv_dim());
  return plan.size() * KvStorage::bytes_per_slot(c);
}

void CudaBackend::key_scores(double* raw, const float* w, const float* gap, const std::vector<SlotRef>& slots) {
  const ModelConfig& c = model_.config;
  const int n = int(slots.size());
  std::vector<int> flat(slots.size());
  for (int i = 0; i < n; ++i) flat[i] = slots[i].block * block_size_ + slots[i].slot;
  const size_t rows = size_t(c.num_layers) * c.num_heads;
  score_slots_.upload(flat);
  score_w_.upload(w, rows * c.head_dim);
  score_gap_.upload(gap, rows * (c.head_dim / 2));
  score_raw_.reserve(rows * n);
  cuda::key_scores(score_raw_.get(), score_w_.get(), score_gap_.get(), score_slots_.get(), n, k_.get(), c.num_layers,
                   layer_floats(), {c.num_heads, c.num_kv_heads, c.head_dim});
  score_raw_.download(raw, rows * n);
}

}  // namespace kvscope::cuda
