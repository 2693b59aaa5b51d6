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
// asks for attention probabilities. A batch (a serving step) is one pass over
// all its rows, laid out as the CPU lays them (except that among the decoding
// rows the paged ones come first, then the eager ones): the decoding sequences'
// rows share one GEMV per weight matrix, each prefill chunk gets its own GEMM; the decoding
// sequences share one paged attention launch (each row through its own block
// table), those that need probabilities (H2O) share one run of the eager kernels,
// and each prefill chunk gets the flash or eager kernel to itself.
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
  const float* forward_batch(PagedKvCache& cache, const std::vector<BatchItem>& items) override;
  size_t compact(const std::vector<Move>& plan) override;
  void key_scores(double* raw, const float* w, const float* gap, const std::vector<SlotRef>& slots) override;

 private:
  struct DeviceMatrix {
    const void* data = nullptr;
    WeightType type = WeightType::F32;
    int rows = 0, cols = 0;
  };
  struct DeviceLayer {  // as LayerWeights, on the device
    const float *input_norm, *q_norm, *k_norm, *post_norm;
    DeviceMatrix q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj;
  };

  const void* upload(const void* host, size_t bytes);  // once per host pointer (a tied lm_head is the embedding)
  DeviceMatrix upload(const Matrix& m);
  const float* upload_vector(const float* host, int n) { return static_cast<const float*>(upload(host, n * sizeof(float))); }

  // One sequence's rows in a step (as Piece in model/qwen3.cpp).
  struct StepPiece {
    int row = 0, T = 0;                      // its rows [row, row + T) of the activations
    AttentionPath attention = AttentionPath::Flash;
    int sum_from = 0;                        // eager only
    std::vector<float>* prob_sums = nullptr; // eager only: [num_layers, n_heads, table_slots] on the host
    int table_offset = 0;                    // its block table starts at logical slot table_offset of the step's tables
    int table_slots = 0;                     // slots its table spans
    size_t sums_offset = 0;                  // its [n_heads, table_slots] sums in each layer's part of prob_sums_
  };
  // Decoding without probabilities: these rows share one paged attention launch.
  static bool is_paged(const StepPiece& p) { return p.T == 1 && p.attention != AttentionPath::Eager; }

  void check_pool(const PagedKvCache& cache) const;
  void check_eager_fits(const PagedKvCache& cache, int seq, int T) const;
  void upload_step(const std::vector<int>& tokens, const std::vector<const Placement*>& placed,
                   const std::vector<const std::vector<int>*>& tables);
  void run_layers(std::vector<float>* queries);
  void layer_forward(int layer, std::vector<float>* queries);
  void piece_attention(const StepPiece& p, int layer);
  void paged_rows_attention(int layer);
  void eager_rows_attention(int layer);
  void download_prob_sums();
  void linear(float* out, const float* x, const DeviceMatrix& W);  // every row of the step
  void gemv(float* out, const float* x, const DeviceMatrix& W, int n);
  void gemm(float* out, const float* x, const DeviceMatrix& W, int T);
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

  // The step: its pieces in row order, rows_ rows in all, of which the first decode_rows_
  // are decoding sequences (one row each). Of those, the first paged_rows_ are paged
  // (is_paged), their tables at most paged_max_slots_ slots long; the rest are eager
  // (they ask for probabilities), their tables at most eager_max_slots_ long.
  std::vector<StepPiece> pieces_;
  int rows_ = 0, decode_rows_ = 0, paged_rows_ = 0, paged_max_slots_ = 0, eager_max_slots_ = 0;
  size_t sums_per_layer_ = 0;  // floats of prob_sums_ per layer: every summing piece's [n_heads, table_slots]
  // Per step, from the host: [rows] token ids, slots, positions; the pieces' block tables
  // one after another, and the position in each of their slots.
  DeviceArray<int> tokens_, slot_mapping_, q_pos_, block_table_, slot_pos_;
  DeviceArray<int> row_start_, row_slots_;  // [decode rows] where each one's table starts in them, its length
  DeviceArray<int64_t> eager_row_sums_;     // [eager decode rows] where each one's sums start in a layer's, or -1
  DeviceArray<int> last_rows_;              // [items] each item's last row (its logits' row)
  // Activations for every row of the step (as RunState).
  DeviceArray<float> x_;                // [rows, hidden]        the residual stream
  DeviceArray<float> h_;                // [rows, hidden]        normed input of a block / block output
  DeviceArray<float> q_;                // [rows, q_dim]
  DeviceArray<float> k_new_, v_new_;    // [rows, kv_dim]        this step's K and V, before kv_write
  DeviceArray<float> att_;              // [rows, q_dim]         attention output, before o_proj
  DeviceArray<float> gate_, up_;        // [rows, intermediate]
  DeviceArray<float> logits_;           // [items, vocab]        each item's last row (or every row)
  // Scratch.
  DeviceArray<float> gemm_scratch_;         // 16M floats (64 MiB): bf16 weight rows widened to f32, a band at a time
  DeviceArray<float> attention_workspace_;  // paged_attention_workspace(): each thread block's partial (m, l, O)
  DeviceArray<float> probs_;                // [n_heads, T, table_slots] P of the largest eager piece
  DeviceArray<float> prob_sums_;            // [num_layers, sums_per_layer_]
  std::vector<float> prob_sums_host_;       // the same, downloaded once per step
  std::vector<float> logits_host_;          // [T or items, vocab] the last answer
  // Compaction's move plan: [moves] each move's source and destination, as block * block_size + slot.
  DeviceArray<int> move_from_, move_to_;
  // TriAttention's inputs and output (Backend::key_scores).
  DeviceArray<int> score_slots_;   // [n] the scored keys, as block * block_size + slot
  DeviceArray<float> score_w_;     // [num_layers * n_heads, head_dim]   the trigonometric weights
  DeviceArray<float> score_gap_;   // [num_layers * n_heads, head_dim/2] the norm weights
  DeviceArray<double> score_raw_;  // [num_layers * n_heads, n]          each key's raw score per head
};

}  // namespace kvscope::cuda
