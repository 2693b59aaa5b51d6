#include "model/backend.h"

#include "model/key_scores.h"

namespace kvscope {

CpuBackend::CpuBackend(const Model& model, int num_blocks, int block_size)
    : model_(model), kv_(model.config, num_blocks, block_size) {}

const float* CpuBackend::forward(PagedKvCache& cache, int seq, const int* tokens, int T,
                                 const ForwardOptions& options) {
  return kvscope::forward(model_, cache, kv_, seq, state_, tokens, T, options);
}

const float* CpuBackend::forward_batch(PagedKvCache& cache, const std::vector<BatchItem>& items) {
  return kvscope::forward_batch(model_, cache, kv_, state_, items);
}

void CpuBackend::key_scores(double* raw, const float* w, const float* gap, const std::vector<SlotRef>& slots) {
  const ModelConfig& c = model_.config;
  kvscope::key_scores(raw, w, gap, slots, kv_, {c.num_heads, c.num_kv_heads, c.head_dim});
}

}  // namespace kvscope
