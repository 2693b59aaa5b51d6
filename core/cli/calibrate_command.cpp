// kvscope calibrate: the offline half of TriAttention.
//
//   kvscope calibrate --model DIR --text FILE --out FILE [--max-tokens N] [--chunk N]
//
// Tokenizes the text with the model's tokenizer, runs the model over it in chunks
// (a fresh sequence per chunk), averages the pre-RoPE queries of every token per
// layer, query head and frequency band (evict/triattention_calibration.h), and writes the
// calibration file that the TriAttention policy reads. Prints a summary: per
// layer, how concentrated the query directions are (mean |qbar_f| / m_f: 1 when
// every query of a head points the same way in a band, near 0 when they cancel),
// and the ratio that queries pointing every way would give over as many tokens.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "evict/triattention_calibration.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/file.h"
#include "util/format.h"

namespace kvscope::cli {

namespace {

struct CalibrateArgs {
  std::string model_dir;
  std::string text;
  std::string out;
  int64_t max_tokens = 0;  // 0 = the whole text
  int chunk = 0;           // 0 = min(1024, max_position_embeddings)
  int threads = 0;
};

// Per layer, how concentrated the query directions are: each head's mean over its
// bands of |qbar_f| / m_f, then the layer's mean, least and most concentrated head.
void print_concentration(const TriCalibration& cal) {
  std::printf("How concentrated the pre-RoPE query directions are, per layer:\n");
  std::printf("ratio = |qbar_f| / m_f (1: all queries of a head point one way in band f; 0: they cancel)\n\n");
  std::printf("| layer | mean ratio | least concentrated head | most concentrated head |\n");
  std::printf("|---|---|---|---|\n");
  for (int l = 0; l < cal.num_layers; ++l) {
    double layer_sum = 0, lo = 1e30, hi = -1e30;
    for (int h = 0; h < cal.num_heads; ++h) {
      double head_sum = 0;
      int counted = 0;
      for (int f = 0; f < cal.bands(); ++f) {
        const size_t i = cal.index(l, h, f);
        if (!(cal.q_abs_mean[i] > 0)) continue;
        head_sum += std::hypot(double(cal.qbar_re[i]), double(cal.qbar_im[i])) / cal.q_abs_mean[i];
        ++counted;
      }
      const double head_mean = counted ? head_sum / counted : 0.0;
      layer_sum += head_mean;
      lo = std::min(lo, head_mean);
      hi = std::max(hi, head_mean);
    }
    std::printf("| %d | %.3f | %.3f | %.3f |\n", l, layer_sum / cal.num_heads, lo, hi);
  }
  std::printf("\nQueries pointing every way at random would give about sqrt(pi / (4 n)) = %.3f over these n = %lld "
              "%s:\nratios near it are noise, not a direction.\n",
              tri_noise_ratio(cal.tokens), (long long)cal.tokens, cal.tokens == 1 ? "token" : "tokens");
}

void run_calibrate(const CalibrateArgs& a) {
  set_threads(a.threads);
  check_outputs_apart({{"--out", a.out}}, {{"--text", a.text}}, a.model_dir);
  check_writable(a.out);  // before the long run, not after it

  const std::string text = read_text_file(a.text);  // names the file if missing or not text
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) throw file_error(a.text, "the text is empty");
  check_model_present(a.model_dir);
  const Tokenizer tokenizer = Tokenizer::load(a.model_dir + "/tokenizer.json");  // before the weights: it fails fast
  const std::vector<int> ids = tokenizer.encode(text);
  if (ids.empty()) throw file_error(a.text, "the text gives no tokens");
  Model model = load_model(a.model_dir);
  print_warnings(model.warnings);
  std::vector<int> tokens = tokenizer.with_special_tokens(ids);  // as the model reads a prompt
  const size_t in_text = tokens.size();
  if (a.max_tokens > 0 && tokens.size() > size_t(a.max_tokens)) tokens.resize(size_t(a.max_tokens));

  CalibrateOptions options;
  options.chunk = a.chunk;
  const double t0 = now_seconds();
  const bool bar = isatty(STDERR_FILENO);  // a progress line for people, not for logs (as eval)
  options.progress = [&](int64_t done, int64_t total) {
    if (!bar) return;
    const double dt = now_seconds() - t0;
    std::fprintf(stderr, "\rcalibrate: %lld / %lld tokens (%.0f%%), %.1f tokens/s   ", (long long)done,
                 (long long)total, 100.0 * double(done) / double(total), dt > 0 ? double(done) / dt : 0.0);
    if (done == total) std::fputc('\n', stderr);
    std::fflush(stderr);
  };
  TriCalibration cal = calibrate(model, tokens, options);
  cal.model = a.model_dir;
  cal.text = a.text;
  cal.save(a.out);

  const ModelConfig& c = model.config;
  std::printf("kvscope calibrate: %s on %s\n", shown_path(a.model_dir).c_str(), shown_path(a.text).c_str());
  std::printf("tokens used: %lld of %zu in the text, in chunks of up to %d (a fresh sequence each)\n",
              (long long)cal.tokens, in_text, cal.chunk);
  std::printf("wrote %s: %s x %s x %s\n\n", a.out.c_str(), plural(c.num_layers, "layer").c_str(),
              plural(c.num_heads, "query head").c_str(), plural(cal.bands(), "band").c_str());
  print_concentration(cal);
}

}  // namespace

void add_calibrate_command(CLI::App& app) {
  auto args = std::make_shared<CalibrateArgs>();
  CLI::App* cmd = app.add_subcommand("calibrate", "TriAttention calibration: per-band query centres of a model on a text");
  cmd->add_option("--model", args->model_dir, "Hugging Face model folder (config.json, *.safetensors, tokenizer.json)")
      ->required();
  cmd->add_option("--text", args->text, "Text file to calibrate on (UTF-8)")->required()->check(kFileName);
  cmd->add_option("--out", args->out, "Calibration file to write (JSON)")->required()->check(kFileName);
  cmd->add_option("--max-tokens", args->max_tokens, "Use at most the first N tokens of the text (0 = all)")
      ->capture_default_str()
      ->check(kNonNegative);
  cmd->add_option("--chunk", args->chunk,
                  "Tokens per fresh sequence (0 = min(1024, max_position_embeddings)); the longest context seen")
      ->capture_default_str()
      ->check(kNonNegative);
  cmd->add_option("--threads", args->threads, "CPU threads (0 = OMP_NUM_THREADS if set, else all cores)")
      ->capture_default_str()
      ->check(kNonNegative);
  cmd->callback([args] { run_calibrate(*args); });
}

}  // namespace kvscope::cli
