// kvscope heads: what each attention head of a model looks at, on held-out text.
//
//   kvscope heads [--model DIR] [--text FILE] [--length 512] [--from length/2] [--windows 4]
//
// Prints, per layer and query head, the attention that goes to the first tokens
// (sinks), to the newest ones (local) and, of the attention to the middle keys
// (sinks to from - recent - 1: neither for any query measured), the share taken by
// their top 10% (heavy hitters): the structure that StreamingLLM, H2O and SnapKV bet
// on. The definitions are in core/eval/heads.h. A head is labelled, in this order,
// "sink" or "local" when they take at least half of its attention, "heavy hitters"
// when the middle keys' top 10% take at least half of theirs, else "spread".
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "eval/heads.h"
#include "eval/windows.h"
#include "model/config.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/format.h"

namespace kvscope::cli {

namespace {

struct HeadsArgs {
  std::string model_dir = bundled_model_dir();
  std::string text;  // default: held_out_text()
  int length = 512;
  int windows = 4;
  int threads = 0;
  HeadSettings settings;
};

// "the first 4 tokens", "the first token".
std::string tokens(int n) { return n == 1 ? "token" : std::to_string(n) + " tokens"; }

const char* role(const HeadStats& h) {
  if (h.sink >= 0.5) return "sink";
  if (h.local >= 0.5) return "local";
  if (h.heavy >= 0.5) return "heavy hitters";
  return "spread";
}

void run_heads(const HeadsArgs& a) {
  set_threads(a.threads);
  check_head_settings(a.settings, a.length);  // before the model loads
  check_model_present(a.model_dir);
  const std::string text = held_out_text(a.text, a.model_dir);
  const int positions = load_config_file(a.model_dir + "/config.json").max_position_embeddings;
  if (a.length > positions)  // said before the model runs, not from inside its first window
    throw Error("heads: --length " + std::to_string(a.length) + " is longer than the model's max_position_embeddings (" +
                std::to_string(positions) + ")");
  const Tokenizer tokenizer = Tokenizer::load(a.model_dir + "/tokenizer.json");  // the text first: it fails fast
  const auto windows = text_windows(tokenizer, text, a.length, a.windows, "lower --length");
  const Model model = load_model(a.model_dir);
  const HeadSettings& s = a.settings;
  const std::vector<HeadStats> stats = head_stats(model, windows, s);
  const HeadStats even = uniform_head_stats(a.length, s);

  const ModelConfig& c = model.config;
  std::printf("kvscope heads: %s on %s\n", shown_path(a.model_dir).c_str(), shown_path(text).c_str());
  std::printf("%s of %d tokens; queries at positions %d..%d, one at a time, full cache\n",
              plural(int64_t(windows.size()), "window").c_str(), a.length, s.from, a.length - 1);
  if (int(windows.size()) < a.windows)
    std::printf("%s\n", fewer_windows_note(a.windows, int(windows.size())).c_str());
  std::printf("\n");
  // Middle keys: those no measured query counts as a sink or local (core/eval/heads.h).
  std::printf("| layer | head | sink (first %d) | local (newest %d) | heavy (top 10%% of keys %d..%d) | role |\n",
              s.sinks, s.recent, s.sinks, s.from - s.recent - 1);
  std::printf("|---:|---:|---:|---:|---:|---|\n");
  int sinks = 0, locals = 0, heavies = 0;
  for (int l = 0; l < c.num_layers; ++l)
    for (int h = 0; h < c.num_heads; ++h) {
      const HeadStats& x = stats[size_t(l) * c.num_heads + h];
      std::printf("| %d | %d | %.1f%% | %.1f%% | %.1f%% | %s |\n", l, h, 100 * x.sink, 100 * x.local, 100 * x.heavy,
                  role(x));
      sinks += x.sink >= 0.5;
      locals += x.local >= 0.5;
      heavies += x.heavy >= 0.5;
    }
  std::printf("| even | | %.1f%% | %.1f%% | %.1f%% | (a head attending evenly) |\n\n", 100 * even.sink,
              100 * even.local, 100 * even.heavy);
  const int n = c.num_layers * c.num_heads;
  std::printf("%d of %d heads give half their attention or more to the first %s, %d to the newest %d;\n", sinks, n,
              tokens(s.sinks).c_str(), locals, s.recent);
  std::printf("in %d of the %d, the top 10%% of keys %d..%d take half or more of the attention those keys get.\n",
              heavies, n, s.sinks, s.from - s.recent - 1);
}

}  // namespace

void add_heads_command(CLI::App& app) {
  auto args = std::make_shared<HeadsArgs>();
  HeadSettings& s = args->settings;
  CLI::App* cmd = app.add_subcommand("heads", "What each attention head looks at: sinks, local tokens, heavy hitters");
  cmd->add_option("--model", args->model_dir, "Hugging Face model folder")->capture_default_str();
  cmd->add_option("--text", args->text,
                  "Held-out text; documents separated by <|endoftext|> (default: MODEL/heldout.txt, else the bundled "
                  "model's)")
      ->check(kFileName);
  cmd->add_option("--length", args->length, "Tokens per window")->capture_default_str();
  CLI::Option* from = cmd->add_option(
      "--from", s.from, "First query position measured (default: half of --length, at least --sinks + --recent + 10)");
  cmd->add_option("--windows", args->windows, "At most N windows (one per document) to average over")
      ->capture_default_str()
      ->check(kPositive);
  cmd->add_option("--sinks", s.sinks, "How many first tokens count as sinks")
      ->capture_default_str()
      ->check(kNonNegative);
  cmd->add_option("--recent", s.recent, "How many newest tokens count as local")
      ->capture_default_str()
      ->check(kNonNegative);
  cmd->add_option("--threads", args->threads, "CPU threads (0 = OMP_NUM_THREADS if set, else all cores)")
      ->capture_default_str()
      ->check(kNonNegative);
  cmd->callback([args, from] {
    if (from->count() == 0) args->settings.from = default_first_query(args->settings, args->length);  // 256 for 512
    run_heads(*args);
  });
}

}  // namespace kvscope::cli
