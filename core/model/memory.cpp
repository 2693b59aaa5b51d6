#include "model/memory.h"

#include <cmath>
#include <string>

#include "util/error.h"

namespace kvscope {

void check_weight_bits(int weight_bits) {
  switch (weight_bits) {
    case 2: case 3: case 4: case 8: case 16: case 32: return;
  }
  throw Error("--weight-bits must be one of 2, 3, 4, 8, 16, 32, got " + std::to_string(weight_bits));
}

void check_kv_bits(int kv_bits) {
  switch (kv_bits) {
    case 8: case 16: case 32: return;
  }
  throw Error("--kv-bits must be one of 8, 16, 32, got " + std::to_string(kv_bits));
}

int64_t kv_bytes_per_token(const ModelConfig& config, int kv_bits) {
  check_kv_bits(kv_bits);
  const int64_t bytes_per_element = kv_bits / 8;
  return 2 * int64_t(config.num_layers) * config.num_kv_heads * config.head_dim * bytes_per_element;
}

int64_t kv_tokens_per_gb(const ModelConfig& config, int kv_bits) {
  return int64_t(1000000000) / kv_bytes_per_token(config, kv_bits);
}

int64_t weight_bytes(const ModelConfig& config, int weight_bits) {
  check_weight_bits(weight_bits);
  const int64_t bits = config.parameter_count() * weight_bits;
  return (bits + 7) / 8;
}

// The largest size the calculator takes: a petabyte, far past any one GPU, and
// small enough that its count of tokens fits an int64_t.
constexpr double kMaxGb = 1e6;

// A size in decimal GB that must be finite and in [0, kMaxGb]. A 0 GB GPU is
// allowed: the answer is that nothing fits.
static void check_gb(double gb, const char* option) {
  if (std::isfinite(gb) && gb >= 0 && gb <= kMaxGb) return;
  throw Error(std::string(option) + " must be a number of GB from 0 to 1000000, got " + number_text(gb));
}

void check_budget(const MemoryBudget& budget) {
  check_gb(budget.gpu_gb, "--gpu-gb");
  check_gb(budget.reserve_gb, "--reserve-gb");
  check_weight_bits(budget.weight_bits);
  check_kv_bits(budget.kv_bits);
  if (budget.block_size < 1) throw Error("block size must be >= 1, got " + std::to_string(budget.block_size));
}

KvFit fit_kv_cache(const ModelConfig& config, const MemoryBudget& budget) {
  check_budget(budget);
  KvFit fit;
  // GB to whole bytes, rounded: 0.000489344 GB is 489343.99... in a double, and
  // truncating it would count a token short where the bytes end on a token exactly.
  fit.gpu_bytes = std::round(budget.gpu_gb * 1e9);
  fit.weight_bytes = double(weight_bytes(config, budget.weight_bits));
  fit.reserve_bytes = std::round(budget.reserve_gb * 1e9);
  fit.free_bytes = fit.gpu_bytes - fit.weight_bytes - fit.reserve_bytes;
  fit.kv_bytes_per_token = kv_bytes_per_token(config, budget.kv_bits);
  fit.weights_fit = fit.weight_bytes <= fit.gpu_bytes;
  fit.tokens = fit.free_bytes > 0 ? int64_t(std::floor(fit.free_bytes / double(fit.kv_bytes_per_token))) : 0;
  fit.cache_fits = fit.tokens > 0;
  fit.blocks = fit.tokens / budget.block_size;
  return fit;
}

}  // namespace kvscope
