// kvscope memory: the KV-cache memory calculator.
//
// Prints what one token of K/V costs (for 32-, 16- and 8-bit elements, the
// formula written out with the config's numbers), what the weights take, and
// how many tokens of cache fit on a GPU of a given size beside them. Pure
// arithmetic on config.json: no weights are read, no GPU is needed.
//
// If the weights do not fit, that is an answer, not an error: the table is
// printed with a line saying so, and the exit code is 0. Bad input (bits out
// of range, negative GB, an unreadable config) is a kvscope::Error: exit 1.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "model/config.h"
#include "model/memory.h"
#include "util/error.h"
#include "util/format.h"

namespace kvscope::cli {

namespace {

struct MemoryArgs {
  std::string config;
  MemoryBudget budget;
};

// Decimal GB with two decimals, 16381061632 -> "16.38 GB"; under 0.1 GB with three
// significant digits, so a small model's weights are not "0.00 GB": 2624256 -> "0.00262 GB".
std::string gb(double bytes) {
  const double g = bytes / 1e9;
  char buf[64];
  std::snprintf(buf, sizeof buf, g != 0 && std::fabs(g) < 0.1 ? "%.3g GB" : "%.2f GB", g);
  return buf;
}

// The per-token formula with the config's numbers, e.g.
// "2 x 64 layers x 8 KV heads x 128 dims x 2 bytes = 262,144 bytes = 256 KiB per token".
std::string kv_formula(const ModelConfig& c, int kv_bits) {
  const int bytes_per_element = kv_bits / 8;
  const int64_t per_token = kv_bytes_per_token(c, kv_bits);
  char buf[256];
  std::snprintf(buf, sizeof buf, "2 x %s x %s x %s x %s = %s bytes = %s per token",
                plural(c.num_layers, "layer").c_str(), plural(c.num_kv_heads, "KV head").c_str(),
                plural(c.head_dim, "dim").c_str(), plural(bytes_per_element, "byte").c_str(), commas(per_token).c_str(),
                kib(per_token).c_str());
  return buf;
}

// The per-token table: one formula line each for 32-, 16- and 8-bit elements, then tokens per GB
// (1e9 bytes, as in the GPU fit below: the KiB per token are exact, 112 KiB = 114,688 bytes).
void print_kv_table(const ModelConfig& c, int chosen_kv_bits) {
  const int widths[] = {32, 16, 8};
  size_t formula_width = 0;
  for (int bits : widths) formula_width = std::max(formula_width, kv_formula(c, bits).size());
  std::printf("KV cache per token = 2 (K and V) x layers x KV heads x head_dim x bytes per element\n");
  for (int bits : widths)
    std::printf("  %2d-bit: %-*s  %7s tokens per GB%s\n", bits, int(formula_width), kv_formula(c, bits).c_str(),
                commas(kv_tokens_per_gb(c, bits)).c_str(), bits == chosen_kv_bits ? "  <- --kv-bits" : "");
}

void run_memory(const MemoryArgs& a) {
  check_budget(a.budget);  // bad options fail before the file is read
  const ModelConfig c = load_config_file(a.config);
  const MemoryBudget& b = a.budget;
  const KvFit fit = fit_kv_cache(c, b);

  std::printf("kvscope memory: %s\n", shown_path(a.config).c_str());
  std::printf("  %s, %s, %s, head_dim %d, hidden %d, vocab %d, %s embeddings\n\n", plural(c.num_layers, "layer").c_str(),
              plural(c.num_heads, "query head").c_str(), plural(c.num_kv_heads, "KV head").c_str(), c.head_dim,
              c.hidden_size, c.vocab_size, c.tie_word_embeddings ? "tied" : "untied");

  print_kv_table(c, b.kv_bits);

  const int64_t params = c.parameter_count();
  std::printf("\nWeights: %s parameters (computed from the config; %s)\n", commas(params).c_str(),
              c.tie_word_embeddings ? "lm_head tied to the embeddings, counted once" : "lm_head and embeddings separate");
  std::printf("  at %d bits: %s bytes = %s (no quantization scales counted)\n\n", b.weight_bits,
              commas(weight_bytes(c, b.weight_bits)).c_str(), gb(fit.weight_bytes).c_str());

  const std::string gpu_gb = fmt("%g", b.gpu_gb);
  std::printf("Fit on %s %s GB GPU (1 GB = 1e9 bytes), K/V at %d bits:\n", a_or_an(gpu_gb), gpu_gb.c_str(), b.kv_bits);
  int w = 9;  // the column of GB, as wide as its widest entry
  for (double bytes : {fit.gpu_bytes, fit.weight_bytes, fit.reserve_bytes, fit.free_bytes})
    w = std::max(w, int(gb(bytes).size()));
  std::printf("    %*s  GPU memory\n", w, gb(fit.gpu_bytes).c_str());
  std::printf("  - %*s  weights at %d bits\n", w, gb(fit.weight_bytes).c_str(), b.weight_bits);
  std::printf("  - %*s  reserve: CUDA context, activations, allocator slack (--reserve-gb)\n", w, gb(fit.reserve_bytes).c_str());
  std::printf("  = %*s  free for the KV cache\n", w, gb(fit.free_bytes).c_str());
  std::printf("  / %s bytes per token = %s tokens = %s blocks of %d tokens\n", commas(fit.kv_bytes_per_token).c_str(),
              commas(fit.tokens).c_str(), commas(fit.blocks).c_str(), b.block_size);
  if (!fit.weights_fit)
    std::printf("\nthe weights alone do not fit: %s of weights > %s of GPU memory\n", gb(fit.weight_bytes).c_str(),
                gb(fit.gpu_bytes).c_str());
  else if (fit.free_bytes <= 0)
    std::printf("\nno room for the KV cache: weights + reserve = %s >= %s of GPU memory\n",
                gb(fit.weight_bytes + fit.reserve_bytes).c_str(), gb(fit.gpu_bytes).c_str());
  else if (!fit.cache_fits)
    std::printf("\nno room for the KV cache: %s bytes free, fewer than one token's %s bytes\n",
                commas(int64_t(fit.free_bytes)).c_str(), commas(fit.kv_bytes_per_token).c_str());
}

}  // namespace

void add_memory_command(CLI::App& app) {
  auto args = std::make_shared<MemoryArgs>();
  CLI::App* cmd = app.add_subcommand(
      "memory",
      "KV-cache memory calculator: bytes per token of K/V, bytes of the weights, and how many tokens fit on a GPU.\n"
      "free = GPU - weights - reserve; tokens = free / KV bytes per token. 1 GB = 1e9 bytes.");
  cmd->add_option("--config", args->config, "config.json giving the model shape")->required()->check(kFileName);
  // From 0 GB (nothing fits: the answer says so) to a petabyte (kMaxGb in model/memory.cpp).
  const CLI::Validator gigabytes = number_check(0, false, 1e6, "0..1e6");
  cmd->add_option("--gpu-gb", args->budget.gpu_gb, "GPU memory in GB (1 GB = 1e9 bytes)")
      ->capture_default_str()
      ->check(gigabytes);
  cmd->add_option("--weight-bits", args->budget.weight_bits, "Bits per weight: 2, 3, 4, 8, 16 or 32")->capture_default_str();
  cmd->add_option("--kv-bits", args->budget.kv_bits, "Bits per K/V element: 8, 16 or 32")->capture_default_str();
  cmd->add_option("--reserve-gb", args->budget.reserve_gb,
                  "GB held back for the CUDA context, activations and allocator slack")
      ->capture_default_str()
      ->check(gigabytes);
  cmd->callback([args] { run_memory(*args); });
}

}  // namespace kvscope::cli
