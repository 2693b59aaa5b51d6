#include "scenarios.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "cache/kv_cache.h"
#include "cache/kv_storage.h"
#include "engine/generate.h"
#include "evict/policy.h"
#include "model/config.h"
#include "model/weights.h"
#include "serve/serve_bench.h"
#include "sim/synthetic.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/file.h"

namespace kvscope::viz {

namespace {

using MS = MemoryStrategy;

RunSettings one_shot(int64_t tokens, double evict, const std::string& policy, const std::string& workload) {
  RunSettings s;
  s.tokens = tokens;
  s.evict_fraction = evict;
  s.policy = policy;
  s.workload = workload;
  return s;  // sinks 0, recent 0: the pure law, as kvscope simulate's one-shot default
}

RunSettings streaming(int64_t tokens, int budget, int slack, const std::string& policy, const std::string& workload) {
  RunSettings s;
  s.streaming = true;
  s.tokens = tokens;
  s.budget = budget;
  s.slack = slack;
  s.sinks = 4;
  s.recent = 32;
  s.policy = policy;
  s.workload = workload;
  return s;
}

RunSettings model_run(const std::string& policy) {
  RunSettings s;
  s.source = Source::Model;
  s.policy = policy;
  s.tokens = 256;  // new tokens
  s.budget = 64;
  s.slack = 32;
  s.sinks = 4;
  s.recent = 16;
  return s;
}

std::vector<Scenario> make_scenarios() {
  std::vector<Scenario> v;
  v.push_back({"blog-16k-random",
               "16,000 tokens, 87.5% evicted at random in one round, blocks of 16: holes free ~12% of the blocks "
               "(0.875^16), compaction 87.5%",
               one_shot(16000, 0.875, "random", "uniform"), 12000});
  v.push_back({"blog-1k-random", "The same at 1,024 tokens: big enough slots to follow single tokens",
               one_shot(1024, 0.875, "random", "uniform"), 900});
  {
    Scenario s{"compaction-on-off",
               "Streaming, random policy: prune to 512 whenever 640 are live; holes only vs compaction, round by round",
               streaming(4096, 512, 128, "random", "uniform"), 4000};
    v.push_back(s);
  }
  {
    Scenario s{"streaming-budget",
               "Streaming with compaction: sinks + recency importance, budget 512 (+128 slack): the memory sawtooth",
               streaming(4096, 512, 128, "importance", "sinks-recency"), 4000};
    s.settings.strategies = {MS::Compact};
    v.push_back(s);
  }
  v.push_back({"clustered-16k",
               "Importance in bursts: evict 87.5% by importance; neighbours go together, so holes free more blocks",
               one_shot(16000, 0.875, "importance", "clustered"), 12000});
  {
    Scenario s{"reuse-vs-compact",
               "Streaming, random: hole reuse refills holes (memory stays, token order breaks) vs compaction",
               streaming(4096, 512, 128, "random", "uniform"), 4000};
    s.settings.strategies = {MS::ReuseHoles, MS::Compact};
    v.push_back(s);
  }
  {
    Scenario s{"three-sequences",
               "Three streaming sequences share one pool (importance in bursts), holes only vs compaction",
               streaming(3072, 384, 128, "importance", "clustered"), 6000};
    s.settings.sequences = 3;
    v.push_back(s);
  }
  v.push_back({"h2o-model",
               "The model reads its prompt and generates 256 tokens; H2O keeps 64 (+32 slack) by accumulated "
               "attention; holes vs compaction",
               model_run("h2o"), 600});
  {
    Scenario s{"serve-model",
               "The model serves 4 requests through a pool that holds the budget of 3: H2O keeps 64 each; the 4th "
               "waits until blocks come back (sooner with compaction); holes vs compaction",
               model_run("h2o"), 1500};
    s.settings.sequences = 4;
    s.settings.tokens = 192;
    v.push_back(s);
  }
  v.push_back({"triattention-model",
               "The model reads its prompt and generates 256 tokens; TriAttention keeps 64 by its pre-RoPE key "
               "scores (needs a calibration file); holes vs compaction",
               model_run("triattention"), 600});
  return v;
}

// ---- synthetic ----------------------------------------------------------------

// The workload simulate() draws for a config: it seeds it from its own stream of
// the seed (sim/synthetic.cpp). tests/viz_timeline_test.cpp checks that the
// importance policy's choices agree with this copy.
std::shared_ptr<const Workload> simulate_workload(const SimulationConfig& c) {
  return std::make_shared<const Workload>(c.workload, c.tokens, SplitMix64(c.seed ^ 0x5EED5EED5EED5EEDull).next());
}

SimulationConfig sim_config(const RunSettings& s, MemoryStrategy strategy) {
  SimulationConfig c;
  c.tokens = s.tokens;
  c.block_size = s.block_size;
  c.strategy = strategy;
  c.policy = s.policy;
  c.workload = s.workload;
  c.seed = s.seed;
  c.streaming = s.streaming;
  c.evict_fraction = s.evict_fraction;
  c.schedule = {s.streaming ? s.budget : 0, s.slack, s.sinks, s.recent};
  c.record_events = true;
  return c;
}

// What one token's K/V costs, factor by factor (KvStorage::bytes_per_slot: the cache
// keeps f32, whatever the weights' dtype):
// "2 (K, V) x 28 layers x 8 KV heads x 128 dims x 4 bytes (f32 cache), Qwen3-0.6B".
std::string token_cost(int layers, int kv_heads, int head_dim, const std::string& what) {
  return "2 (K, V) x " + std::to_string(layers) + " layers x " + std::to_string(kv_heads) + " KV heads x " +
         std::to_string(head_dim) + " dims x 4 bytes (f32 cache), " + what;
}

void describe_synthetic(Run& run, const RunSettings& s, MemoryStrategy strategy) {
  run.label = strategy_name(strategy);
  run.source = "synthetic";
  run.policy = s.policy;
  run.sequences = s.sequences;
  run.bytes_per_token = kQwen3_0_6B_F32_BytesPerToken;
  static_assert(kQwen3_0_6B_F32_BytesPerToken == 2 * 28 * 8 * 128 * 4);
  run.token_cost = token_cost(28, 8, 128, "Qwen3-0.6B");
  run.header.block_size = s.block_size;
  run.header.strategy = strategy;
  run.header.meta = {{"source", "synthetic"},
                     {"policy", s.policy},
                     {"workload", s.workload},
                     {"seed", std::to_string(s.seed)},
                     {"tokens", std::to_string(s.tokens)},
                     {"mode", s.streaming ? "streaming" : "one-shot"},
                     {"sinks", std::to_string(s.sinks)},
                     {"recent", std::to_string(s.recent)},
                     {"sequences", std::to_string(s.sequences)}};
}

std::shared_ptr<Run> record_simulate(const RunSettings& s, MemoryStrategy strategy) {
  auto run = std::make_shared<Run>();
  describe_synthetic(*run, s, strategy);
  const SimulationConfig c = sim_config(s, strategy);
  SimulationResult r = simulate(c);
  run->header.num_blocks = r.blocks_full_cache;
  run->events = std::move(r.events);
  if (s.policy == "importance") {
    auto w = simulate_workload(c);
    run->importance = [w](int, int64_t pos, int64_t now) { return w->importance(pos, now); };
  }
  return run;
}

// Several sequences over one pool, interleaved token by token. Sequence k has
// its own workload (seed + k) and policy, a length of tokens x {1, 0.75, 0.9, 0.6}
// and starts tokens/8 x k steps late, so the rounds do not line up.
std::shared_ptr<Run> record_shared_pool(const RunSettings& s, MemoryStrategy strategy) {
  auto run = std::make_shared<Run>();
  describe_synthetic(*run, s, strategy);
  const int n = s.sequences;
  static const double kLength[] = {1.0, 0.75, 0.9, 0.6};
  std::vector<int64_t> length(static_cast<size_t>(n)), start(static_cast<size_t>(n));
  int64_t blocks = 0;
  for (int k = 0; k < n; ++k) {
    length[size_t(k)] = std::max<int64_t>(1, std::llround(double(s.tokens) * kLength[k % 4]));
    start[size_t(k)] = s.tokens / 8 * k;
    blocks += blocks_for_tokens(length[size_t(k)], s.block_size);
  }
  run->header.num_blocks = int(blocks);

  std::vector<std::shared_ptr<const Workload>> workloads;
  std::vector<std::unique_ptr<EvictionPolicy>> policies;
  for (int k = 0; k < n; ++k) {
    SimulationConfig c = sim_config(s, strategy);
    c.tokens = length[size_t(k)];
    c.seed = s.seed + uint64_t(k);
    check_simulation_config(c);
    workloads.push_back(simulate_workload(c));
    if (s.policy == "importance")
      policies.push_back(std::make_unique<ImportancePolicy>(*workloads.back()));
    else
      policies.push_back(make_policy(s.policy, c.seed));
  }
  EvictionSchedule schedule{s.streaming ? s.budget : 0, s.slack, s.sinks, s.recent};

  PagedKvCache cache(int(blocks), s.block_size, strategy, &run->events);
  for (int k = 0; k < n; ++k) cache.add_sequence();
  const int64_t steps = *std::max_element(start.begin(), start.end()) + *std::max_element(length.begin(), length.end());
  for (int64_t t = 0; t < steps; ++t)
    for (int k = 0; k < n; ++k) {
      if (t < start[size_t(k)] || cache.sequence(k).next_pos >= length[size_t(k)]) continue;
      cache.append(k);
      if (s.streaming && schedule.due(cache.sequence(k).live)) evict_round(cache, k, *policies[size_t(k)], schedule);
    }
  if (!s.streaming)
    for (int k = 0; k < n; ++k) {
      EvictionSchedule round = schedule;
      round.budget = int(length[size_t(k)] - std::llround(s.evict_fraction * double(length[size_t(k)])));
      evict_round(cache, k, *policies[size_t(k)], round);
    }
  if (s.policy == "importance")
    run->importance = [workloads](int seq, int64_t pos, int64_t now) {
      return workloads[size_t(seq)]->importance(pos, now);
    };
  return run;
}

// ---- model ----------------------------------------------------------------------

// A policy that passes everything through and writes down the scores of each round.
class RecordingPolicy : public EvictionPolicy {
 public:
  RecordingPolicy(std::unique_ptr<EvictionPolicy> inner, Run& run, int seq)
      : inner_(std::move(inner)), run_(run), seq_(seq) {}
  std::string name() const override { return inner_->name(); }
  bool needs_attention() const override { return inner_->needs_attention(); }
  int window() const override { return inner_->window(); }
  void observe(const std::vector<int64_t>& pos, const std::vector<float>& attention, int n_queries) override {
    inner_->observe(pos, attention, n_queries);
  }
  std::vector<float> scores(const ScoreContext& ctx) override {
    std::vector<float> s = inner_->scores(ctx);
    // The engine scores right after begin_round: the last event is the RoundBegin.
    run_.round_scores.push_back({run_.events.empty() ? 0 : run_.events.size() - 1, seq_, ctx.pos, s});
    return s;
  }
  void forget(const std::vector<int64_t>& evicted) override { inner_->forget(evicted); }

 private:
  std::unique_ptr<EvictionPolicy> inner_;
  Run& run_;
  int seq_;
};

std::string find_calibration(const ModelSource& m) {
  if (!m.calibration.empty()) return m.calibration;
  if (const std::string in_folder = m.dir + "/triattention-calibration.json"; file_exists(in_folder)) return in_folder;
  throw Error("TriAttention needs a calibration file of the model's query centres, and " + m.dir +
              " has none (looked for triattention-calibration.json): make one with `kvscope calibrate --model " +
              m.dir + " --text FILE --out calib.json` and pass --calibration calib.json");
}

// Model, 2+ sequences: that many requests (the prompt from different starts) served
// by core/serve/scheduler.h through a pool that holds the eviction budget of one
// fewer, so the last waits until blocks come back; greedy. Never fewer blocks than the
// longest request's every token: under holes only a request can pin them all, and one
// that outgrows the pool alone has no one left to preempt.
void record_serving(Run& run, const RunSettings& s, MemoryStrategy strategy, const Model& model,
                    const Tokenizer& tokenizer, const std::vector<int>& prompt, int new_tokens,
                    const EvictionSchedule& schedule, const PolicyFactory& inner) {
  const int n = s.sequences, chunk = 32;
  std::vector<std::vector<int>> prompts;
  for (int k = 0; k < n; ++k) prompts.emplace_back(prompt.begin() + long(prompt.size() * size_t(k) / size_t(2 * n)), prompt.end());
  EngineConfig c;
  c.block_size = s.block_size;
  c.strategy = strategy;
  c.schedule = schedule;
  c.num_blocks = int(std::max((n - 1) * blocks_for_tokens(s.budget + s.slack + chunk, s.block_size),
                              blocks_for_tokens(int64_t(prompts[0].size()) + new_tokens, s.block_size)));
  auto next_seq = std::make_shared<int>(0);  // the engine numbers its sequences 0, 1, ... as it adds them
  Run* r = &run;
  c.policy = [inner, r, next_seq] { return std::make_unique<RecordingPolicy>(inner(), *r, (*next_seq)++); };
  const ServeRun served = serve_requests(model, strategy_name(strategy), c, {chunk, tokenizer.vocab_size()}, prompts,
                                         new_tokens, {}, &run.events);
  run.sequences = *next_seq;
  run.token_text.assign(size_t(*next_seq), {});
  for (const Request& q : served.requests) {
    std::vector<std::string> text;
    for (int i = 0; i < q.context(); ++i) text.push_back(printable(tokenizer.token_bytes(q.token(i))));
    for (int seq : q.seqs) run.token_text[size_t(seq)] = text;  // a recomputed sequence holds the same tokens
  }
  run.header = {s.block_size, c.num_blocks, strategy,
                {{"source", "serve"}, {"policy", s.policy}, {"budget", std::to_string(s.budget)},
                 {"slack", std::to_string(s.slack)}, {"requests", std::to_string(n)},
                 {"preemptions", std::to_string(served.stats.preemptions)}}};
}

// Model, one sequence: the prompt and new_tokens sampled tokens (temperature 0.7,
// top-k 40, top-p 0.95, the settings' seed), in a pool just big enough for all of them.
void record_generation(Run& run, const RunSettings& s, MemoryStrategy strategy, const Model& model,
                       const std::string& model_dir, const Tokenizer& tokenizer, const std::vector<int>& prompt,
                       int new_tokens, const EvictionSchedule& schedule, const PolicyFactory& inner) {
  const int total = int(prompt.size()) + new_tokens;
  GenerateOptions o;
  o.max_new_tokens = new_tokens;
  o.sampler = {0.7, 40, 0.95, s.seed};
  o.vocab_limit = tokenizer.vocab_size();  // no stop ids: the run keeps its length
  o.engine.block_size = s.block_size;
  o.engine.strategy = strategy;
  o.engine.schedule = schedule;
  o.engine.num_blocks = int(blocks_for_tokens(total, s.block_size));
  Run* r = &run;
  o.engine.policy = [inner, r] { return std::make_unique<RecordingPolicy>(inner(), *r, 0); };
  o.events = &run.events;
  std::vector<int> ids = prompt;
  generate(model, prompt, o, [&](int token) { ids.push_back(token); });
  run.token_text.emplace_back();
  for (int id : ids) run.token_text[0].push_back(printable(tokenizer.token_bytes(id)));
  run.header = {s.block_size, o.engine.num_blocks, strategy,
                {{"source", "model"}, {"model", model_dir}, {"policy", s.policy}, {"budget", std::to_string(s.budget)},
                 {"slack", std::to_string(s.slack)}, {"seed", std::to_string(s.seed)}}};
}

Recording record_model(const RunSettings& s, const ModelSource& m) {
  Recording rec;
  rec.settings = s;
  const std::string calibration = s.policy == "triattention" ? find_calibration(m) : "";
  const Model model = load_model(m.dir);
  const Tokenizer tokenizer = Tokenizer::load(m.dir + "/tokenizer.json");
  const std::string text = s.prompt.empty() ? builtin_prompt() : s.prompt;
  if (tokenizer.encode(text).empty()) throw Error("the prompt is empty");
  std::vector<int> prompt = tokenizer.with_special_tokens(tokenizer.encode(text));  // BOS first, if the model has one
  // Fit the model's context: at most half of it for the prompt, the rest to generate.
  const int context = model.config.max_position_embeddings;
  if (int(prompt.size()) > std::min(384, context / 2)) prompt.resize(size_t(std::min(384, context / 2)));
  const int new_tokens = int(std::min<int64_t>(s.tokens, context - int(prompt.size())));
  if (new_tokens < int(s.tokens))
    rec.note = "the model's context is " + std::to_string(context) + " tokens: " + std::to_string(prompt.size()) +
               " prompt + " + std::to_string(new_tokens) + " new";
  const EvictionSchedule schedule{s.budget, s.slack, s.sinks, s.recent};
  schedule.validate();
  check_budget_holds_the_window(s.policy, schedule);
  const PolicyFactory inner = policy_factory(s.policy, s.seed, calibration, model.config);

  for (MemoryStrategy strategy : s.strategies) {
    auto run = std::make_shared<Run>();
    run->label = strategy_name(strategy);
    run->source = "model";
    run->policy = s.policy;
    run->bytes_per_token = int64_t(KvStorage::bytes_per_slot(model.config));
    run->token_cost = token_cost(model.config.num_layers, model.config.num_kv_heads, model.config.head_dim,
                                 m.dir == bundled_model_dir() ? "the bundled model" : file_name(m.dir));
    if (s.sequences > 1)
      record_serving(*run, s, strategy, model, tokenizer, prompt, new_tokens, schedule, inner);
    else
      record_generation(*run, s, strategy, model, m.dir, tokenizer, prompt, new_tokens, schedule, inner);
    rec.runs.push_back(run);
  }
  if (model.config.hidden_size <= 64 && rec.note.empty())
    rec.note = "a tiny model: its attention is near-uniform, so the scores and the text mean little; "
               "the model views become meaningful with a trained model";
  return rec;
}

}  // namespace

const std::vector<Scenario>& scenarios() {
  static const std::vector<Scenario> v = make_scenarios();
  return v;
}

const Scenario* find_scenario(const std::string& name) {
  for (const Scenario& s : scenarios())
    if (s.name == name) return &s;
  return nullptr;
}

std::string bundled_model_dir() {
  const std::string dir = std::string(KVSCOPE_ASSETS_DIR) + "/model";
  return file_exists(dir + "/config.json") ? dir : "";
}

const std::string& builtin_prompt() {
  static const std::string text =
      "A decoder appends a key and a value for every token at every layer, and a serving engine keeps them in a "
      "paged cache: fixed blocks of sixteen slots, a block table per sequence, and a pool of free blocks. When the "
      "cache grows too large, an eviction policy keeps the tokens that matter and drops the rest. The tokens worth "
      "keeping are scattered, so most blocks keep a few survivors and stay in use. Compaction slides the survivors "
      "forward in token order, and whole blocks go back to the pool. What counts is the blocks given back, not the "
      "tokens evicted.";
  return text;
}

const std::vector<std::string>& policies_for(Source source) {
  static const std::vector<std::string> synthetic = {"random", "streaming", "importance"};
  static const std::vector<std::string> model = {"h2o", "snapkv", "streaming", "random", "triattention"};
  return source == Source::Synthetic ? synthetic : model;
}

Recording record(const RunSettings& settings, const ModelSource& model) {
  if (settings.strategies.empty() || settings.strategies.size() > 2)
    throw Error("choose one or two memory strategies to show");
  if (settings.sequences < 1 || settings.sequences > 4) throw Error("sequences must be between 1 and 4");
  if (settings.source == Source::Model) {
    if (!model.dir.empty()) {
      check_model_folder(model.dir);
      return record_model(settings, model);
    }
    // No model: the synthetic stand-in with the same schedule shape.
    RunSettings s = settings;
    s.source = Source::Synthetic;
    s.policy = "importance";
    s.workload = "sinks-recency";
    s.streaming = true;
    s.tokens = 2048;
    s.budget = 256;
    s.slack = 64;
    s.sinks = 4;
    s.recent = 32;
    Recording rec = record(s, model);
    rec.note = "no model (assets/model is not there yet; pass --model DIR, e.g. tests/models/tiny-tied): showing the "
               "synthetic stand-in, importance = sinks + recency";
    return rec;
  }
  Recording rec;
  rec.settings = settings;
  for (MemoryStrategy strategy : settings.strategies)
    rec.runs.push_back(settings.sequences == 1 ? record_simulate(settings, strategy)
                                               : record_shared_pool(settings, strategy));
  return rec;
}

}  // namespace kvscope::viz
