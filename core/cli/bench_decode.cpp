// kvscope bench decode: how fast the CPU decoder runs on a real model shape, and how
// close decode gets to the limit that memory bandwidth sets.
//
// Decode reads every weight once per token and does one multiply-add per weight,
// so its ceiling is (DRAM read bandwidth) / (bytes of weights). The benchmark
// measures that bandwidth itself (a streaming sum over 1 GiB), builds a model of
// the config's shape with random weights in memory (no checkpoint needed), and
// prints one table row per weight format and thread count.
#include <omp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "cli/bench_util.h"
#include "cli/commands.h"
#include "model/qwen3.h"
#include "model/weights.h"
#include "util/bandwidth.h"
#include "util/error.h"
#include "util/format.h"

namespace kvscope::cli {

namespace {

struct BenchArgs {
  std::string config = std::string(KVSCOPE_ASSETS_DIR) + "/configs/qwen3-0.6b-config.json";
  int prompt_tokens = 512;
  int decode_tokens = 32;
  std::vector<int> threads = {1, 2};
  std::vector<std::string> weights = {"f32", "bf16"};
  double bandwidth_gib = 1.0;
};

struct Row {
  std::string weights;
  int threads;
  double prefill_tps, decode_tps, bytes_per_token, limit_tps, peak_bytes;
};

// The run fits the model's positions, and the bandwidth probe's array fits the
// memory (at least 1 MB, at most half: the model needs the rest); a probe the L3
// cache could hold is a warning.
void check_bench_args(const BenchArgs& a, const ModelConfig& config, int decode_context) {
  const int64_t longest = std::max<int64_t>(a.prompt_tokens, decode_context + int64_t(a.decode_tokens));  // no int overflow
  if (longest > config.max_position_embeddings)
    throw Error("bench decode: " + std::to_string(longest) + " tokens (--prompt-tokens, or 16 + --decode-tokens) " +
                "exceed the model's max_position_embeddings (" + std::to_string(config.max_position_embeddings) +
                ")");
  const double ram_gib = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE)) / double(1u << 30);
  if (!(a.bandwidth_gib >= 0.001 && a.bandwidth_gib <= ram_gib / 2)) {
    char message[160];
    std::snprintf(message, sizeof message,
                  "--bandwidth-gib must be from 0.001 to %.1f (half of this machine's memory), got %g", ram_gib / 2,
                  a.bandwidth_gib);
    throw Error(message);
  }
  // A probe that fits in the last-level cache reads the cache, not DRAM, and every limit
  // below would be too high. (glibc reports the whole chip's L3; 0 or -1 when unknown.)
  const long l3_bytes = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (l3_bytes > 0 && a.bandwidth_gib * double(1u << 30) < 2.0 * double(l3_bytes)) {
    char message[200];
    std::snprintf(message, sizeof message,
                  "--bandwidth-gib %g is less than twice the L3 cache this system reports (%.0f MiB): the probe "
                  "reads the cache, not DRAM, and the limits below are too high",
                  a.bandwidth_gib, double(l3_bytes) / double(1u << 20));
    print_warnings({message});
  }
}

// One prefill of the first n tokens of `prompt` into a fresh cache, in tokens/s.
double prefill_tokens_per_second(const Model& model, const std::vector<int>& prompt, int n) {
  PagedKvCache cache((n + 15) / 16, 16, MemoryStrategy::HolesOnly);
  KvStorage kv(model.config, cache.num_blocks(), 16);
  RunState s;
  const double t0 = now_seconds();
  forward(model, cache, kv, cache.add_sequence(), s, prompt.data(), n);
  return n / (now_seconds() - t0);
}

// n decode steps after a prefill of `context` tokens (not timed), in tokens/s. Each
// token depends on the last logits, so no step can be skipped or reordered.
double decode_tokens_per_second(const Model& model, const std::vector<int>& prompt, int context, int n) {
  const int vocab = model.config.vocab_size;
  PagedKvCache cache((context + n + 15) / 16, 16, MemoryStrategy::HolesOnly);
  KvStorage kv(model.config, cache.num_blocks(), 16);
  const int seq = cache.add_sequence();
  RunState s;
  const float* logits = forward(model, cache, kv, seq, s, prompt.data(), context);
  int token = 0;
  const double t0 = now_seconds();
  for (int i = 0; i < n; ++i) {
    token = int((token + 1 + (logits[i % vocab] > 0)) % vocab);
    logits = forward(model, cache, kv, seq, s, &token, 1);
  }
  return n / (now_seconds() - t0);
}

// The table, and what its limit means. kv_bytes: the K/V bytes of one decode step at
// the mean context, counted in "GB read per token" but not in the limit.
void print_decode_table(const std::vector<Row>& rows, int prompt_tokens, double kv_bytes, int context_from,
                        int context_to) {
  std::printf("\n| weights | threads | prefill tok/s (%d-token prompt) | decode tok/s | GB read per token | bandwidth limit tok/s | decode / limit | peak memory |\n",
              prompt_tokens);
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows)
    std::printf("| %s | %d | %.1f | %.2f | %.3f | %.2f | %.0f%% | %.2f GB |\n", r.weights.c_str(), r.threads, r.prefill_tps,
                r.decode_tps, r.bytes_per_token / 1e9, r.limit_tps, 100 * r.decode_tps / r.limit_tps, r.peak_bytes / 1e9);
  // What the K/V cache adds to the weights' bytes, for each weight format (bf16 doubles it).
  std::string kv_share;
  for (size_t i = 0; i < rows.size(); ++i)
    if (i == 0 || rows[i].weights != rows[i - 1].weights)
      kv_share += (i ? ", " : "") + percent(kv_bytes / (rows[i].bytes_per_token - kv_bytes)) + " (" +
                  rows[i].weights + ")";
  std::printf("\nlimit = DRAM read bandwidth / bytes of the weights a decode step reads. Decode runs at a %d-%d token\n"
              "context, where the K/V cache adds %s to the bytes read per token\n"
              "(in the GB column, not in the limit).\n"
              "Timed once each, by the wall clock: prefill, the whole prompt into a fresh cache; decode, all %d steps\n"
              "after an untimed prefill of %d tokens.\n",
              context_from, context_to, kv_share.c_str(), context_to - context_from, context_from);
}

void run_bench(const BenchArgs& a) {
  check_distinct(a.threads, "--threads");
  check_threads(*std::max_element(a.threads.begin(), a.threads.end()));
  check_distinct(a.weights, "--weights");
  const ModelConfig config = load_config_file(a.config);
  const int decode_context = 16;  // decode starts after a short prompt (below)
  check_bench_args(a, config, decode_context);
  for (const std::string& w : a.weights) check_random_model_fits(config, w == "f32" ? DType::F32 : DType::BF16);

  std::printf("kvscope bench decode: %s (%s parameters), random weights\n", shown_path(a.config).c_str(),
              params_text(config.parameter_count()).c_str());
  std::printf("machine: %s, %d hardware threads\n", cpu_name().c_str(), omp_get_num_procs());

  // 1. The ceiling: DRAM read bandwidth at each thread count.
  std::vector<double> bandwidth;
  for (int t : a.threads) {
    bandwidth.push_back(measure_read_bandwidth_gbs(size_t(a.bandwidth_gib * (1u << 30)), t, 5));
    const bool gib = a.bandwidth_gib >= 0.1;  // "0.0 GiB" hides a 1 MiB probe
    const double size = gib ? a.bandwidth_gib : a.bandwidth_gib * 1024;
    const bool tenths = std::fabs(size * 10 - std::round(size * 10)) < 1e-9;  // 1.0, not 1; 0.25, not 0.2
    std::printf("DRAM read bandwidth, %s: %.1f GB/s (streaming sum over %s %s, best of 5)\n",
                plural(t, "thread").c_str(), bandwidth.back(), fmt(tenths ? "%.1f" : "%.3g", size).c_str(),
                gib ? "GiB" : "MiB");
  }
  // More threads reading slower than fewer: something else was running on these cores,
  // and every limit (and "decode / limit") below is off by as much.
  for (size_t i = 1; i < bandwidth.size(); ++i)
    if (a.threads[i] > a.threads[i - 1] && bandwidth[i] < 0.9 * bandwidth[i - 1])
      std::printf("note: %d threads read slower than %d: the cores were busy with something else, so the limits "
                  "below are too low; rerun on an idle machine\n",
                  a.threads[i], a.threads[i - 1]);

  // 2. Prefill and decode for each weight format and thread count.
  // Decode starts after a short prompt (decode_context), so the weights dominate the bytes
  // read, not the K/V cache:
  // bytes of K/V one decode step reads at the mean context (f32 keys and values, all layers)
  const double kv_bytes = 2.0 * config.num_layers * config.kv_dim() * 4 * (decode_context + a.decode_tokens / 2.0);
  std::vector<Row> rows;
  for (const std::string& wf : a.weights) {
    const DType dtype = wf == "f32" ? DType::F32 : DType::BF16;
    reset_peak_memory();
    std::fprintf(stderr, "building a random %s model...\n", wf.c_str());
    Model model = random_model(config, dtype, /*seed=*/1);
    std::vector<int> prompt(size_t(std::max(a.prompt_tokens, decode_context)));
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int((i * 7919) % size_t(config.vocab_size));

    for (size_t ti = 0; ti < a.threads.size(); ++ti) {
      omp_set_num_threads(a.threads[ti]);
      std::fprintf(stderr, "%s, %d thread(s): prefill %d tokens, decode %d tokens...\n", wf.c_str(), a.threads[ti],
                   a.prompt_tokens, a.decode_tokens);
      Row r{wf, a.threads[ti], 0, 0, 0, 0, 0};
      r.prefill_tps = prefill_tokens_per_second(model, prompt, a.prompt_tokens);
      r.decode_tps = decode_tokens_per_second(model, prompt, decode_context, a.decode_tokens);
      // Bytes one decode step reads: the weights (decode_bytes says which) and the K/V cache.
      r.bytes_per_token = double(model.weights.decode_bytes()) + kv_bytes;
      r.limit_tps = bandwidth[ti] * 1e9 / double(model.weights.decode_bytes());
      rows.push_back(r);
    }
    const double peak = peak_memory_bytes();
    for (Row& r : rows)
      if (r.weights == wf) r.peak_bytes = peak;
  }

  print_decode_table(rows, a.prompt_tokens, kv_bytes, decode_context, decode_context + a.decode_tokens);
}

}  // namespace

void add_bench_decode_command(CLI::App& bench) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* cmd = bench.add_subcommand("decode", "Prefill and decode speed on a real model shape with random weights");
  cmd->add_option("--config", args->config, "config.json giving the model shape")
      ->capture_default_str()
      ->check(kFileName);
  cmd->add_option("--prompt-tokens", args->prompt_tokens, "Prompt length for the prefill measurement")
      ->capture_default_str()
      ->check(kPositive);
  cmd->add_option("--decode-tokens", args->decode_tokens, "Decode steps to time")->capture_default_str()->check(kPositive);
  cmd->add_option("--threads", args->threads, "Thread counts to measure")
      ->delimiter(',')
      ->capture_default_str()
      ->check(kPositive);
  cmd->add_option("--weights", args->weights, "Weight formats to measure")->delimiter(',')
      ->capture_default_str()
      ->check(CLI::IsMember({"f32", "bf16"}));
  cmd->add_option("--bandwidth-gib", args->bandwidth_gib, "Size of the bandwidth probe's array")->capture_default_str();
  cmd->callback([args] { run_bench(*args); });
}

}  // namespace kvscope::cli
