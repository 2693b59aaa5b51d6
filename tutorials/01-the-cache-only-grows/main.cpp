// Chapter 1: the cache only grows.
//
// Bytes of K/V per token from the real Qwen3 config.json files, the cache of one
// sequence as its context grows, and what fits on a 24 GB GPU beside 4-bit weights.
// Pure arithmetic on the configs (core/model/memory.h); no weights are read.
#include <cstdio>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/memory.h"
#include "tutorial.h"

using namespace kvscope;
using namespace kvscope::tutorial;

struct Named {
  std::string name, path;
  ModelConfig config;
};

const int kv_bits = 16;  // K and V in bf16, as the checkpoints store them

// 1. One token: K and V, at every layer, for every KV head.
static void bytes_per_token(const std::vector<Named>& models) {
  std::printf("KV bytes per token = 2 (K and V) x layers x KV heads x head_dim x bytes per element\n");
  for (const Named& m : models) {
    const ModelConfig& c = m.config;
    const int64_t per_token = kv_bytes_per_token(c, kv_bits);  // 2 * num_layers * num_kv_heads * head_dim * kv_bits / 8
    std::printf("  %-10s  2 x %d layers x %d KV heads x %d dims x %d bytes = %s bytes = %s KiB   (%s)\n",
                m.name.c_str(), c.num_layers, c.num_kv_heads, c.head_dim, kv_bits / 8, commas(per_token).c_str(),
                commas(per_token / 1024).c_str(), m.path.c_str());
  }
}

// 2. One sequence: the cache grows by that much with every token, prompt and answer alike.
// Up to the longest context the configs allow (max_position_embeddings).
static void one_sequence(const std::vector<Named>& models) {
  const int64_t longest = models[1].config.max_position_embeddings;
  std::printf("\nThe cache of one sequence (16-bit K/V, 1 GB = 1e9 bytes), up to max_position_embeddings = %s:\n",
              commas(longest).c_str());
  std::printf("  %9s  %12s  %12s\n", "tokens", models[0].name.c_str(), models[1].name.c_str());
  for (int64_t tokens : {int64_t(1024), int64_t(4096), int64_t(16384), longest}) {
    std::printf("  %9s", commas(tokens).c_str());
    for (const Named& m : models) std::printf("  %12s", table_bytes(double(tokens * kv_bytes_per_token(m.config, kv_bits))).c_str());
    std::printf("\n");
  }
}

// 3. Against the weights: past this many tokens one sequence's cache is bigger than the model.
static void against_the_weights(const std::vector<Named>& models) {
  std::printf("\nThe weights at 16 bits, and the context at which one sequence's cache outweighs them:\n");
  for (const Named& m : models) {
    const int64_t weights = weight_bytes(m.config, 16);
    const int64_t crossover = weights / kv_bytes_per_token(m.config, kv_bits) + 1;
    std::printf("  %-10s  %s parameters = %s; the cache is bigger from %s tokens on\n", m.name.c_str(),
                commas(m.config.parameter_count()).c_str(), table_bytes(double(weights)).c_str(), commas(crossover).c_str());
  }
}

// 4. A 24 GB GPU: free = GPU - weights - reserve; tokens = free / KV bytes per token.
static void on_a_24gb_gpu(const std::vector<Named>& models) {
  MemoryBudget budget;
  budget.gpu_gb = 24;
  budget.weight_bits = 4;
  budget.kv_bits = kv_bits;
  budget.reserve_gb = 1;
  budget.block_size = 16;
  std::printf("\nA %g GB GPU, %d-bit weights, %d-bit K/V, %g GB held back (CUDA context, activations):\n", budget.gpu_gb,
              budget.weight_bits, budget.kv_bits, budget.reserve_gb);
  std::vector<KvFit> fits;
  for (const Named& m : models) fits.push_back(fit_kv_cache(m.config, budget));
  auto row = [&](const std::string& label, auto value) {
    std::printf("  %-26s", label.c_str());
    for (const KvFit& f : fits) std::printf("  %12s", value(f).c_str());
    std::printf("\n");
  };
  std::printf("  %-26s  %12s  %12s\n", "", models[0].name.c_str(), models[1].name.c_str());
  row("GPU memory", [](const KvFit& f) { return table_bytes(f.gpu_bytes); });
  row("- weights at " + std::to_string(budget.weight_bits) + " bits",
      [](const KvFit& f) { return table_bytes(f.weight_bytes); });
  row("- reserve", [](const KvFit& f) { return table_bytes(f.reserve_bytes); });
  row("= free for the KV cache", [](const KvFit& f) { return table_bytes(f.free_bytes); });
  row("/ KV bytes per token", [](const KvFit& f) { return commas(f.kv_bytes_per_token); });
  row("= tokens of cache", [](const KvFit& f) { return commas(f.tokens); });
  row("= blocks of " + std::to_string(budget.block_size) + " tokens", [](const KvFit& f) { return commas(f.blocks); });

  const KvFit& big = fits[1];
  std::printf("\n%s on a %g GB GPU: %s tokens of cache in all, for every sequence it serves together.\n",
              models[1].name.c_str(), budget.gpu_gb, commas(big.tokens).c_str());
}

static void chapter() {
  std::vector<Named> models = {{"Qwen3-0.6B", "assets/configs/qwen3-0.6b-config.json", {}},
                               {"Qwen3-32B", "assets/configs/qwen3-32b-config.json", {}}};
  for (Named& m : models) m.config = load_config_file(repo_path(m.path));
  bytes_per_token(models);
  one_sequence(models);
  against_the_weights(models);
  on_a_24gb_gpu(models);
}

int main(int argc, char** argv) { return run_chapter(argc, argv, chapter); }
