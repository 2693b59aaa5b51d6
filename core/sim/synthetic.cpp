#include "sim/synthetic.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "cache/kv_cache.h"
#include "cache/trace.h"
#include "util/error.h"
#include "util/format.h"
#include "util/memory_check.h"

namespace kvscope {

// ---- workloads ---------------------------------------------------------------

namespace {

constexpr int kSinkTokens = 4;          // sinks-recency: the first tokens, always important
constexpr double kRecencyScale = 32;    // sinks-recency: importance halves 32 tokens back
constexpr double kRecencyNoise = 0.25;  // sinks-recency: noise on top of the decay
constexpr double kBurstMean = 8;        // clustered: mean burst length, tokens
constexpr double kGapMean = 56;         // clustered: mean gap between bursts, tokens
constexpr double kParetoAlpha = 1.16;   // heavy-tailed: 20% of the tokens hold 80% of the importance

// Clustered: a two-state chain; each token ends its run with probability
// 1 / (mean run length), so run lengths are geometric with those means.
void draw_clusters(SplitMix64& rng, std::vector<float>& base) {
  bool burst = false;
  for (float& x : base) {
    if (rng.uniform() < 1.0 / (burst ? kBurstMean : kGapMean)) burst = !burst;
    const double u = rng.uniform();
    x = float(burst ? 1.0 + u : 0.5 * u);
  }
}

}  // namespace

const std::vector<std::string>& workload_names() {
  static const std::vector<std::string> names = {"uniform", "sinks-recency", "clustered", "heavy-tailed"};
  return names;
}

Workload::Workload(const std::string& name, int64_t tokens, uint64_t seed) : name_(name) {
  if (name == "uniform")
    kind_ = Kind::Uniform;
  else if (name == "sinks-recency")
    kind_ = Kind::SinksRecency;
  else if (name == "clustered")
    kind_ = Kind::Clustered;
  else if (name == "heavy-tailed")
    kind_ = Kind::HeavyTailed;
  else
    throw Error("--workload: unknown workload \"" + name +
                "\" (choose uniform, sinks-recency, clustered or heavy-tailed)");

  base_.resize(size_t(tokens));
  SplitMix64 rng(seed);
  if (kind_ == Kind::Clustered) {
    draw_clusters(rng, base_);
    return;
  }
  for (float& x : base_) {
    const double u = rng.uniform();
    x = float(kind_ == Kind::HeavyTailed ? std::pow(1.0 - u, -1.0 / kParetoAlpha) : u);
  }
}

double Workload::importance(int64_t pos, int64_t now) const {
  if (pos < 0 || pos >= int64_t(base_.size())) throw Error("workload: no token at position " + std::to_string(pos));
  if (kind_ != Kind::SinksRecency) return base_[size_t(pos)];
  const double distance = double(now - 1 - pos);  // 0 for the newest token
  return (pos < kSinkTokens ? 2.0 : 0.0) + 1.0 / (1.0 + distance / kRecencyScale) + kRecencyNoise * base_[size_t(pos)];
}

std::vector<float> ImportancePolicy::scores(const ScoreContext& ctx) {
  std::vector<float> s(ctx.pos.size());
  for (size_t i = 0; i < s.size(); ++i) s[i] = float(workload_.importance(ctx.pos[i], ctx.now));
  return s;
}

ProtectedLaw expected_blocks_freed(int64_t tokens, int64_t evicted, int64_t sinks, int64_t recent, int block_size) {
  ProtectedLaw law;
  law.evicted = evicted;
  law.unprotected = std::max<int64_t>(0, tokens - sinks - recent);
  law.blocks = int(blocks_for_tokens(tokens, block_size));
  if (law.unprotected == 0 || law.blocks == 0) return law;
  const double f = double(evicted) / double(law.unprotected);
  // Drawn without replacement: all n tokens of a block are among the `evicted` of the
  // `unprotected` with probability prod_{i<n} (evicted - i) / (unprotected - i): 0 once
  // n > evicted (so no factor divides by 0).
  const auto all_evicted = [&](int64_t n) {
    if (n > evicted || n > law.unprotected) return 0.0;
    double p = 1;
    for (int64_t i = 0; i < n; ++i) p *= double(evicted - i) / double(law.unprotected - i);
    return p;
  };
  const double exact_full = all_evicted(block_size);  // every open block but a part-full last one
  const int64_t first = sinks, last = tokens - recent;  // the unprotected positions: [first, last)
  double freed = 0, exact = 0;
  for (int64_t b = 0; b < law.blocks; ++b) {
    const int64_t begin = b * block_size, end = std::min(begin + block_size, tokens);
    if (begin < first || end > last) continue;  // holds a protected token
    ++law.open_blocks;
    if (end - begin < block_size) law.part_full = int(end - begin);
    freed += std::pow(f, double(end - begin));
    exact += end - begin < block_size ? all_evicted(end - begin) : exact_full;
  }
  law.expected = freed / law.blocks;
  law.exact = exact / law.blocks;
  return law;
}

// ---- the runner --------------------------------------------------------------

namespace {

// The three policies a simulation can run; the others read the model.
std::unique_ptr<EvictionPolicy> make_sim_policy(const std::string& name, uint64_t seed, const Workload& workload) {
  if (name == "random" || name == "streaming") return make_policy(name, seed);
  if (name == "importance") return std::make_unique<ImportancePolicy>(workload);
  if (name == "h2o" || name == "snapkv" || name == "triattention" || name == "oracle")
    throw Error("--policy " + name + ": it scores tokens from a model's attention or keys, and simulate has no model " +
                "(use kvscope generate; simulate accepts random, streaming and importance)");
  throw Error("--policy: unknown policy \"" + name + "\" for simulate (choose random, streaming or importance)");
}

}  // namespace

void check_simulation_config(const SimulationConfig& c) {
  if (c.tokens < 1 || c.tokens > (int64_t(1) << 30))
    throw Error("--tokens must be in [1, 2^30], got " + std::to_string(c.tokens));
  check_block_size(c.block_size);
  const int64_t slots = blocks_for_tokens(c.tokens, c.block_size) * c.block_size;
  if (c.record_events && slots > kMaxTraceSlots)  // refused before the run, not when the trace is written
    throw Error("simulate: a trace holds a pool of at most " + commas(kMaxTraceSlots) + " slots (what kvscope-viz "
                "replays), and " + commas(c.tokens) + " tokens in blocks of " + std::to_string(c.block_size) + " need " +
                commas(slots) + "; lower --tokens for --trace");
  if (!(c.evict_fraction >= 0 && c.evict_fraction <= 1))
    throw Error("simulate: the evicted fraction must be in [0, 1], got " + number_text(c.evict_fraction));
  if (c.bytes_per_token < 1 || c.bytes_per_token > (int64_t(1) << 30))  // 2^30 tokens x 2^30 bytes fits an int64
    throw Error("--bytes-per-token must be in [1, 2^30], got " + std::to_string(c.bytes_per_token));
  if (c.streaming && !c.schedule.enabled()) throw Error("simulate: streaming mode needs a budget > 0");
  c.schedule.validate();
  if (!c.streaming && c.schedule.budget == 0) {
    const int64_t keep = c.tokens - std::llround(c.evict_fraction * double(c.tokens));
    if (keep < c.schedule.sinks + c.schedule.recent)
      throw Error("simulate: keeping " + plural(keep, "token") + " cannot hold the protected " +
                  std::to_string(c.schedule.sinks) + " sinks + " + std::to_string(c.schedule.recent) + " recent");
  }
  const Workload probe(c.workload, 0, 0);  // throws on an unknown name
  make_sim_policy(c.policy, 0, probe);     // throws on a policy simulate cannot run
  check_fits_in_memory(simulation_peak_bytes(c), "simulating " + std::to_string(c.tokens) + " tokens (" +
                                                     (c.streaming ? "streaming" : "one-shot") +
                                                     (c.record_events ? ", every event kept for --trace" : "") + ")");
}

size_t simulation_peak_bytes(const SimulationConfig& c) {
  // For every token: the cache's slot table (8 bytes) and the workload's draw (4);
  // one-shot adds its one round over all of them: positions, scores, the selection,
  // the evicted list and the compaction plan. Measured (/usr/bin/time, 20M tokens):
  // 80 bytes a token one-shot, 13 streaming, and about 17 more a block of 1.
  const size_t per_token = c.streaming ? 16 : 96, per_block = 24;
  const size_t blocks = size_t(blocks_for_tokens(c.tokens, c.block_size));
  size_t bytes = size_t(c.tokens) * per_token + blocks * per_block;
  if (c.record_events) {  // --trace keeps every event until the file is written
    // Per token: written and evicted, its block's allocation and release, a round's
    // begin and end every `slack` tokens of a stream, and under compaction its moves:
    // once in a one-shot round; in a stream each round moves up to `budget` survivors.
    // Measured: 2.1 events a token one-shot (10M tokens, compact); streaming (200k,
    // budget 1024 + slack 8) 2.4 under holes, 115.6 under compact. The log's vector
    // can hold twice its events while it grows (measured: 45 bytes an event).
    double events = 2 + 2.0 / c.block_size + (c.streaming ? 2.0 / double(c.schedule.slack) : 0);  // + rounds
    if (c.strategy == MemoryStrategy::Compact)
      events += c.streaming ? double(c.schedule.budget) / double(c.schedule.slack) : 1;
    bytes += size_t(double(c.tokens) * events * 2 * sizeof(Event));
  }
  return bytes;
}

int64_t evict_round(PagedKvCache& cache, int seq, EvictionPolicy& policy, const EvictionSchedule& schedule) {
  cache.begin_round(seq);
  std::vector<int64_t> pos = cache.live_positions(seq);
  std::sort(pos.begin(), pos.end());  // table order is token order, except after hole reuse
  const ScoreContext ctx{pos, cache.sequence(seq).next_pos};
  const std::vector<int64_t> evicted = complement(pos, select_keep(pos, policy.scores(ctx), schedule));
  cache.evict(seq, evicted);
  policy.forget(evicted);
  int64_t moves = 0;
  if (cache.strategy() == MemoryStrategy::Compact) {
    const std::vector<Move> plan = cache.plan_compaction(seq);
    moves = int64_t(plan.size());
    cache.commit_compaction(seq, plan);
  }
  cache.end_round(seq);
  return moves;
}

namespace {

struct Progress {
  const std::function<void(double)>& report;
  int64_t total, every;
  void operator()(int64_t done) const {
    if (report && (done % every == 0 || done == total)) report(double(done) / double(total));
  }
};

// One-shot: a full cache of N tokens, then a single round down to `keep`.
void run_one_shot(const SimulationConfig& c, PagedKvCache& cache, int seq, EvictionPolicy& policy, SimulationResult& r,
                  const Progress& progress) {
  for (int64_t t = 0; t < c.tokens; ++t) {
    cache.append(seq);
    progress(t + 1);
  }
  r.peak_blocks = cache.pool().num_used();
  EvictionSchedule round = c.schedule;
  round.budget = one_shot_keep(c);
  r.moves += evict_round(cache, seq, policy, round);
  r.rounds = 1;
}

// Streaming: the engine's loop without the model. After every token, a round if
// the live count reached budget + slack.
void run_streaming(const SimulationConfig& c, PagedKvCache& cache, int seq, EvictionPolicy& policy, SimulationResult& r,
                   const Progress& progress) {
  for (int64_t t = 0; t < c.tokens; ++t) {
    cache.append(seq);
    r.peak_blocks = std::max(r.peak_blocks, cache.pool().num_used());
    if (c.schedule.due(cache.sequence(seq).live)) {
      r.moves += evict_round(cache, seq, policy, c.schedule);
      ++r.rounds;
    }
    progress(t + 1);
  }
}

// The share of the workload's total importance held by the live tokens, seen from the end.
double importance_kept(const Workload& w, const std::vector<int64_t>& live, int64_t tokens) {
  double kept = 0, total = 0;
  for (int64_t p : live) kept += w.importance(p, tokens);
  for (int64_t p = 0; p < tokens; ++p) total += w.importance(p, tokens);
  return total > 0 ? kept / total : 0;
}

}  // namespace

SimulationResult simulate(const SimulationConfig& c) {
  check_simulation_config(c);
  // The workload and the random policy draw from different streams of the same seed.
  const Workload workload(c.workload, c.tokens, SplitMix64(c.seed ^ 0x5EED5EED5EED5EEDull).next());
  const std::unique_ptr<EvictionPolicy> policy = make_sim_policy(c.policy, c.seed, workload);

  SimulationResult r;
  r.tokens = c.tokens;
  r.block_size = c.block_size;
  r.bytes_per_token = c.bytes_per_token;
  r.blocks_full_cache = int(blocks_for_tokens(c.tokens, c.block_size));
  // A pool the size of the full cache is always enough: every block in use holds
  // at least one token, and all but the tail block were written full.
  PagedKvCache cache(r.blocks_full_cache, c.block_size, c.strategy, c.record_events ? &r.events : nullptr);
  const int seq = cache.add_sequence();

  const Progress progress{c.progress, c.tokens, std::max<int64_t>(1, c.tokens / 64)};
  if (c.streaming)
    run_streaming(c, cache, seq, *policy, r, progress);
  else
    run_one_shot(c, cache, seq, *policy, r, progress);

  r.live = cache.sequence(seq).live;
  r.blocks_in_use = int(cache.sequence(seq).blocks.size());
  r.importance_kept = importance_kept(workload, cache.live_positions(seq), c.tokens);
  return r;
}

int one_shot_keep(const SimulationConfig& c) {
  if (c.schedule.budget > 0) return int(std::min<int64_t>(c.schedule.budget, c.tokens));
  return int(c.tokens - std::llround(c.evict_fraction * double(c.tokens)));
}

}  // namespace kvscope
