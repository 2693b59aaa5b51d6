// kvscope simulate: evict from a paged cache with no model, and count the blocks
// that come back.
//
//   kvscope simulate --tokens 16000 --evict 0.875 --block-size 16 --policy random
//
// writes 16,000 tokens into blocks of 16, evicts 87.5% of them at random in one
// round, and prints for each memory strategy side by side how many tokens went
// and how many blocks the pool got back, next to the law f^block_size:
// (0.875)^16 = 11.8%. Compaction gives back 87.5%, at the price of bytes moved.
// With --budget it runs the engine's streaming loop instead: append one token at
// a time, prune to the budget whenever budget + slack tokens are live.
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cache/trace.h"
#include "cli/commands.h"
#include "model/config.h"
#include "model/memory.h"
#include "sim/synthetic.h"
#include "util/error.h"
#include "util/clock.h"
#include "util/file.h"
#include "util/format.h"

namespace kvscope::cli {

namespace {

struct SimulateArgs {
  SimulationConfig sim;  // tokens, block size, policy, workload, fraction, budget, slack
  std::string strategy = "all";
  std::string mode;  // "one-shot" or "streaming"; empty: streaming when --budget is given
  int sinks = -1;    // -1: the mode's default (one-shot 0, streaming 4)
  int recent = -1;   // -1: the mode's default (one-shot 0, streaming 32)
  int seeds = 1;
  std::string config;  // a config.json to take bytes per token from (f32)
  std::string trace;
  bool slack_given = false;  // --slack on the command line (only streaming uses it)
  bool seed_given = false;   // --seed or --seeds on the command line
};

// ---- the runs ----------------------------------------------------------------

std::vector<MemoryStrategy> strategies(const std::string& s) {
  if (s == "all") return {MemoryStrategy::HolesOnly, MemoryStrategy::ReuseHoles, MemoryStrategy::Compact};
  return {parse_strategy(s)};
}

// Flags to a SimulationConfig, with each mode's protection defaults.
SimulationConfig base_config(const SimulateArgs& a) {
  SimulationConfig c = a.sim;
  c.streaming = a.mode.empty() ? c.schedule.budget > 0 : a.mode == "streaming";
  c.schedule.sinks = a.sinks >= 0 ? a.sinks : (c.streaming ? 4 : 0);
  c.schedule.recent = a.recent >= 0 ? a.recent : (c.streaming ? 32 : 0);
  if (!a.config.empty()) c.bytes_per_token = kv_bytes_per_token(load_config_file(a.config), 32);
  return c;
}

void check_args(const SimulateArgs& a) {
  if (a.strategy != "all" && a.strategy != "holes" && a.strategy != "reuse" && a.strategy != "compact")
    throw Error("--strategy must be all, holes, reuse or compact, got \"" + a.strategy + "\"");
  if (a.mode == "streaming" && a.sim.schedule.budget < 1) throw Error("--mode streaming needs --budget");
  if (a.mode == "one-shot" && a.slack_given) throw Error("--slack is for streaming: a one-shot round does not use it");
  if (a.seeds > 1 && a.sim.seed > UINT64_MAX - uint64_t(a.seeds - 1))
    throw Error("--seed " + std::to_string(a.sim.seed) + " and --seeds " + std::to_string(a.seeds) +
                ": the seeds would run past 18446744073709551615");
  if (!a.trace.empty() && (a.strategy == "all" || a.seeds > 1))
    throw Error("--trace records one run: give --strategy holes, reuse or compact and no --seeds");
  // The seed draws the workload's importances and the random policy's choices. The
  // streaming policy keeps the sinks and the newest tokens whatever they are, and the
  // importances are reported only for a workload other than uniform.
  if (a.seed_given && a.sim.policy == "streaming" && a.sim.workload == "uniform")
    throw Error("--seed, --seeds: nothing in a run of the streaming policy on the uniform workload is random "
                "(every seed gives the same run); give --policy random or importance, or another --workload");
}

// Progress on stderr for long runs: a line rewritten in place on a terminal; in a log, a
// plain line every 10 seconds (`log`, shared by the runs of one command).
std::function<void(double)> progress_reporter(const SimulationConfig& c, const std::string& label,
                                              const std::shared_ptr<LogProgress>& log) {
  if (c.tokens < (1 << 18)) return {};
  if (!isatty(2))
    return [label, log](double done) {
      if (done < 1 && log->due()) std::fprintf(stderr, "simulate: %s %3.0f%%\n", label.c_str(), 100 * done);
    };
  return [label](double done) {
    std::fprintf(stderr, "\rsimulate: %s %3.0f%%", label.c_str(), 100 * done);
    if (done >= 1) std::fprintf(stderr, "\r%*s\r", int(label.size()) + 16, "");
  };
}

// The run of one strategy and the k-th seed.
SimulationConfig run_config(const SimulateArgs& a, const SimulationConfig& base, MemoryStrategy strategy, int k) {
  SimulationConfig c = base;
  c.strategy = strategy;
  c.seed = base.seed + uint64_t(k);
  c.record_events = !a.trace.empty();
  return c;
}

// results[strategy][seed]
std::vector<std::vector<SimulationResult>> run_all(const SimulateArgs& a, const SimulationConfig& base,
                                                   const std::vector<MemoryStrategy>& which) {
  std::vector<std::vector<SimulationResult>> results(which.size());
  const auto log = std::make_shared<LogProgress>();
  for (size_t s = 0; s < which.size(); ++s)
    for (int k = 0; k < a.seeds; ++k) {
      SimulationConfig c = run_config(a, base, which[s], k);
      const std::string label = std::string(strategy_name(c.strategy)) + " seed " + std::to_string(c.seed);
      c.progress = progress_reporter(c, label, log);
      results[s].push_back(simulate(c));
    }
  return results;
}

void write_run_trace(const SimulateArgs& a, const SimulationConfig& c, const SimulationResult& r) {
  TraceHeader h;
  h.block_size = c.block_size;
  h.num_blocks = r.blocks_full_cache;
  h.strategy = parse_strategy(a.strategy);
  h.meta = {{"source", "simulate"},
            {"policy", c.policy},
            {"workload", c.workload},
            {"seed", std::to_string(c.seed)},
            {"tokens", std::to_string(c.tokens)},
            {"mode", c.streaming ? "streaming" : "one-shot"},
            {"sinks", std::to_string(c.schedule.sinks)},
            {"recent", std::to_string(c.schedule.recent)},
            {"bytes_per_token", std::to_string(c.bytes_per_token)}};
  if (c.streaming || c.schedule.budget > 0) h.meta["budget"] = std::to_string(c.schedule.budget);
  if (c.streaming) h.meta["slack"] = std::to_string(c.schedule.slack);
  if (!c.streaming && c.schedule.budget == 0) h.meta["evict"] = fmt("%g", c.evict_fraction);
  write_trace(a.trace, h, r.events);
  std::printf("\ntrace: %s events written to %s\n", commas(int64_t(r.events.size())).c_str(), a.trace.c_str());
}

// ---- the table ---------------------------------------------------------------

// One row of the table: a number per run, and how to show it.
struct RowSpec {
  const char* name;
  double (*get)(const SimulationResult&);
  std::string (*show)(double);
};

std::string show_percent(double v) { return percent(v); }
std::string show_count(double v) { return commas(std::llround(v)); }
std::string show_bytes(double v) { return bytes(v); }

std::vector<RowSpec> row_specs(const SimulationConfig& c) {
  using R = const SimulationResult&;
  std::vector<RowSpec> rows = {
      {"tokens evicted", [](R r) { return r.evicted_fraction(); }, show_percent},
      {"blocks freed", [](R r) { return r.blocks_freed_fraction(); }, show_percent},
      {"bytes reclaimed", [](R r) { return double(r.bytes_reclaimed()); }, show_bytes},
      {"bytes moved", [](R r) { return double(r.bytes_moved()); }, show_bytes},
      {"blocks in use", [](R r) { return double(r.blocks_in_use); }, show_count},
  };
  if (c.streaming) rows.push_back({"peak blocks", [](R r) { return double(r.peak_blocks); }, show_count});
  rows.push_back({"rounds", [](R r) { return double(r.rounds); }, show_count});
  if (c.policy == "importance" || c.workload != "uniform")
    rows.push_back({"importance kept", [](R r) { return r.importance_kept; }, show_percent});
  return rows;
}

// One cell: the value, or "mean [min, max]" over seeds.
std::string cell(const std::vector<SimulationResult>& runs, const RowSpec& row) {
  double sum = 0, lo = row.get(runs[0]), hi = lo;
  for (const SimulationResult& r : runs) {
    const double v = row.get(r);
    sum += v, lo = std::min(lo, v), hi = std::max(hi, v);
  }
  if (row.show(lo) == row.show(hi)) return row.show(lo);  // the same to the digits shown
  return row.show(sum / double(runs.size())) + " [" + row.show(lo) + ", " + row.show(hi) + "]";
}

void print_row(const std::string& name, const std::vector<std::string>& cells, int width) {
  std::printf("  %-18s", name.c_str());
  for (const std::string& c : cells) std::printf("  %*s", width, c.c_str());
  std::printf("\n");
}

// The strategies side by side, one row per measure.
void print_table(const std::vector<MemoryStrategy>& which, const std::vector<std::vector<SimulationResult>>& results,
                 const SimulationConfig& c) {
  const std::vector<RowSpec> specs = row_specs(c);
  std::vector<std::vector<std::string>> cells(specs.size());  // [row][strategy]
  int width = 7;
  for (size_t i = 0; i < specs.size(); ++i)
    for (const auto& runs : results) {
      cells[i].push_back(cell(runs, specs[i]));
      width = std::max(width, int(cells[i].back().size()));
    }
  std::vector<std::string> names;
  for (MemoryStrategy s : which) names.push_back(strategy_name(s));
  print_row("", names, width);
  for (size_t i = 0; i < specs.size(); ++i) print_row(specs[i].name, cells[i], width);
}

// ---- the story around the table ----------------------------------------------

void print_setup(const SimulateArgs& a, const SimulationConfig& c) {
  const int64_t blocks = blocks_for_tokens(c.tokens, c.block_size);
  std::printf("kvscope simulate: %s token%s in blocks of %d: a full cache takes %s block%s, %s (%s bytes per token)\n",
              commas(c.tokens).c_str(), c.tokens == 1 ? "" : "s", c.block_size, commas(blocks).c_str(),
              blocks == 1 ? "" : "s",
              bytes(double(blocks) * c.block_size * double(c.bytes_per_token)).c_str(),
              commas(c.bytes_per_token).c_str());
  if (c.streaming)
    std::printf("streaming: one token at a time, %s policy prunes to %s whenever %s are live; workload %s\n",
                c.policy.c_str(), commas(c.schedule.budget).c_str(), commas(c.schedule.round_starts_at()).c_str(),
                c.workload.c_str());
  else if (c.schedule.budget > 0)
    std::printf("one-shot: %s policy keeps %s token%s in one round; workload %s\n", c.policy.c_str(),
                commas(c.schedule.budget).c_str(), c.schedule.budget == 1 ? "" : "s", c.workload.c_str());
  else {  // the fraction evicted in whole tokens, and --evict where that rounds it
    const int64_t evicted = c.tokens - one_shot_keep(c);
    const double f = double(evicted) / double(c.tokens);
    const std::string rounded =
        percent(f) == percent(c.evict_fraction) ? "" : ": --evict " + number_text(c.evict_fraction) + " rounded";
    std::printf("one-shot: %s policy evicts %s of the tokens (%s of %s%s) in one round; workload %s\n",
                c.policy.c_str(), percent(f).c_str(), commas(evicted).c_str(), commas(c.tokens).c_str(),
                rounded.c_str(), c.workload.c_str());
  }
  std::printf("protected: %s, %d recent%s\n", plural(c.schedule.sinks, "sink").c_str(), c.schedule.recent,
              !c.streaming && c.schedule.sinks + c.schedule.recent == 0 ? " (the one-shot default)" : "");
  if (a.seeds > 1)
    std::printf("seeds %" PRIu64 "..%" PRIu64 ": mean [min, max] over %d runs\n", c.seed,
                c.seed + uint64_t(a.seeds) - 1, a.seeds);
  else
    std::printf("seed %" PRIu64 "\n", c.seed);
  std::printf("\n");
}

// Where the law's independence shows at the digits printed (a small run): the exact
// expectation for exactly this many tokens evicted.
void print_exact(const ProtectedLaw& law) {
  if (percent(law.exact) == percent(law.expected)) return;
  std::printf("Exactly %s of %s tokens go (not each on its own, as the law has it): that frees %s of blocks\n"
              "on average; the law is its limit for many tokens.\n",
              commas(law.evicted).c_str(), commas(law.unprotected).c_str(), percent(law.exact).c_str());
}

// The law with protected tokens: only the blocks that hold none can empty, and the
// evictions all fall on their tokens, each more likely to go than 1 in `--evict`.
void print_protected_law(const SimulationConfig& c) {
  const int64_t evicted = c.tokens - one_shot_keep(c);
  const ProtectedLaw law =
      expected_blocks_freed(c.tokens, evicted, c.schedule.sinks, c.schedule.recent, c.block_size);
  const std::string f = fmt("%.4g", double(law.evicted) / double(law.unprotected));
  const int full = law.open_blocks - (law.part_full > 0);  // the part-full last block has fewer tokens to lose
  std::string sum = f + "^" + std::to_string(c.block_size) + " x " + commas(full) + " / " + commas(law.blocks);
  if (law.part_full) sum += " + " + f + "^" + std::to_string(law.part_full) + " / " + commas(law.blocks);
  std::printf("\nexpected: %s of the %s blocks hold no protected token (%s sinks, %s recent); each returns to the\n"
              "pool only when all its tokens were evicted, each with probability %s / %s = %s:\n"
              "%s = %s of blocks freed without compaction.\n",
              commas(law.open_blocks).c_str(), commas(law.blocks).c_str(), commas(c.schedule.sinks).c_str(),
              commas(c.schedule.recent).c_str(), commas(law.evicted).c_str(), commas(law.unprotected).c_str(),
              f.c_str(), sum.c_str(), percent(law.expected).c_str());
  print_exact(law);
  std::printf("Compaction gives back 1 - ceil(live / %d) / blocks.\n", c.block_size);
}

// Random one-shot eviction: the law, next to the measurement. f is the fraction the
// round evicts (--evict after rounding to whole tokens, or 1 - budget / tokens); a
// part-full last block has fewer tokens to lose, so it empties more often.
void print_law(const SimulationConfig& c) {
  if (c.streaming || c.policy != "random") return;
  if (c.schedule.sinks + c.schedule.recent > 0) return print_protected_law(c);
  const ProtectedLaw law = expected_blocks_freed(c.tokens, c.tokens - one_shot_keep(c), 0, 0, c.block_size);
  const std::string f = fmt("%.4g", double(law.evicted) / double(law.unprotected));
  const std::string n = std::to_string(c.block_size), last = std::to_string(law.part_full);
  const int full = law.blocks - (law.part_full > 0);  // blocks of block_size tokens
  std::string sum = full ? "(" + f + ")^" + n : "(" + f + ")^" + last;
  if (full && law.part_full)
    sum += " x " + commas(full) + " / " + commas(law.blocks) + " + (" + f + ")^" + last + " / " + commas(law.blocks);
  const int one = full ? c.block_size : law.part_full;  // tokens of a block, when all are alike
  std::string when;
  if (one == 1)
    when = "when its one token was evicted, with probability ";
  else if (full && law.part_full)
    when = "when all " + n + " of its tokens (the last block's " + last + ") were evicted, each with probability ";
  else
    when = "when all " + std::to_string(one) + " of its tokens were evicted, each with probability ";
  std::printf("\nexpected %s = %s of blocks freed without compaction: a block returns to the pool only\n%s%s.\n",
              sum.c_str(), percent(law.expected).c_str(), when.c_str(), f.c_str());
  print_exact(law);
  std::printf("Compaction gives back 1 - ceil(live / %d) / blocks.\n", c.block_size);
}

void run_simulate(const SimulateArgs& a) {
  check_args(a);
  check_outputs_apart({{"--trace", a.trace}}, {{"--config", a.config}});
  if (!a.trace.empty()) check_writable(a.trace);  // before the run, not after it
  const SimulationConfig base = base_config(a);
  const std::vector<MemoryStrategy> which = strategies(a.strategy);
  for (MemoryStrategy s : which) check_simulation_config(run_config(a, base, s, 0));  // before anything is printed
  const int first_round = base.schedule.round_starts_at();  // validated above: fits an int
  if (base.streaming && first_round > base.tokens)  // a table of zeros, and "rounds 0"
    throw Error("simulate: a round starts at --budget " + std::to_string(base.schedule.budget) + " + --slack " +
                std::to_string(base.schedule.slack) + " = " + std::to_string(first_round) + " live tokens, and only " +
                std::to_string(base.tokens) + " are written: nothing would be evicted; raise --tokens, or lower "
                "--budget or --slack");
  if (!base.streaming && one_shot_keep(base) >= base.tokens)  // a table of zeros: "keeps 5000 tokens" of 1000
    throw Error(base.schedule.budget > 0
                    ? "simulate: a one-shot round keeps --budget " + std::to_string(base.schedule.budget) +
                          " tokens, and only " + std::to_string(base.tokens) +
                          " are written: nothing would be evicted; raise --tokens, or lower --budget"
                    : "simulate: --evict " + number_text(base.evict_fraction) + " of " + std::to_string(base.tokens) +
                          " tokens rounds to none: nothing would be evicted; raise --evict or --tokens");
  print_setup(a, base);
  std::fflush(stdout);
  const auto results = run_all(a, base, which);
  print_table(which, results, base);
  print_law(base);
  if (!a.trace.empty()) write_run_trace(a, base, results[0][0]);
}

}  // namespace

void add_simulate_command(CLI::App& app) {
  auto a = std::make_shared<SimulateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "simulate",
      "Evict from a paged KV cache with no model: tokens evicted vs blocks freed, per memory strategy.\n"
      "One-shot (default): write --tokens, evict --evict of them in one round, with NO protected tokens\n"
      "(sinks 0, recent 0) unless asked, so random eviction shows the pure (f)^block_size law.\n"
      "Streaming (--budget B): append one token at a time and prune to B whenever B + slack are live,\n"
      "as the engine does; protection defaults to sinks 4, recent 32.");
  cmd->add_option("--tokens", a->sim.tokens, "Tokens to write")->capture_default_str()->check(kPositive);
  // An option the chosen mode would not use is refused rather than ignored: --evict
  // beside --budget (which replaces it in one-shot, and streaming has no use for it),
  // --slack without streaming.
  CLI::Option* evict = cmd->add_option("--evict", a->sim.evict_fraction, "One-shot: the fraction of the tokens to evict")
                           ->capture_default_str()
                           ->check(kFraction);
  cmd->add_option("--block-size", a->sim.block_size, "Slots per physical block (vLLM: 16)")
      ->capture_default_str()
      ->check(kBlockSize);
  cmd->add_option("--policy", a->sim.policy, "random, streaming (sinks + newest) or importance (the workload's scores)")
      ->capture_default_str();
  cmd->add_option("--workload", a->sim.workload, "Token importance: uniform, sinks-recency, clustered, heavy-tailed")
      ->capture_default_str();
  cmd->add_option("--strategy", a->strategy, "all, holes, reuse or compact")->capture_default_str();
  CLI::Option* seed = cmd->add_option("--seed", a->sim.seed, "Seed of the workload and the random policy")
      ->capture_default_str()
      ->check(kNonNegative);
  CLI::Option* seeds = cmd->add_option("--seeds", a->seeds, "Runs with seeds seed, seed+1, ...: mean [min, max]")
      ->capture_default_str()
      ->check(kPositive);
  cmd->add_option("--mode", a->mode, "one-shot or streaming (default: streaming when --budget is given)")
      ->check(CLI::IsMember({"one-shot", "streaming"}));
  CLI::Option* budget = cmd->add_option("--budget", a->sim.schedule.budget,
                                        "Live tokens kept by a round (streaming; or one-shot instead of --evict)")
                            ->check(kPositive)
                            ->excludes(evict);
  CLI::Option* slack =
      cmd->add_option("--slack", a->sim.schedule.slack, "Streaming: a round starts at budget + slack live tokens")
          ->capture_default_str()
          ->needs(budget);
  cmd->add_option("--sinks", a->sinks, "First tokens never evicted (default: one-shot 0, streaming 4)")
      ->check(kNonNegative);
  cmd->add_option("--recent", a->recent, "Newest tokens never evicted (default: one-shot 0, streaming 32)")
      ->check(kNonNegative);
  auto* bpt = cmd->add_option("--bytes-per-token", a->sim.bytes_per_token,
                              "K/V bytes per token, all layers (default: Qwen3-0.6B in f32, 2 x 28 x 8 x 128 x 4)")
                  ->capture_default_str();
  cmd->add_option("--config", a->config, "Take bytes per token from this config.json (f32 K/V)")
      ->excludes(bpt)
      ->check(kFileName);
  cmd->add_option("--trace", a->trace, "Write the event stream of the run to this file (one strategy, one seed); kvscope-viz --trace FILE shows it")
      ->check(kFileName);
  cmd->callback([a, slack, seed, seeds] {
    a->slack_given = slack->count() > 0;
    a->seed_given = seed->count() > 0 || a->seeds > 1;
    run_simulate(*a);
  });
}

}  // namespace kvscope::cli
