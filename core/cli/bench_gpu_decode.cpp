// kvscope bench gpu-decode: end-to-end decode speed on a CUDA GPU.
//
// A Qwen3-0.6B-shaped model with random weights (f32 and bf16) runs through the
// engine on the CUDA backend, exactly as `kvscope generate --device cuda` does:
// a prompt is prefilled, then tokens are decoded one at a time, each step
// uploading its slot mapping and block table and copying the logits back.
// Decode reads every weight once per token, so the limit is the card's peak
// bandwidth divided by the bytes of the weight matrices (plus the K/V read).
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "model/config.h"
#include "util/error.h"
#ifdef KVSCOPE_HAVE_CUDA
#include "cli/bench_gpu_util.h"
#include "cuda_backend.h"
#include "engine/engine.h"
#include "model/weights.h"
#endif

namespace kvscope::cli {

namespace {

struct GpuDecodeBenchArgs {
  std::string config = std::string(KVSCOPE_ASSETS_DIR) + "/configs/qwen3-0.6b-config.json";
  std::vector<std::string> weights = {"f32", "bf16"};
  int prompt_tokens = 512;
  int decode_tokens = 128;
};

#ifdef KVSCOPE_HAVE_CUDA
void run_gpu_decode_bench(const GpuDecodeBenchArgs& a) {
  const cuda::GpuInfo gpu = bench_gpu("bench gpu-decode");
  const ModelConfig config = load_config_file(a.config);
  std::printf("kvscope bench gpu-decode: %s (%.2fB parameters), random weights, through the engine on --device cuda\n",
              a.config.c_str(), double(config.parameter_count()) / 1e9);
  print_gpu_machine(gpu);
  std::printf("\n| weights | prefill tok/s (%d-token prompt) | decode tok/s | GB read per token | bandwidth limit tok/s | decode / limit |\n",
              a.prompt_tokens);
  std::printf("|---|---|---|---|---|---|\n");

  const int total = a.prompt_tokens + a.decode_tokens;
  for (const std::string& wf : a.weights) {
    std::fprintf(stderr, "building a random %s model...\n", wf.c_str());
    const Model model = random_model(config, wf == "bf16" ? DType::BF16 : DType::F32, /*seed=*/1);
    EngineConfig ec;
    ec.block_size = 16;
    ec.num_blocks = (total + ec.block_size - 1) / ec.block_size;
    ec.backend = cuda::make_backend;
    Engine engine(model, ec);
    const int seq = engine.add_sequence();
    std::vector<int> prompt(static_cast<size_t>(a.prompt_tokens));
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int((i * 7919) % size_t(config.vocab_size));

    std::fprintf(stderr, "%s: prefill %d tokens, decode %d tokens...\n", wf.c_str(), a.prompt_tokens, a.decode_tokens);
    double t0 = now_seconds();
    const float* logits = engine.prefill(seq, prompt);
    const double prefill = now_seconds() - t0;
    int token = 1;
    t0 = now_seconds();
    for (int i = 0; i < a.decode_tokens; ++i) {
      token = int((token + 1 + (logits[i % config.vocab_size] > 0)) % config.vocab_size);  // depends on the logits
      logits = engine.decode(seq, token);
    }
    const double decode = now_seconds() - t0;
    const double kv_bytes = 2.0 * config.num_layers * config.kv_dim() * 4 * (a.prompt_tokens + a.decode_tokens / 2.0);
    const double bytes = double(model.weights.matrix_bytes()) + kv_bytes;
    const double tps = a.decode_tokens / decode, limit = gpu.peak_bandwidth() / bytes;
    std::printf("| %s | %.0f | %.1f | %.3f | %.0f | %.0f%% |\n", wf.c_str(), a.prompt_tokens / prefill, tps, bytes / 1e9,
                limit, 100 * tps / limit);
  }
  std::printf("\nGB read per token = the weight matrices (lm_head once) + the K/V of the average context. Each step is\n"
              "about 15 kernel launches per layer plus small host<->device copies, launched one by one (no CUDA graphs):\n"
              "for a model this small, launch gaps rather than bandwidth can set the pace.\n");
}
#endif

}  // namespace

void add_bench_gpu_decode_command(CLI::App& bench) {
  auto args = std::make_shared<GpuDecodeBenchArgs>();
  CLI::App* cmd = bench.add_subcommand("gpu-decode", "CUDA: end-to-end decode tokens/s of a Qwen3-0.6B-shaped random model");
  cmd->add_option("--config", args->config, "config.json giving the model shape")->capture_default_str();
  cmd->add_option("--weights", args->weights, "Weight formats to run (f32, bf16)")
      ->capture_default_str()
      ->check(CLI::IsMember({"f32", "bf16"}));
  cmd->add_option("--prompt-tokens", args->prompt_tokens, "Prompt length")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--decode-tokens", args->decode_tokens, "Tokens decoded")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->callback([args] {
#ifdef KVSCOPE_HAVE_CUDA
    run_gpu_decode_bench(*args);
#else
    throw Error("bench gpu-decode: this build has no CUDA backend (no CUDA toolkit was found at configure time)");
#endif
  });
}

}  // namespace kvscope::cli
