// kvscope eval: every policy at several budgets on held-out text, against the full cache.
//
//   kvscope eval [--model DIR] [--text FILE] [--context N] [--keep 0.1,0.25,0.5] [--policies ...]
//
// The text is split into documents at "<|endoftext|>"; each document long enough
// gives one window (its first context + 1 tokens). What is measured, and how, is
// described in core/eval/eval.h. Prints a Markdown table; --json writes the numbers.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "eval/eval.h"
#include "eval/windows.h"
#include "model/config.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/file.h"
#include "util/format.h"

namespace kvscope::cli {

namespace {

struct EvalArgs {
  std::string model_dir = bundled_model_dir();
  std::string text;          // default: held_out_text()
  std::string calibration;   // default: MODEL/triattention-calibration.json when there is one
  std::string json;
  int windows = 0;           // 0 = every document long enough
  int threads = 0;
  EvalSettings settings;
};

int scored_from(const EvalSettings& s) { return s.scored_from < 0 ? s.context / 2 : s.scored_from; }

// What the policies that need more than the schedule ran with: TriAttention's calibration
// and the random policy's seed ("" when neither runs).
std::string policy_inputs(const EvalSettings& s) {
  std::string line;
  if (runs_policy(s, "triattention")) line = "triattention calibrated by " + shown_path(s.calibration);
  if (runs_policy(s, "random")) line += (line.empty() ? "" : "; ") + std::string("random seed ") + std::to_string(s.seed);
  return line;
}

nlohmann::json to_json(const EvalReport& r) {
  nlohmann::json rows = nlohmann::json::array();
  for (const EvalRow& x : r.rows)
    rows.push_back({{"policy", x.policy}, {"keep", x.keep}, {"budget", x.budget}, {"perplexity", x.perplexity},
                    {"top1_agreement", x.top1_agreement}, {"greedy_match", x.greedy_match},
                    {"blocks_freed_holes", x.blocks_freed_holes}, {"blocks_freed_compact", x.blocks_freed_compact},
                    {"evicted", x.evicted}});
  const EvalSettings& s = r.settings;
  return {{"windows", r.windows},
          {"context", s.context},
          {"continuation", s.continuation},
          {"scored_from", scored_from(s)},
          {"block_size", s.block_size},
          {"slack", s.slack},
          {"sinks", s.sinks},
          {"recent", s.recent},
          {"policies", s.policies},
          {"seed", s.seed},
          {"calibration", runs_policy(s, "triattention") ? s.calibration : ""},
          {"rows", rows}};
}

void run_eval(EvalArgs a) {
  check_distinct(a.settings.keep, "--keep");
  check_distinct(a.settings.policies, "--policies");
  set_threads(a.threads);
  a.text = held_out_text(a.text, a.model_dir);
  check_outputs_apart({{"--json", a.json}}, {{"--text", a.text}, calibration_read(a.calibration, a.model_dir)},
                      a.model_dir);
  if (!a.json.empty()) check_writable(a.json);  // before the long run, not after it
  if (!a.calibration.empty() && !runs_policy(a.settings, "triattention"))
    throw Error("--calibration is for the triattention policy, and --policies leaves it out");
  check_model_present(a.model_dir);
  EvalSettings& s = a.settings;
  if (s.calibration.empty()) s.calibration = calibration_file(a.calibration, a.model_dir);
  if (runs_policy(s, "triattention") && !s.calibration.empty()) warn_of_calibration(s.calibration, a.model_dir, a.text);
  check_eval_settings(s, load_config_file(a.model_dir + "/config.json").max_position_embeddings);  // before the long loads
  const Tokenizer tokenizer = Tokenizer::load(a.model_dir + "/tokenizer.json");  // the text first: it fails fast
  const std::vector<std::vector<int>> windows = text_windows(
      tokenizer, a.text, s.context + 1, a.windows, "a window is --context + 1 tokens: lower --context");
  const Model model = load_model(a.model_dir);

  const double t0 = now_seconds();
  const bool bar = isatty(STDERR_FILENO);   // a progress bar for people, not for logs
  const EvalReport report = evaluate(model, windows, s, [&](int done, int total) {
    if (!bar) return;
    const double dt = now_seconds() - t0;
    const int width = 30, filled = width * done / total;
    std::fprintf(stderr, "\reval [%s%s] %d/%d runs, %.0f s", std::string(size_t(filled), '#').c_str(),
                 std::string(size_t(width - filled), '.').c_str(), done, total, dt);
    if (done == total) std::fputc('\n', stderr);
    std::fflush(stderr);
  });

  std::printf("kvscope eval: %s on %s\n", shown_path(a.model_dir).c_str(), shown_path(a.text).c_str());
  std::printf("%s of %d tokens, teacher-forced; perplexity and top-1 over positions >= %d; greedy match over %s\n",
              plural(report.windows, "window").c_str(), s.context, scored_from(s),
              plural(s.continuation, "token").c_str());
  if (a.windows > report.windows)
    std::printf("%s\n", fewer_windows_note(a.windows, report.windows).c_str());
  std::printf("block size %d, rounds at budget + %d, sinks %d, recent %d\n", s.block_size, s.slack, s.sinks, s.recent);
  if (const std::string inputs = policy_inputs(s); !inputs.empty()) std::printf("%s\n", inputs.c_str());
  std::printf("\n");
  std::fputs(markdown_table(report).c_str(), stdout);
  if (!a.json.empty()) {
    write_file_atomically(a.json, [&](std::ostream& out) { out << to_json(report).dump(1) << "\n"; });
    std::printf("\nwrote %s\n", a.json.c_str());
  }
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto args = std::make_shared<EvalArgs>();
  EvalSettings& s = args->settings;
  CLI::App* cmd = app.add_subcommand("eval", "Every eviction policy at several budgets on held-out text: "
                                              "perplexity, agreement with the full cache, blocks freed");
  cmd->add_option("--model", args->model_dir, "Hugging Face model folder")->capture_default_str();
  cmd->add_option("--text", args->text,
                  "Held-out text; documents separated by <|endoftext|> (default: MODEL/heldout.txt, else the bundled "
                  "model's)")
      ->check(kFileName);
  cmd->add_option("--context", s.context, "Tokens per window, teacher-forced one at a time")->capture_default_str();
  cmd->add_option("--continuation", s.continuation, "Greedy tokens compared after each window")->capture_default_str();
  cmd->add_option("--windows", args->windows, "At most N windows (0 = one per long-enough document)")
      ->capture_default_str()
      ->check(kNonNegative);
  cmd->add_option("--keep", s.keep, "Kept fractions of the context (the budgets)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(kOpenFraction);
  cmd->add_option("--policies", s.policies, "Policies: streaming, h2o, snapkv, triattention, random, oracle")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--block-size", s.block_size, "Tokens per block")->capture_default_str()->check(kBlockSize);
  cmd->add_option("--slack", s.slack, "Rounds start at budget + slack live tokens")->capture_default_str()->check(kPositive);
  cmd->add_option("--sinks", s.sinks, "First tokens always kept")->capture_default_str()->check(kNonNegative);
  cmd->add_option("--recent", s.recent, "Newest tokens always kept")->capture_default_str()->check(kNonNegative);
  CLI::Option* seed = cmd->add_option("--seed", s.seed,
                                      "Seed of the random policy (refused unless --policies has random)")
                          ->capture_default_str()
                          ->check(kNonNegative);
  cmd->add_option("--calibration", args->calibration,
                  "TriAttention calibration (default: MODEL/triattention-calibration.json)")
      ->check(kFileName);
  cmd->add_option("--json", args->json, "Also write the numbers to this JSON file")->check(kFileName);
  cmd->add_option("--threads", args->threads, "CPU threads (0 = OMP_NUM_THREADS if set, else all cores)")
      ->capture_default_str()
      ->check(kNonNegative);
  cmd->callback([args, seed] {
    if (seed->count() > 0 && !runs_policy(args->settings, "random"))
      throw Error("--seed is for the random policy, and --policies leaves it out");  // as --calibration
    run_eval(*args);
  });
}

}  // namespace kvscope::cli
