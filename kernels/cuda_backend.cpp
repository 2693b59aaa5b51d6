#include "cuda_backend.h"

#include <algorithm>
#include <cmath>

#include "gpu_devices.h"
#include "util/error.h"

namespace kvscope::cuda {

std::unique_ptr<Backend> make_backend(const Model& model, int num_blocks, int block_size) {
  std::string why;
  if (!gpu_available(why)) throw Error("no CUDA GPU found (" + why + ")");
  return std::make_unique<CudaBackend>(model, num_blocks, block_size);
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
  // RoPE frequencies with the expression and f32 rounding of rope() in model/ops.cpp.
  std::vector<float> inv_freq(size_t(c.head_dim / 2));
  for (int i = 0; i < c.head_dim / 2; ++i)
    inv_freq[i] = 1.0f / std::pow(float(c.rope_theta), float(2 * i) / float(c.head_dim));
  inv_freq_.upload(inv_freq);

  k_.reserve(storage_floats());
  v_.reserve(storage_floats());
  k_.zero(storage_floats());
  v_.zero(storage_floats());
}

// ---------------------------------------------------------------------------
// Forward
// ---------------------------------------------------------------------------

// out = x W^T: the GEMV for one token, cuBLAS for more.
void CudaBackend::linear(float* out, const float* x, const DeviceMatrix& W, int T) {
  if (T == 1) {
    matvec(out, W.data, W.type, x, W.rows, W.cols);
    return;
  }
  if (W.type == WeightType::BF16) gemm_scratch_.reserve(size_t(16) << 20);  // 64 MB: bands of widened rows
  matmul(out, x, W.data, W.type, T, W.rows, W.cols, gemm_scratch_.get(), gemm_scratch_.size());
}

void CudaBackend::layer_forward(int l, int T, const ForwardOptions& options, int table_slots) {
  const ModelConfig& c = model_.config;
  const DeviceLayer& w = layers_[l];
  const int d = c.hidden_size, hd = c.head_dim;
  const Heads heads{c.num_heads, c.num_kv_heads, hd};

  // Attention block.
  rmsnorm(h_.get(), x_.get(), w.input_norm, T, d, c.rms_norm_eps);
  linear(q_.get(), h_.get(), w.q_proj, T);
  linear(k_new_.get(), h_.get(), w.k_proj, T);
  linear(v_new_.get(), h_.get(), w.v_proj, T);
  rmsnorm(q_.get(), q_.get(), w.q_norm, T * c.num_heads, hd, c.rms_norm_eps);  // per head, before RoPE
  rmsnorm(k_new_.get(), k_new_.get(), w.k_norm, T * c.num_kv_heads, hd, c.rms_norm_eps);
  if (options.queries)
    q_.download(options.queries->data() + size_t(l) * T * c.q_dim(), size_t(T) * c.q_dim());
  rope(q_.get(), q_pos_.get(), inv_freq_.get(), T, c.num_heads, hd);
  rope(k_new_.get(), q_pos_.get(), inv_freq_.get(), T, c.num_kv_heads, hd);
  float* k_layer = k_.get() + l * layer_floats();
  float* v_layer = v_.get() + l * layer_floats();
  kv_write(k_layer, v_layer, k_new_.get(), v_new_.get(), slot_mapping_.get(), T, c.kv_dim());

  const PagedKv kv{k_layer, v_layer, block_table_.get(), slot_pos_.get(), table_slots, block_size_};
  if (options.attention == AttentionPath::Eager) {
    probs_.reserve(size_t(c.num_heads) * T * table_slots);
    float* sums = options.prob_sums ? prob_sums_.get() + size_t(l) * c.num_heads * table_slots : nullptr;
    eager_attention(att_.get(), probs_.get(), sums, options.sum_from, q_.get(), q_pos_.get(), T, kv, heads);
  } else if (T == 1) {
    attention_workspace_.reserve(paged_attention_workspace(T, heads, table_slots));
    paged_attention(att_.get(), q_.get(), q_pos_.get(), T, kv, heads, attention_workspace_.get());
  } else {
    flash_attention(att_.get(), q_.get(), q_pos_.get(), T, kv, heads);
  }
  linear(h_.get(), att_.get(), w.o_proj, T);
  add_inplace(x_.get(), h_.get(), size_t(T) * d);

  // MLP block.
  rmsnorm(h_.get(), x_.get(), w.post_norm, T, d, c.rms_norm_eps);
  linear(gate_.get(), h_.get(), w.gate_proj, T);
  linear(up_.get(), h_.get(), w.up_proj, T);
  swiglu(gate_.get(), gate_.get(), up_.get(), size_t(T) * c.intermediate_size);
  linear(h_.get(), gate_.get(), w.down_proj, T);
  add_inplace(x_.get(), h_.get(), size_t(T) * d);
}

const float* CudaBackend::forward(PagedKvCache& cache, int seq, const int* tokens, int T,
                                  const ForwardOptions& options) {
  const ModelConfig& c = model_.config;
  if (cache.num_blocks() != num_blocks_ || cache.block_size() != block_size_)
    throw Error("cuda backend: the cache's pool does not match the storage it was made for");
  const Placement p = place_tokens(c, cache, seq, tokens, T);

  // What the GPU needs to know about this step, in int32.
  std::vector<int> slot_mapping(static_cast<size_t>(T)), q_pos(static_cast<size_t>(T));
  for (int t = 0; t < T; ++t) {
    slot_mapping[t] = p.slots[t].block * block_size_ + p.slots[t].slot;
    q_pos[t] = int(p.pos[t]);
  }
  const std::vector<int>& blocks = cache.sequence(seq).blocks;
  std::vector<int> slot_pos(size_t(p.table_slots), -1);  // -1: a hole, or not written yet
  for (size_t i = 0; i < p.keys.pos.size(); ++i) slot_pos[p.keys.table_index[i]] = int(p.keys.pos[i]);
  tokens_.upload(tokens, size_t(T));
  slot_mapping_.upload(slot_mapping);
  q_pos_.upload(q_pos);
  block_table_.upload(blocks);
  slot_pos_.upload(slot_pos);

  // Activations for T tokens.
  const size_t t = size_t(T);
  x_.reserve(t * c.hidden_size);
  h_.reserve(t * c.hidden_size);
  q_.reserve(t * c.q_dim());
  k_new_.reserve(t * c.kv_dim());
  v_new_.reserve(t * c.kv_dim());
  att_.reserve(t * c.q_dim());
  gate_.reserve(t * c.intermediate_size);
  up_.reserve(t * c.intermediate_size);
  const size_t prob_sums_size = size_t(c.num_layers) * c.num_heads * p.table_slots;
  if (options.prob_sums) {
    prob_sums_.reserve(prob_sums_size);
    prob_sums_.zero(prob_sums_size);
  }
  if (options.queries) options.queries->resize(size_t(c.num_layers) * T * c.q_dim());

  embed(x_.get(), embed_.data, embed_.type, tokens_.get(), T, c.hidden_size);
  for (int l = 0; l < c.num_layers; ++l) layer_forward(l, T, options, p.table_slots);

  // Final norm and lm_head, on every token or only the last one.
  const int first = options.all_logits ? 0 : T - 1, n = T - first;
  logits_.reserve(size_t(n) * c.vocab_size);
  rmsnorm(h_.get(), x_.get() + size_t(first) * c.hidden_size, final_norm_, n, c.hidden_size, c.rms_norm_eps);
  linear(logits_.get(), h_.get(), lm_head_, n);
  logits_host_.resize(size_t(n) * c.vocab_size);
  logits_.download(logits_host_.data(), logits_host_.size());  // waits for the GPU
  if (options.prob_sums) {
    options.prob_sums->resize(prob_sums_size);
    prob_sums_.download(options.prob_sums->data(), prob_sums_size);
  }
  return logits_host_.data();
}

// One forward per item, after the same checks as the CPU's batched pass, so a
// refused batch changes nothing here either. (A batched GPU pass, one GEMM per
// weight over all rows, is the obvious next step; it is not written yet.)
const float* CudaBackend::forward_batch(PagedKvCache& cache, const std::vector<BatchItem>& items) {
  const ModelConfig& c = model_.config;
  check_batch(c, cache, items);
  batch_logits_host_.resize(items.size() * size_t(c.vocab_size));
  for (size_t i = 0; i < items.size(); ++i) {
    const BatchItem& it = items[i];
    ForwardOptions options;
    options.attention = it.attention;
    options.sum_from = it.sum_from;
    options.prob_sums = it.prob_sums;
    const float* logits = forward(cache, it.seq, it.tokens.data(), int(it.tokens.size()), options);
    std::copy_n(logits, c.vocab_size, batch_logits_host_.data() + i * c.vocab_size);
  }
  return batch_logits_host_.data();
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
  return plan.size() * size_t(c.num_layers) * 2 * c.kv_dim() * sizeof(float);
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
