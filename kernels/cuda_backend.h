// CudaBackend: the model on a CUDA GPU, behind the same Backend interface as
// the CPU (model/backend.h). Host C++ (no nvcc needed to include it).
//
//   weights   uploaded once, as they are held on the host (f32 or bf16)
//   K/V       the paged storage lives on the GPU, laid out as KvStorage:
//             [layers, num_blocks, block_size, kv_dim] for K and for V, f32
//   per step  the host's PagedKvCache places the tokens; the GPU receives the
//             token ids, the slot mapping, the positions and the block table
//             with the position of every slot (a few bytes per cached token)
//   logits    copied back to the host after every forward
//
// The forward pass is model/qwen3.cpp's, operation for operation, with the
// kernels of kernels.h; decode (T = 1) uses the GEMV and paged attention,
// prefill cuBLAS and the tiled flash attention, and the eager path when a policy
// asks for attention probabilities.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "device_array.h"
#include "kernels.h"
#include "model/backend.h"

namespace kvscope::cuda {

// The backend for `model`, after checking that a GPU is there: kvscope::Error
// "no CUDA GPU found (cudaGetDeviceCount: ...)" otherwise.
std::unique_ptr<Backend> make_backend(const Model& model, int num_blocks, int block_size);

class CudaBackend final : public Backend {
 public:
  CudaBackend(const Model& model, int num_blocks, int block_size);
  const char* name() const override { return "cuda"; }
  const float* forward(PagedKvCache& cache, int seq, const int* tokens, int T, const ForwardOptions& options) override;
  // Not batched on the GPU yet: checks and places the whole batch as the CPU does,
  // then runs one forward per item (the weights are read once per sequence).
  const float* forward_batch(PagedKvCache& cache, const std::vector<BatchItem>& items) override;
  size_t compact(const std::vector<Move>& plan) override;
  void key_scores(double* raw, const float* w, const float* gap, const std::vector<SlotRef>& slots) override;

  // The whole K/V storage, copied to the host (for tests): same layout as KvStorage::k and ::v.
  std::vector<float> download_keys() const { return k_.to_host(storage_floats()); }
  std::vector<float> download_values() const { return v_.to_host(storage_floats()); }

 private:
  struct DeviceMatrix {
    const void* data = nullptr;
    WeightType type = WeightType::F32;
    int rows = 0, cols = 0;
  };
  struct DeviceLayer {
    const float *input_norm, *q_norm, *k_norm, *post_norm;
    DeviceMatrix q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj;
  };

  const void* upload(const void* host, size_t bytes);  // once per host pointer (a tied lm_head is the embedding)
  DeviceMatrix upload(const Matrix& m);
  const float* upload_vector(const float* host, int n) { return static_cast<const float*>(upload(host, n * sizeof(float))); }
  void linear(float* out, const float* x, const DeviceMatrix& W, int T);
  void layer_forward(int layer, int T, const ForwardOptions& options, int table_slots);
  size_t layer_floats() const { return size_t(num_blocks_) * block_size_ * model_.config.kv_dim(); }
  size_t storage_floats() const { return layer_floats() * model_.config.num_layers; }

  const Model& model_;
  int num_blocks_, block_size_;

  // Weights, uploaded once.
  std::vector<DeviceArray<char>> weight_memory_;
  std::map<const void*, const void*> uploaded_;  // host pointer -> device copy
  DeviceMatrix embed_, lm_head_;
  const float* final_norm_ = nullptr;
  std::vector<DeviceLayer> layers_;
  DeviceArray<float> inv_freq_;  // [head_dim/2] RoPE frequencies, computed as ops.cpp does

  // The paged K/V storage: [layers, num_blocks, block_size, kv_dim] each.
  DeviceArray<float> k_, v_;

  // Per step, from the host: [T] token ids, slots, positions; the block table and slot positions.
  DeviceArray<int> tokens_, slot_mapping_, q_pos_, block_table_, slot_pos_;
  // Activations (as RunState) and scratch.
  DeviceArray<float> x_, h_, q_, k_new_, v_new_, att_, gate_, up_, logits_;
  DeviceArray<float> gemm_scratch_, attention_workspace_, probs_, prob_sums_;
  std::vector<float> logits_host_;
  std::vector<float> batch_logits_host_;  // [items, vocab] forward_batch's answer
  // Compaction and TriAttention inputs.
  DeviceArray<int> move_from_, move_to_, score_slots_;
  DeviceArray<float> score_w_, score_gap_;
  DeviceArray<double> score_raw_;
};

}  // namespace kvscope::cuda
