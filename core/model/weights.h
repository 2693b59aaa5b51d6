// Weights: every tensor of a Qwen3 checkpoint, checked against its config.
//
// Matrices stay where they are when possible: F32 and BF16 tensors are views
// into the memory-mapped safetensors files (no copy; one whose offset is not a
// multiple of its element size is copied). F16 is widened to F32 at
// load, and WeightFormat can ask for everything in F32 or in BF16; converted
// copies live in huge-page buffers (util/huge_buffer.h).
// Norm weights (small vectors) are always held as F32.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/safetensors.h"
#include "util/huge_buffer.h"

namespace kvscope {

// A weight matrix [rows, cols], row-major: PyTorch's Linear layout [out, in].
struct Matrix {
  DType dtype = DType::F32;  // F32 or BF16 (never F16 after loading)
  int rows = 0;
  int cols = 0;
  const void* data = nullptr;

  const float* f32() const { return static_cast<const float*>(data); }
  const uint16_t* bf16() const { return static_cast<const uint16_t*>(data); }
  size_t bytes() const { return size_t(rows) * cols * dtype_size(dtype); }
};

struct LayerWeights {
  const float* input_norm = nullptr;  // [hidden]         input_layernorm
  Matrix q_proj;                      // [q_dim, hidden]   q_dim = heads * head_dim
  Matrix k_proj;                      // [kv_dim, hidden]  kv_dim = kv_heads * head_dim
  Matrix v_proj;                      // [kv_dim, hidden]
  const float* q_norm = nullptr;      // [head_dim]       RMSNorm of each query head, before RoPE
  const float* k_norm = nullptr;      // [head_dim]       RMSNorm of each key head, before RoPE
  Matrix o_proj;                      // [hidden, q_dim]
  const float* post_norm = nullptr;   // [hidden]         post_attention_layernorm
  Matrix gate_proj;                   // [intermediate, hidden]
  Matrix up_proj;                     // [intermediate, hidden]
  Matrix down_proj;                   // [hidden, intermediate]
};

struct Weights {
  Matrix embed;                       // [vocab, hidden]  embed_tokens
  std::vector<LayerWeights> layers;   // [num_layers]
  const float* final_norm = nullptr;  // [hidden]         model.norm
  Matrix lm_head;                     // [vocab, hidden]  the embedding itself when tied

  std::vector<const Matrix*> matrices() const;  // every matrix once (lm_head not again when tied)
  size_t matrix_bytes() const;        // bytes of all matrices (lm_head once even if tied)
  size_t decode_bytes() const;        // bytes of them one decode step reads (an untied embedding: one row)

  // Storage the views point into: the mapped files, and converted copies.
  std::shared_ptr<Checkpoint> checkpoint;
  std::vector<HugeBuffer> owned;
};

// How matrices are held in memory.
enum class WeightFormat {
  AsStored,  // F32 and BF16 as in the file (zero-copy), F16 widened to F32
  F32,       // everything widened to F32 (exact, twice the bytes of BF16)
  BF16,      // everything rounded to BF16
};

struct Model {
  ModelConfig config;
  Weights weights;
  // What loads but looks wrong, one line each, naming the file and tensor:
  // NaN or infinite weights, tensors stored in another dtype than config.json's
  // torch_dtype. The program prints each as "kvscope: warning: ...".
  std::vector<std::string> warnings;
};

// Loads DIR/config.json and the safetensors of DIR, validating every tensor:
// no missing, unexpected or mis-shaped tensors. Errors name the file and the tensor.
// Suspicious but usable weights are not errors: see Model::warnings.
Model load_model(const std::string& model_dir, WeightFormat format = WeightFormat::AsStored);

// A model with random weights (seeded), for benchmarks of real-size shapes
// without the real checkpoint. Matrices held in `dtype` (F32 or BF16).
Model random_model(const ModelConfig& config, DType dtype, uint64_t seed);
// What random_model checks first: kvscope::Error when its weights would not fit in
// memory (bench decode asks before its first line: a 32B shape must not run out halfway).
void check_random_model_fits(const ModelConfig& config, DType dtype);

}  // namespace kvscope
