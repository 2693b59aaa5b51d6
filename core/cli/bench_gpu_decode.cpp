// kvscope bench gpu-decode: end-to-end decode speed on a CUDA GPU.
//
// A Qwen3-0.6B-shaped model with random weights (f32 and bf16) runs through the
// engine on the CUDA backend, exactly as `kvscope generate --device cuda` does:
// a prompt is prefilled, then tokens are decoded one at a time, each step
// uploading its slot mapping and block table and copying the logits back.
// Decode reads every weight once per token, so the limit is the card's peak
// bandwidth divided by the bytes of the weights a step reads (plus the K/V read).
//
// With --sequences 1,8,32 the same is done for that many sequences decoding
// together, one batched step (Engine::step_batch, as the server runs) per token
// of each: the decode GEMV reads the weights once for every 8 of them
// (cuda::kMatvecVectors), so the limit in tokens/s grows with the batch up to 8
// sequences and then grows only as far as fewer passes per sequence allow.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "cli/commands.h"
#include "model/config.h"
#include "util/error.h"
#include "util/format.h"
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
  std::vector<int> sequences = {1, 8, 32};
  int prompt_tokens = 512;
  int decode_tokens = 128;
};

// Prompt + decoded tokens against the model's positions, in 64 bits: said before
// the GPU is looked for, and in builds without CUDA too.
void check_positions(const GpuDecodeBenchArgs& a) {
  const int64_t total = int64_t(a.prompt_tokens) + a.decode_tokens;
  const int most = load_config_file(a.config).max_position_embeddings;
  if (total > most)
    throw Error("bench gpu-decode: --prompt-tokens " + std::to_string(a.prompt_tokens) + " + --decode-tokens " +
                std::to_string(a.decode_tokens) + " exceed the model's max_position_embeddings (" +
                std::to_string(most) + ")");
}

#ifdef KVSCOPE_HAVE_CUDA
// Passes of the decode GEMV over each weight matrix in a step of n sequences.
int matvec_passes(int n) { return (n + cuda::kMatvecVectors - 1) / cuda::kMatvecVectors; }

// A decode step's kernel launches per layer at n sequences: 7 GEMVs (q, k, v, o,
// gate, up, down) a pass, and 12 others (4 RMSNorms: input, q, k, post-attention;
// RoPE on q and on k; the K/V write; 2 for attention; SwiGLU; 2 residual adds).
int launches_per_layer(int n) { return 7 * matvec_passes(n) + 12; }

struct DecodeRun {
  double prefill_seconds = 0, decode_seconds = 0;
};

// n sequences of the same prompt through one engine: each prefilled on its own,
// then decode_tokens steps that decode all n together (one step_batch each; n = 1
// is the plain decode() that generate uses).
DecodeRun run_decode(const Model& model, const GpuDecodeBenchArgs& a, int n) {
  const ModelConfig& config = model.config;
  const int total = a.prompt_tokens + a.decode_tokens;
  EngineConfig ec;
  ec.block_size = 16;
  // + the warm-up's two sequences: the prompt and 2 tokens, and a short prompt (16 at most) and 1.
  const int warm_up_blocks =
      int(blocks_for_tokens(a.prompt_tokens + 2, ec.block_size) + blocks_for_tokens(16 + 1, ec.block_size));
  ec.num_blocks = n * int(blocks_for_tokens(total, ec.block_size)) + warm_up_blocks;
  ec.backend = cuda::make_backend;
  Engine engine(model, ec);
  std::vector<int> prompt(static_cast<size_t>(a.prompt_tokens)), seqs;
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int((i * 7919) % size_t(config.vocab_size));

  // Warm-up, untimed: the CUDA runtime loads each kernel at its first launch, and
  // cuBLAS picks (and loads) its GEMM per shape, so two throwaway sequences take a
  // prefill of the timed prompt's length, a short one, a decode step and a batched step.
  const std::vector<int> short_prompt(prompt.begin(), prompt.begin() + std::min(a.prompt_tokens, 16));
  const int w0 = engine.add_sequence(), w1 = engine.add_sequence();
  engine.prefill(w0, prompt);
  engine.prefill(w1, short_prompt);
  engine.decode(w0, 1);
  engine.step_batch({BatchItem{w0, {2}}, BatchItem{w1, {2}}});
  engine.release_sequence(w0);
  engine.release_sequence(w1);

  DecodeRun r;
  const float* logits = nullptr;
  double t0 = now_seconds();
  for (int i = 0; i < n; ++i) {
    seqs.push_back(engine.add_sequence());
    logits = engine.prefill(seqs.back(), prompt);
  }
  r.prefill_seconds = now_seconds() - t0;
  int token = 1;
  t0 = now_seconds();
  for (int step = 0; step < a.decode_tokens; ++step) {
    token = int((token + 1 + (logits[step % config.vocab_size] > 0)) % config.vocab_size);  // depends on the logits
    if (n == 1) {
      logits = engine.decode(seqs[0], token);
    } else {
      std::vector<BatchItem> items;
      for (int s : seqs) items.push_back(BatchItem{s, {token}});
      logits = engine.step_batch(std::move(items));
    }
  }
  r.decode_seconds = now_seconds() - t0;
  return r;
}

void run_gpu_decode_bench(const GpuDecodeBenchArgs& a) {
  check_distinct(a.weights, "--weights");
  check_distinct(a.sequences, "--sequences");
  const cuda::GpuInfo gpu = bench_gpu("bench gpu-decode");
  const ModelConfig config = load_config_file(a.config);
  // The random weights are built on the host first: too big for it is said before the table.
  for (const std::string& w : a.weights) check_random_model_fits(config, w == "bf16" ? DType::BF16 : DType::F32);
  std::printf("kvscope bench gpu-decode: %s (%s parameters), random weights, through the engine on --device cuda\n",
              shown_path(a.config).c_str(), params_text(config.parameter_count()).c_str());
  print_gpu_machine(gpu);
  std::printf("\n| weights | sequences | prefill tok/s (%d-token prompts) | decode tok/s (all sequences) | GB read per step "
              "| bandwidth limit tok/s | decode / limit |\n",
              a.prompt_tokens);
  std::printf("|---|---|---|---|---|---|---|\n");

  for (const std::string& wf : a.weights) {
    std::fprintf(stderr, "building a random %s model...\n", wf.c_str());
    const Model model = random_model(config, wf == "bf16" ? DType::BF16 : DType::F32, /*seed=*/1);
    for (int n : a.sequences) {
      std::fprintf(stderr, "%s, %d sequences: prefill %d tokens each, decode %d tokens each...\n", wf.c_str(), n,
                   a.prompt_tokens, a.decode_tokens);
      const DecodeRun r = run_decode(model, a, n);
      // Per step: every weight matrix once a GEMV pass, and each sequence's K/V at its average context.
      const double kv_bytes = 2.0 * config.num_layers * config.kv_dim() * 4 * (a.prompt_tokens + a.decode_tokens / 2.0);
      const double bytes = double(model.weights.decode_bytes()) * matvec_passes(n) + n * kv_bytes;
      const double tps = double(n) * a.decode_tokens / r.decode_seconds, limit = n * gpu.peak_bandwidth() / bytes;
      const std::string limit_text = limit > 0 ? std::to_string(std::lround(limit)) : "n/a";
      std::printf("| %s | %d | %.0f | %.1f | %.3f | %s | %s |\n", wf.c_str(), n,
                  double(n) * a.prompt_tokens / r.prefill_seconds, tps, bytes / 1e9, limit_text.c_str(),
                  percent_of(tps, limit).c_str());
    }
  }
  const int most = *std::max_element(a.sequences.begin(), a.sequences.end());
  std::printf("\nEach row is timed once, by the wall clock: its prefills one after another, then %s (a token for\n"
              "every sequence in each), host copies and the logits' download included. An untimed warm-up runs\n"
              "first: a prefill of %d tokens, a short one, a decode step and a batched step.\n",
              plural(a.decode_tokens, "decode step").c_str(), a.prompt_tokens);
  const std::string passes = matvec_passes(most) == 1 ? "1 pass" : std::to_string(matvec_passes(most)) + " passes";
  const std::string sequences = plural(most, "sequence");
  std::printf("\nGB read per step = the weight matrices (lm_head once; of an untied embedding, one row) once for\n"
              "every %d sequences (one pass of the decode GEMV serves %d: %s at %s, each counted\n"
              "as read from memory, though a layer's matrix may come from L2 the second time)\n"
              "+ each sequence's K/V at the average context.\n"
              "A step launches %d kernels per layer at 1 sequence, %d at %s (the 7 GEMVs once a pass; attention\n"
              "is 2 launches for all the sequences together), and makes small host-to-device copies, one by one\n"
              "(no CUDA graphs): for a model this small, launch gaps rather than bandwidth can set the pace. It also\n"
              "copies every sequence's logits to the host, where sampling and the policies run: %.1f MB a step at\n"
              "%s, not in the limit.\n",
              cuda::kMatvecVectors, cuda::kMatvecVectors, passes.c_str(), sequences.c_str(), launches_per_layer(1),
              launches_per_layer(most), sequences.c_str(), double(most) * config.vocab_size * sizeof(float) / 1e6,
              sequences.c_str());
}
#endif

}  // namespace

void add_bench_gpu_decode_command(CLI::App& bench) {
  auto args = std::make_shared<GpuDecodeBenchArgs>();
  CLI::App* cmd = bench.add_subcommand("gpu-decode", "CUDA: end-to-end decode tokens/s of a Qwen3-0.6B-shaped random model");
  cmd->add_option("--config", args->config, "config.json giving the model shape")
      ->capture_default_str()
      ->check(kFileName);
  cmd->add_option("--weights", args->weights, "Weight formats to run (f32,bf16)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::IsMember({"f32", "bf16"}));
  cmd->add_option("--sequences", args->sequences, "Sequences decoding together, one table row each (1,8,32)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(number_check(1, false, 1024, "1..1024"));
  cmd->add_option("--prompt-tokens", args->prompt_tokens, "Prompt length")->capture_default_str()->check(kPositive);
  cmd->add_option("--decode-tokens", args->decode_tokens, "Tokens decoded")->capture_default_str()->check(kPositive);
  cmd->callback([args] {
    check_positions(*args);
#ifdef KVSCOPE_HAVE_CUDA
    run_gpu_decode_bench(*args);
#else
    throw Error("bench gpu-decode: this build has no CUDA backend (no CUDA toolkit was found at configure time)");
#endif
  });
}

}  // namespace kvscope::cli
