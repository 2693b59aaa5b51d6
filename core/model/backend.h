// Backend: where the model runs and where its K/V numbers live.
//
// The host keeps the bookkeeping (PagedKvCache: block tables, positions, the
// pool) and the policies; a backend holds the weights and the K/V storage and
// does the arithmetic. Four things are asked of it:
//
//   forward      run tokens through the model, appending their K/V (model/qwen3.h)
//   forward_batch  the same for several sequences in one pass (a serving step)
//   compact      execute a compaction plan the cache made (cache/kv_cache.h)
//   key_scores   TriAttention's per-head key scores, where the keys are
//
// CpuBackend (here) runs model/qwen3.cpp on a KvStorage in RAM. The CUDA one
// lives in kernels/cuda_backend.h and exists only in builds with the toolkit;
// programs pick one with an EngineConfig::backend factory.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "cache/kv_cache.h"
#include "cache/kv_storage.h"
#include "model/qwen3.h"

namespace kvscope {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;  // "cpu" or "cuda"

  // As forward() in model/qwen3.h: runs tokens[0..T) of `seq`, appending their K/V
  // to this backend's storage. Returns host memory: [T, vocab] with all_logits, else [1, vocab].
  virtual const float* forward(PagedKvCache& cache, int seq, const int* tokens, int T,
                               const ForwardOptions& options = {}) = 0;

  // As forward_batch() in model/qwen3.h: each item's tokens, all in one pass when the
  // backend can. Returns host memory: [items, vocab], each item's last token's logits.
  // Refused as a whole (kvscope::Error, nothing changed) when the pool lacks blocks for all.
  virtual const float* forward_batch(PagedKvCache& cache, const std::vector<BatchItem>& items) = 0;

  // Executes a compaction plan on the stored K/V (as KvStorage::apply); returns the bytes moved.
  virtual size_t compact(const std::vector<Move>& plan) = 0;

  // For the n cached keys at `slots`, every layer l and query head h (reading its KV head):
  //   raw[(l * n_heads + h) * n + i] = w[l, h] . k_i + gap[l, h] . |k_i|
  // where |k_i| is per rotate-half band f: sqrt(k[f]^2 + k[f + d/2]^2). Sums in double.
  //   w: [layers, n_heads, head_dim]   gap: [layers, n_heads, head_dim/2]   raw: [layers, n_heads, n]
  virtual void key_scores(double* raw, const float* w, const float* gap, const std::vector<SlotRef>& slots) = 0;
};

// A maker of the backend an engine runs on, given the pool's shape.
using BackendFactory = std::function<std::unique_ptr<Backend>(const Model& model, int num_blocks, int block_size)>;

class CpuBackend final : public Backend {
 public:
  CpuBackend(const Model& model, int num_blocks, int block_size);
  const char* name() const override { return "cpu"; }
  const float* forward(PagedKvCache& cache, int seq, const int* tokens, int T, const ForwardOptions& options) override;
  const float* forward_batch(PagedKvCache& cache, const std::vector<BatchItem>& items) override;
  size_t compact(const std::vector<Move>& plan) override { return kv_.apply(plan); }
  void key_scores(double* raw, const float* w, const float* gap, const std::vector<SlotRef>& slots) override;

 private:
  const Model& model_;
  KvStorage kv_;
  RunState state_;
};

}  // namespace kvscope
