#include "eval/eval.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>

#include "cache/kv_cache.h"
#include "engine/engine.h"
#include "evict/oracle.h"
#include "sample/sampler.h"  // argmax
#include "util/error.h"
#include "util/format.h"

namespace kvscope {

namespace {

// What one run over one window produced.
struct WindowRun {
  std::vector<double> nll;   // -log p(target) at the scored positions
  std::vector<int> top1;     // argmax of the logits at the scored positions
  std::vector<int> greedy;   // the greedy continuation after the window
  SequenceStats stats;       // the cache at the window's end
};

// -log softmax(logits)[target], in double.
double nll(const float* logits, int n, int target) {
  const float top = *std::max_element(logits, logits + n);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(double(logits[i]) - top);
  return std::log(sum) - (double(logits[target]) - top);
}

// Feeds window[0..context) one token at a time, then generates greedily. The
// cache's events up to the window's end go to `log` when one is given.
WindowRun run_window(const Model& model, const std::vector<int>& window, const EvalSettings& s,
                     const EngineConfig& engine_config, EventLog* log = nullptr) {
  const int vocab = model.config.vocab_size;
  const int scored_from = s.scored_from < 0 ? s.context / 2 : s.scored_from;
  Engine engine(model, engine_config, log);
  const int seq = engine.add_sequence();
  WindowRun run;
  const float* logits = nullptr;
  for (int i = 0; i < s.context; ++i) {
    logits = i == 0 ? engine.prefill(seq, {window[0]}) : engine.decode(seq, window[i]);
    if (i + 1 >= scored_from) {                 // logits at i predict position i + 1
      run.nll.push_back(nll(logits, vocab, window[i + 1]));
      run.top1.push_back(argmax(logits, vocab));
    }
  }
  run.stats = engine.stats(seq);
  const size_t window_events = log ? log->size() : 0;
  for (int g = 0; g < s.continuation; ++g) {
    run.greedy.push_back(argmax(logits, vocab));
    if (g + 1 < s.continuation) logits = engine.decode(seq, run.greedy.back());
  }
  if (log) log->resize(window_events);  // the stats are the window's end: so is the log
  return run;
}

// The blocks a run would hold at its end under holes only, from the events of the
// same run under compaction: its writes and evictions, replayed round by round on
// a cache that leaves holes. The two strategies evict the same tokens (compaction
// leaves every logit bit-for-bit unchanged: Engine.CompactionLeavesEveryLogitBitUnchanged),
// so the model need not run a second time to count them.
int blocks_under_holes(const EventLog& compact_run, int num_blocks, int block_size) {
  PagedKvCache cache(num_blocks, block_size, MemoryStrategy::HolesOnly);
  const int seq = cache.add_sequence();
  std::vector<int64_t> evicted;
  for (const Event& e : compact_run) {
    if (e.kind == EventKind::SlotWritten) cache.append(seq);  // the next position, as in the run
    if (e.kind == EventKind::SlotEvicted) evicted.push_back(e.pos);
    if (e.kind == EventKind::RoundEnd) {
      cache.evict(seq, evicted);
      evicted.clear();
    }
  }
  return int(cache.sequence(seq).blocks.size());
}

// Running sums for one row of the table.
struct Totals {
  double nll = 0, top1 = 0, greedy = 0, freed_holes = 0, freed_compact = 0, evicted = 0;
  size_t scored = 0;
  int windows = 0;
};

void add_quality(Totals& t, const WindowRun& run, const WindowRun& full, int continuation) {
  for (size_t i = 0; i < run.nll.size(); ++i) {
    t.nll += run.nll[i];
    t.top1 += run.top1[i] == full.top1[i];
  }
  t.scored += run.nll.size();
  int same = 0;
  while (same < continuation && run.greedy[same] == full.greedy[same]) ++same;
  t.greedy += double(same) / continuation;
  t.evicted += run.stats.evicted_fraction();
  ++t.windows;
}

EvalRow finish(const std::string& policy, double keep, int budget, const Totals& t) {
  EvalRow row;
  row.policy = policy;
  row.keep = keep;
  row.budget = budget;
  row.perplexity = std::exp(t.nll / double(t.scored));
  row.top1_agreement = t.top1 / double(t.scored);
  row.greedy_match = t.greedy / t.windows;
  row.blocks_freed_holes = t.freed_holes / t.windows;
  row.blocks_freed_compact = t.freed_compact / t.windows;
  row.evicted = t.evicted / t.windows;
  return row;
}

// The schedule that keeps the fraction k of the context.
EvictionSchedule schedule_for(double k, const EvalSettings& s) {
  return {int(std::lround(k * s.context)), s.slack, s.sinks, s.recent};
}

// The windows against the settings (check_eval_settings has passed).
void check_windows(const std::vector<std::vector<int>>& windows, const EvalSettings& s) {
  if (windows.empty()) throw Error("eval: no windows to evaluate");
  for (size_t w = 0; w < windows.size(); ++w)
    if (int(windows[w].size()) < s.context + 1)
      throw Error("eval: window " + std::to_string(w) + " has " + std::to_string(windows[w].size()) +
                  " tokens; context " + std::to_string(s.context) + " needs " + std::to_string(s.context + 1));
}

}  // namespace

bool runs_policy(const EvalSettings& s, const std::string& policy) {
  return std::find(s.policies.begin(), s.policies.end(), policy) != s.policies.end();
}

void check_eval_settings(const EvalSettings& s, int max_position_embeddings) {
  if (s.context < 2) throw Error("eval: --context must be at least 2 tokens, got " + std::to_string(s.context));
  if (s.continuation < 1)
    throw Error("eval: --continuation must be at least 1 token, got " + std::to_string(s.continuation));
  if (s.block_size < 1 || s.block_size > kMaxBlockSize)
    throw Error("eval: the block size must be between 1 and " + std::to_string(kMaxBlockSize) + ", got " +
                std::to_string(s.block_size));
  // The positions fed: the window, then the greedy tokens but the last, which is never
  // fed; the oracle's recording feeds that one too. In 64 bits: either may be near INT_MAX.
  const bool oracle = runs_policy(s, "oracle");
  const int64_t positions = int64_t(s.context) + s.continuation - (oracle ? 0 : 1);
  if (positions > max_position_embeddings)
    throw Error("eval: --context " + std::to_string(s.context) + " + --continuation " + std::to_string(s.continuation) +
                (oracle ? "" : " - 1") + " need " + std::to_string(positions) + " positions" +
                (oracle ? " (the oracle feeds every greedy token)" : " (the last greedy token is never fed)") +
                ", more than the model's max_position_embeddings (" + std::to_string(max_position_embeddings) +
                "): lower --context or --continuation");
  if (s.scored_from > s.context) throw Error("eval: scored_from is past the end of the context");
  if (s.calibration.empty() && runs_policy(s, "triattention"))
    throw Error("eval: policy triattention needs a calibration file: make one with kvscope calibrate and give "
                "--calibration, or leave triattention out of --policies");
  std::map<int, double> budgets;  // budget -> the fraction that gave it
  for (double k : s.keep) {
    if (!(k > 0 && k < 1)) throw Error("eval: a kept fraction must be above 0 and below 1 (got " + number_text(k) + ")");
    const EvictionSchedule schedule = schedule_for(k, s);
    // Two fractions that round to one budget would run one row twice.
    if (const auto [at, inserted] = budgets.emplace(schedule.budget, k); !inserted)
      throw Error("eval: --keep " + number_text(at->second) + " and " + number_text(k) + " of the " +
                  std::to_string(s.context) + "-token context are both " + plural(schedule.budget, "token") +
                  ": the same row twice");
    if (schedule.budget < 1)  // budget 0 means "never evict": the row would be the full cache's
      throw Error("eval: keeping " + number_text(k) + " of the " + std::to_string(s.context) +
                  "-token context is 0 tokens: raise --keep or --context");
    if (schedule.budget < int64_t(s.sinks) + s.recent)  // the budget is the user's only through --keep and --context
      throw Error("eval: keeping " + number_text(k) + " of the " + std::to_string(s.context) + "-token context is " +
                  plural(schedule.budget, "token") + ", fewer than the protected " + std::to_string(s.sinks) +
                  " sinks + " + std::to_string(s.recent) + " recent: raise --keep or --context, or lower --sinks and --recent");
    schedule.validate();
    for (const std::string& policy : s.policies) check_budget_holds_the_window(policy, schedule);
    // Live tokens when the first round starts. At the context's length or more, that
    // round comes after the window's last prediction: the row's perplexity and top-1
    // would be the full cache's under another name.
    const int first_round = schedule.round_starts_at();
    if (first_round >= s.context)
      throw Error("eval: keeping " + number_text(k) + " of the " + std::to_string(s.context) + "-token context is " +
                  plural(schedule.budget, "token") + ", and a round starts at " + std::to_string(schedule.budget) +
                  " + " + std::to_string(s.slack) + " (--slack) = " + std::to_string(first_round) +
                  " live tokens, not before the context ends: no scored prediction would follow an eviction; lower "
                  "--keep or --slack, or raise --context");
  }
}

EvalReport evaluate(const Model& model, const std::vector<std::vector<int>>& windows, const EvalSettings& s,
                    const EvalProgress& progress) {
  check_eval_settings(s, model.config.max_position_embeddings);
  check_windows(windows, s);
  const int n_policies = int(s.policies.size()), n_keep = int(s.keep.size());
  std::vector<EvictionSchedule> schedules;
  for (double k : s.keep) schedules.push_back(schedule_for(k, s));
  // One factory per row, kept for every window: under the random policy window w then
  // draws stream w of the seed, whatever the other rows (a copy would start at 0 again:
  // the random row was once one draw, 15 times). The oracle's is made per window.
  std::vector<PolicyFactory> factories(size_t(n_policies) * n_keep);  // [policy * n_keep + keep]
  for (int p = 0; p < n_policies; ++p)
    for (int k = 0; k < n_keep && s.policies[p] != "oracle"; ++k)
      factories[size_t(p) * n_keep + k] = policy_factory(s.policies[p], s.seed, s.calibration, model.config);
  const bool with_oracle = runs_policy(s, "oracle");

  EngineConfig base;
  base.block_size = s.block_size;
  base.num_blocks = int(blocks_for_tokens(s.context + s.continuation, s.block_size)) + 1;

  Totals full_totals;
  std::vector<Totals> totals(size_t(n_policies) * n_keep);
  const int total = int(windows.size()) * (1 + n_policies * n_keep);
  int done = 0;
  for (const std::vector<int>& window : windows) {
    const WindowRun full = run_window(model, window, s, base);
    add_quality(full_totals, full, full, s.continuation);
    if (progress) progress(++done, total);

    // The oracle knows this window's future: the text, then the full cache's continuation
    // (recorded only when it runs: one more eager pass over the window).
    std::vector<int> future(window.begin() + 1, window.begin() + s.context);
    future.insert(future.end(), full.greedy.begin(), full.greedy.end());
    const FutureAttention oracle =
        with_oracle ? record_future_attention(model, {window[0]}, future) : FutureAttention(0, {});

    for (int p = 0; p < n_policies; ++p) {
      for (int k = 0; k < n_keep; ++k) {
        EngineConfig config = base;
        config.schedule = schedules[k];
        PolicyFactory& row_policy = factories[size_t(p) * n_keep + k];
        config.policy = row_policy ? PolicyFactory([&row_policy] { return row_policy(); })  // the row's, not a copy
                                   : [&oracle] { return std::make_unique<OraclePolicy>(oracle); };
        Totals& t = totals[size_t(p) * n_keep + k];
        config.strategy = MemoryStrategy::Compact;
        EventLog events;
        const WindowRun compact = run_window(model, window, s, config, &events);
        if (progress) progress(++done, total);
        SequenceStats holes = compact.stats;
        holes.blocks_in_use = blocks_under_holes(events, config.num_blocks, config.block_size);
        add_quality(t, compact, full, s.continuation);
        t.freed_compact += compact.stats.blocks_freed_fraction();
        t.freed_holes += holes.blocks_freed_fraction();
      }
    }
  }

  EvalReport report{s, int(windows.size()), {}};
  report.rows.push_back(finish("full", 1.0, s.context, full_totals));
  for (int p = 0; p < n_policies; ++p)
    for (int k = 0; k < n_keep; ++k)
      report.rows.push_back(finish(s.policies[p], s.keep[k], schedules[k].budget, totals[size_t(p) * n_keep + k]));
  return report;
}

std::string markdown_table(const EvalReport& report) {
  auto pct = [](double x) {
    char b[32];
    std::snprintf(b, sizeof b, "%.1f%%", 100 * x);
    return std::string(b);
  };
  const double full_ppl = report.rows.at(0).perplexity;
  std::string out =
      "| policy | kept (tokens) | perplexity | vs full | top-1 agreement | greedy match "
      "| blocks freed, holes only | blocks freed, compacted |\n"
      "|---|---|---:|---:|---:|---:|---:|---:|\n";
  for (const EvalRow& r : report.rows) {
    char line[512];
    if (r.policy == "full") {
      std::snprintf(line, sizeof line, "| full cache | 100%% (%d) | %.3f | | | | | |\n", r.budget, r.perplexity);
    } else {
      std::snprintf(line, sizeof line, "| %s | %s (%d) | %.3f | %+.1f%% | %s | %s | %s | %s |\n", r.policy.c_str(),
                    pct(r.keep).c_str(), r.budget, r.perplexity, 100 * (r.perplexity / full_ppl - 1),
                    pct(r.top1_agreement).c_str(), pct(r.greedy_match).c_str(), pct(r.blocks_freed_holes).c_str(),
                    pct(r.blocks_freed_compact).c_str());
    }
    out += line;
  }
  return out;
}

}  // namespace kvscope
