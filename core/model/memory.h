// The KV-cache memory calculator: how many bytes one token of K/V costs, how
// many bytes the weights take, and how many tokens fit on a GPU beside them.
//
// Units are in the names: *_bytes are bytes, *_gb are decimal gigabytes
// (1 GB = 1e9 bytes, the unit GPUs are sold in), *_bits are bits per element.
//
// Qwen3-32B in 16-bit: 2 (K,V) x 64 layers x 8 KV heads x 128 dims x 2 bytes
// = 262144 bytes = 256 KiB per token; its 4-bit weights take 16.4 GB, so a
// 24 GB GPU less a 1 GB reserve holds about 25K tokens of cache.
#pragma once

#include <cstdint>

#include "model/config.h"

namespace kvscope {

// The element widths the calculator accepts; anything else is a kvscope::Error.
// Weights: 2, 3, 4, 8, 16, 32 bits. K/V cache: 8, 16, 32 bits.
void check_weight_bits(int weight_bits);
void check_kv_bits(int kv_bits);

// Bytes of K and V one token adds to the cache, over all layers:
// 2 (K and V) x num_layers x num_kv_heads x head_dim x kv_bits / 8.
int64_t kv_bytes_per_token(const ModelConfig& config, int kv_bits);

// Tokens of K/V cache in one GB (1e9 bytes, the GB of the GPU fit), rounded down.
int64_t kv_tokens_per_gb(const ModelConfig& config, int kv_bits);

// Bytes of the weights when every parameter takes weight_bits bits, rounded up
// to whole bytes (ModelConfig::parameter_count(); no quantization scales or zero
// points counted, so real 4-bit checkpoints are a few percent larger).
int64_t weight_bytes(const ModelConfig& config, int weight_bits);

// What the calculator is asked: a GPU, the formats, and the memory held back.
struct MemoryBudget {
  double gpu_gb = 24;       // GPU memory, decimal GB
  int weight_bits = 16;     // bits per weight
  int kv_bits = 16;         // bits per K or V element
  double reserve_gb = 1;    // CUDA context, activations and allocator slack, decimal GB
  int block_size = 16;      // tokens per physical KV block (vLLM's default)
};

// Throws kvscope::Error naming the option if a budget value is out of range
// (bits not accepted, GB negative, non-finite or above 1e6, block size < 1).
void check_budget(const MemoryBudget& budget);

// The answer: where the GPU's bytes go and how many tokens of cache fit.
struct KvFit {
  double gpu_bytes = 0;          // gpu_gb x 1e9
  double weight_bytes = 0;       // weight_bytes(config, weight_bits)
  double reserve_bytes = 0;      // reserve_gb x 1e9
  double free_bytes = 0;         // gpu - weights - reserve; may be negative
  int64_t kv_bytes_per_token = 0;
  int64_t tokens = 0;            // floor(free / bytes per token), 0 when nothing is free
  int64_t blocks = 0;            // whole blocks of block_size tokens: floor(tokens / block_size)
  bool weights_fit = false;      // weights <= GPU memory (reserve not counted)
  bool cache_fits = false;       // room for one token's K/V or more
};

// Checks the budget (check_budget) and computes the fit.
KvFit fit_kv_cache(const ModelConfig& config, const MemoryBudget& budget);

}  // namespace kvscope
