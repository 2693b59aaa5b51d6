// kvscope serve-bench: many requests, one pool, under each memory strategy.
//
//   kvscope serve-bench [--model DIR | --config FILE [--layers N]] [--blocks N] [--requests N]
//                       [--prompt-len N] [--output-len N] [--policy h2o] [--budget 64]
//                       [--strategies none,holes,reuse,compact] [--repeat 3] [--json FILE]
//                       [--device cpu|cuda]
//
// Prompts are slices of held-out text (--text; default: the model folder's
// heldout.txt, else the bundled model's, as eval and heads take it), or random
// token ids for --config's random model. --config builds a model of that shape with random bf16
// weights (as `kvscope bench decode` does): one whose weights, not its per-token
// work, set the cost of a step. Every strategy serves the same requests through a pool of
// --blocks blocks; the table says how many sequences ran at once, how fast, how
// often a request was preempted, and what compaction moved. --json writes the
// numbers and the blocks in use after every step (tutorials/08-many-requests-one-pool/plot_serve.py draws them).
// The timings (tokens/s, wall time) are the median of --repeat runs of each
// strategy, taken in turn (none, holes, ..., none, holes, ...) so that a slow
// moment of a shared machine does not land on one strategy; every other column is
// the same in every run, and a run that differs stops the benchmark.
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cache/kv_cache.h"
#include "cli/bench_util.h"
#include "cache/occupancy.h"
#include "cache/trace.h"
#include "cli/commands.h"
#include "evict/policy.h"
#include "model/weights.h"
#include "serve/serve_bench.h"
#include "tokenizer/tokenizer.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/file.h"
#include "util/format.h"
#include "util/memory_check.h"
#include "util/splitmix64.h"

namespace kvscope::cli {

namespace {

struct ServeBenchArgs {
  std::string model_dir = bundled_model_dir();
  std::string text;  // default: MODEL/heldout.txt when there is one
  std::string config;  // a config.json: random weights of its shape instead of --model
  int layers = 0;      // with --config: keep only this many layers (0 = all)
  int blocks = 96;
  int block_size = 16;
  int requests = 32;
  int prompt_len = 256;
  int output_len = 256;
  int chunk = 64;
  std::string policy = "h2o";
  int budget = 64;
  int slack = 32;
  int sinks = 4;
  int recent = 32;
  std::vector<std::string> strategies = {"none", "holes", "reuse", "compact"};
  std::string calibration;
  std::string json;
  std::string trace;  // the events of the last strategy's run
  uint64_t seed = 1;
  bool seed_given = false;  // --seed was on the command line
  int threads = 0;
  int repeat = 3;  // runs of each strategy; the timings shown are their median
  std::string device = "cpu";
};

// The flags that need no model, checked before loading one.
void check_args(const ServeBenchArgs& a) {
  check_block_size(a.block_size);
  if (a.strategies.empty()) throw Error("--strategies: name at least one of none, holes, reuse, compact");
  const EvictionSchedule schedule{a.budget, a.slack, a.sinks, a.recent};
  schedule.validate();
  check_budget_holds_the_window(a.policy, schedule);
  if (!a.calibration.empty() && a.policy != "triattention")
    throw Error("--calibration is for --policy triattention, not " + a.policy);
  // Said before the run, not after it: each request is a sequence of the trace.
  if (!a.trace.empty() && a.requests > kMaxSequenceId)
    throw Error("--trace: a trace holds at most " + std::to_string(kMaxSequenceId) + " sequences, and each of the " +
                std::to_string(a.requests) + " requests is one (each preemption one more): lower --requests");
}

// The most live tokens a request holds after a step that is not its last: a request's
// last step runs no eviction round (its blocks are released), so a round must start
// by then. With 2+ new tokens that is the step before the last decode (context - 1);
// with 1, the last prefill chunk is the last step, and the chunks before it end at a
// multiple of --chunk.
int64_t live_before_last_step(const ServeBenchArgs& a, int64_t context) {
  if (a.output_len >= 2) return context - 1;
  return int64_t(a.prompt_len - 1) / a.chunk * a.chunk;
}

// One request, against the model's positions and the pool, under every strategy:
// said before the model loads or any run starts, with the way out (the scheduler
// would refuse the first request of that run).
void check_a_request_fits(const ServeBenchArgs& a, int max_position_embeddings) {
  const int64_t context = int64_t(a.prompt_len) + a.output_len - 1;  // the last new token is never fed
  if (context > max_position_embeddings)
    throw Error("--prompt-len " + std::to_string(a.prompt_len) + " + --output-len " + std::to_string(a.output_len) +
                " exceed the model's max_position_embeddings (" + std::to_string(max_position_embeddings) +
                "): lower either");
  const int64_t most = live_before_last_step(a, context);
  const std::string why = a.output_len >= 2 ? "--prompt-len + --output-len - 2"
                                            : "its prompt's chunks of --chunk before the last";
  EngineConfig evicting;
  evicting.schedule = {a.budget, a.slack, a.sinks, a.recent};
  for (const std::string& strategy : a.strategies) {
    const EvictionSchedule s = engine_for_strategy(strategy, evicting).schedule;  // "none": no budget
    const bool evicts = s.enabled();
    if (evicts && s.round_starts_at() > most)  // its row would be "none" under another name
      throw Error("--budget " + std::to_string(s.budget) + " + --slack " + std::to_string(s.slack) + " = " +
                  std::to_string(s.round_starts_at()) + " live tokens start a round, and a request holds at most " +
                  std::to_string(most) + " before its last step, which runs none (" + why +
                  "): nothing would be evicted under " + strategy +
                  "; lower --budget or --slack, or raise the lengths");
    const int need = blocks_a_request_needs(s, int(context), a.chunk, a.block_size);
    if (need <= a.blocks) continue;
    // Which bound it is: what rounds leave room for, or (shorter) the whole context.
    const int64_t live = most_live_tokens(s, int(context), a.chunk);
    const std::string bound =
        !evicts ? "its whole context of " + std::to_string(context) + " tokens, with nothing evicted): give --blocks " +
                      std::to_string(need) + ", or leave none out of --strategies"
        : live < context
            ? "up to budget + slack - 1 tokens between rounds, plus a prefill chunk: " +
                  std::to_string(live) + "): give --blocks " + std::to_string(need) +
                  ", or lower --budget, --slack or --chunk"
            : "its whole context of " + std::to_string(context) + " tokens, no more than budget + slack - 1 + a " +
                  "prefill chunk): give --blocks " + std::to_string(need) + ", or lower --prompt-len or --output-len";
    throw Error("--blocks " + std::to_string(a.blocks) + ": under strategy " + strategy + " one request needs " +
                std::to_string(need) + " blocks of " + std::to_string(a.block_size) + " at once (" + bound);
  }
}

// What the requests themselves hold, before any K/V: the prompts, and in every
// strategy's kept run (and the one running) each request's copy of its prompt and
// its output. A lower bound, said before the model loads; --requests 2147483647
// was "out of memory" from somewhere inside.
void check_requests_fit_in_memory(const ServeBenchArgs& a) {
  const double ints = sizeof(int), per_request = sizeof(Request) + (double(a.prompt_len) + a.output_len) * ints;
  const double runs = double(a.strategies.size()) + 1;
  const double bytes = double(a.requests) * (double(a.prompt_len) * ints + sizeof(std::vector<int>) + runs * per_request);
  check_fits_in_memory(size_t(std::min(bytes, 1e18)),
                       std::to_string(a.requests) + " requests of " + std::to_string(a.prompt_len) + " + " +
                           std::to_string(a.output_len) + " tokens, kept for " + std::to_string(a.strategies.size()) +
                           (a.strategies.size() == 1 ? " strategy" : " strategies") + " (lower --requests)");
}

// Request i's prompt: `len` tokens of the text from offset i * len (wrapping), or
// random ids below `vocab` when there is no text.
std::vector<std::vector<int>> make_prompts(const std::vector<int>& text, int n, int len, int vocab, uint64_t seed) {
  std::vector<std::vector<int>> prompts(static_cast<size_t>(n));
  SplitMix64 rng(seed);
  for (int i = 0; i < n; ++i) {
    for (int t = 0; t < len; ++t) {
      const size_t at = (size_t(i) * len + t) % (text.empty() ? 1 : text.size());
      prompts[i].push_back(text.empty() ? int(rng.next() % uint64_t(vocab)) : text[at]);
    }
  }
  return prompts;
}

// The same requests under the same strategy must do the same work every time.
bool same_work(const ServeRun& x, const ServeRun& y) {
  const ServeStats &a = x.stats, &b = y.stats;
  return a.steps == b.steps && a.peak_running == b.peak_running && a.preemptions == b.preemptions &&
         a.recomputed_tokens == b.recomputed_tokens && a.generated_tokens == b.generated_tokens &&
         a.bytes_moved == b.bytes_moved && a.blocks_in_use == b.blocks_in_use && a.peak_blocks == b.peak_blocks &&
         a.running == b.running && a.holding == b.holding && x.finished == y.finished;
}

nlohmann::json to_json(const ServeBenchArgs& a, int layers, const std::vector<ServeRun>& runs) {
  nlohmann::json rows = nlohmann::json::array();
  for (const ServeRun& r : runs)
    rows.push_back({{"strategy", r.strategy}, {"backend", r.backend}, {"peak_running", r.stats.peak_running},
                    {"mean_running", r.mean_running()}, {"tokens_per_second", r.tokens_per_second()},
                    {"preemptions", r.stats.preemptions}, {"recomputed_tokens", r.stats.recomputed_tokens},
                    {"generated_tokens", r.stats.generated_tokens},
                    {"bytes_moved", r.stats.bytes_moved}, {"steps", r.stats.steps}, {"finished", r.finished},
                    {"seconds", r.seconds}, {"blocks_in_use", r.stats.blocks_in_use},
                    {"peak_blocks", r.stats.peak_blocks}, {"running", r.stats.running},
                    {"holding", r.stats.holding}});
  // The eviction settings as the runs used them: none when no strategy evicts.
  const bool evicts = std::any_of(a.strategies.begin(), a.strategies.end(), [](const std::string& s) { return s != "none"; });
  const bool random = !a.config.empty();
  return {{random ? "config" : "model", absolute_path(random ? a.config : a.model_dir)},
          {"layers", layers},  // the model's as run (--layers 0 means all of them)
          {"device", a.device},
          {"threads", omp_get_max_threads()},  // as the runs had them (--threads, else every core)
          {"seed", a.seed},
          {"blocks", a.blocks},
          {"block_size", a.block_size},
          {"requests", a.requests},
          {"prompt_len", a.prompt_len},
          {"output_len", a.output_len},
          {"chunk", a.chunk},
          {"policy", evicts ? a.policy : "none"},
          {"budget", evicts ? a.budget : 0},
          {"slack", evicts ? a.slack : 0},
          {"sinks", evicts ? a.sinks : 0},
          {"recent", evicts ? a.recent : 0},
          {"repeat", a.repeat},
          {"runs", rows}};
}

// The shape of the model served, from its config.json alone: --model's, or --config's
// cut to its first --layers layers.
ModelConfig served_shape(const ServeBenchArgs& a) {
  if (a.config.empty()) return load_config_file(a.model_dir + "/config.json");
  ModelConfig shape = load_config_file(a.config);
  if (a.layers > shape.num_layers)
    throw Error("--layers " + std::to_string(a.layers) + ": " + a.config + " has only " +
                std::to_string(shape.num_layers) + " layers");
  if (a.layers > 0) shape.num_layers = a.layers;
  return shape;
}

// The model served: --model's, or with --config random bf16 weights of that shape.
Model served_model(const ServeBenchArgs& a, const ModelConfig& shape) {
  if (a.config.empty()) return load_model(a.model_dir);
  std::fprintf(stderr, "building a random bf16 model of %s's shape (%s)...\n", a.config.c_str(),
               plural(shape.num_layers, "layer").c_str());
  return random_model(shape, DType::BF16, a.seed);
}

// The lines above the table: the model and the requests, the pool, eviction, the machine.
void print_setup(const ServeBenchArgs& a, const std::string& model_name, const std::string& text, size_t block_bytes) {
  const int full_blocks = int(blocks_for_tokens(a.prompt_len + a.output_len - 1, a.block_size));
  std::printf("kvscope serve-bench: %s, %s of %d prompt + %s (prompts: %s), greedy\n",
              model_name.c_str(), plural(a.requests, "request").c_str(), a.prompt_len,
              plural(a.output_len, "new token").c_str(),
              text.empty() ? "random token ids" : shown_path(text).c_str());
  std::printf("pool: %s of %s (%.2f MB of K/V); a request's whole context takes %s, so %d fit without eviction\n",
              plural(a.blocks, "block").c_str(), plural(a.block_size, "token").c_str(),
              double(a.blocks) * block_bytes / 1e6, plural(full_blocks, "block").c_str(), a.blocks / full_blocks);
  const bool evicts = std::any_of(a.strategies.begin(), a.strategies.end(), [](const std::string& s) { return s != "none"; });
  if (evicts)
    std::printf("eviction: policy %s, budget %d tokens per sequence (rounds at +%d), sinks %d, recent %d; "
                "prefill in chunks of %d\n",
                a.policy.c_str(), a.budget, a.slack, a.sinks, a.recent, a.chunk);
  else
    std::printf("eviction: none (--strategies none); prefill in chunks of %d\n", a.chunk);
  const int threads = omp_get_max_threads();
  std::printf("machine: %s, %s%s\n\n", cpu_name().c_str(), plural(threads, "thread").c_str(),
              a.device == "cuda" ? ("; the model runs on " + gpu_name()).c_str() : "");
  std::fflush(stdout);
}

// One line on stderr, redrawn in place: the strategy, the run, the requests done.
void print_progress(const std::string& strategy, int run, int runs, int done, int total, double seconds) {
  const int width = 30, filled = width * done / total;
  std::fprintf(stderr, "\rserve-bench %-7s run %d/%d [%s%s] %d/%d requests, %.0f s", strategy.c_str(), run, runs,
               std::string(size_t(filled), '#').c_str(), std::string(size_t(width - filled), '.').c_str(), done, total,
               seconds);
  std::fflush(stderr);
}

// The requests' prompts, and the text they are cut from: the held-out text (its path
// and its token ids), or no text and random ids for a random model, or where not even
// the bundled model's text is here.
struct Prompts {
  std::string text;                         // the text file, or "" for random ids
  std::vector<int> text_ids;                // [tokens of the text]
  std::vector<std::vector<int>> prompts;    // [requests][prompt_len]
  int vocab_limit = 0;                      // the tokenizer's ids: sampling stays below (0: a random model, all)
};
Prompts served_prompts(const ServeBenchArgs& a, const ModelConfig& c, bool random) {
  Prompts p;
  p.text = random ? "" : held_out_text(a.text, a.model_dir);
  if (!random && a.text.empty() && !file_exists(p.text)) p.text.clear();
  if (!random) {
    const Tokenizer tokenizer = Tokenizer::load(a.model_dir + "/tokenizer.json");
    p.vocab_limit = tokenizer.vocab_size();  // embed_tokens may have rows no token has (Qwen3: 151936 vs 151669)
    if (!p.text.empty()) p.text_ids = tokenizer.encode(read_text_file(p.text));
  }
  if (!p.text.empty() && p.text_ids.empty()) throw file_error(p.text, "has no tokens");
  if (!p.text.empty() && p.text_ids.size() < size_t(a.prompt_len))  // a prompt would repeat it
    throw file_error(p.text, "has " + plural(int64_t(p.text_ids.size()), "token") + ", fewer than --prompt-len " +
                                 std::to_string(a.prompt_len) + ": give a longer --text or a smaller --prompt-len");
  p.prompts = make_prompts(p.text_ids, a.requests, a.prompt_len, c.vocab_size, a.seed);
  return p;
}

// The engine of the evicting strategies: the pool, the schedule, the policy (TriAttention
// calibrated by the model folder's file when --calibration is not given), the device.
EngineConfig evicting_engine(const ServeBenchArgs& a, const ModelConfig& c, bool random, BackendFactory backend) {
  EngineConfig e;
  e.num_blocks = a.blocks;
  e.block_size = a.block_size;
  e.schedule = {a.budget, a.slack, a.sinks, a.recent};
  e.policy = policy_factory(a.policy, a.seed, random ? a.calibration : calibration_file(a.calibration, a.model_dir), c);
  e.backend = std::move(backend);
  return e;
}

// --trace's header: the pool, the last strategy's name and settings, its preemptions and, when the
// prompts are the model's text, the tokens of every sequence (the viewer shows them
// as words; a request preempted and recomputed holds the same tokens again).
TraceHeader trace_header(const ServeBenchArgs& a, const EngineConfig& evicting, size_t block_bytes,
                         const std::vector<int>& text_ids, const std::vector<Request>& requests) {
  const std::string& last = a.strategies.back();
  const bool random = !a.config.empty();
  TraceHeader header{a.block_size, a.blocks, engine_for_strategy(last, evicting).strategy,
                     {{"source", "serve-bench"}, {random ? "config" : "model", absolute_path(random ? a.config : a.model_dir)},
                      {"policy", last == "none" ? "none" : a.policy},
                      {"budget", std::to_string(last == "none" ? 0 : a.budget)},
                      {"requests", std::to_string(a.requests)},
                      {"bytes_per_token", std::to_string(block_bytes / size_t(a.block_size))}}};
  int preemptions = 0;
  for (const Request& q : requests) preemptions += q.preemptions;
  header.meta["preemptions"] = std::to_string(preemptions);
  if (!text_ids.empty())
    for (const Request& q : requests) {
      std::vector<int> ids(size_t(q.context()));
      for (int i = 0; i < q.context(); ++i) ids[size_t(i)] = q.token(i);
      for (int seq : q.seqs) header.meta["tokens." + std::to_string(seq)] = token_ids_value(ids);
    }
  return header;
}

// Every strategy, --repeat times, taken in turn (none, holes, ..., none, holes, ...).
// Returns each strategy's first run, its seconds the median of its runs. The last
// strategy's first run records its events into `events` when --trace is given; if the
// pool refuses one of its steps, `write_the_trace` writes the run up to that step.
std::vector<ServeRun> serve_every_strategy(const ServeBenchArgs& a, const Model& model, const EngineConfig& evicting,
                                           const ServeConfig& serve, const std::vector<std::vector<int>>& prompts,
                                           EventLog& events,
                                           const std::function<void(const std::vector<Request>&)>& write_the_trace) {
  const bool bar = isatty(STDERR_FILENO);  // a progress bar for people, not for logs
  std::vector<ServeRun> runs;                                   // [strategy]: the first run's
  std::vector<std::vector<double>> seconds(a.strategies.size());  // [strategy][repeat]
  if (!prompts.empty()) warm_up(model, evicting, prompts.front());  // untimed
  for (int r = 0; r < a.repeat; ++r)
    for (size_t i = 0; i < a.strategies.size(); ++i) {
      const std::string& strategy = a.strategies[i];
      const bool record = !a.trace.empty() && i + 1 == a.strategies.size() && r == 0;
      const double t0 = now_seconds();
      LogProgress log;  // without a terminal: a line every 10 s
      const auto progress = [&](int done, int total) {
        if (bar) print_progress(strategy, r + 1, a.repeat, done, total, now_seconds() - t0);
        else if (done < total && log.due())
          std::fprintf(stderr, "serve-bench %s run %d/%d: %d/%d requests, %.0f s\n", strategy.c_str(), r + 1, a.repeat,
                       done, total, now_seconds() - t0);
      };
      ServeRun run;
      std::vector<Request> stopped;  // the requests as they stood, when a step is refused
      try {
        run = serve_requests(model, strategy, evicting, serve, prompts, a.output_len, progress,
                             record ? &events : nullptr, record ? &stopped : nullptr);
      } catch (const PoolExhausted& e) {
        if (bar) std::fputc('\n', stderr);
        if (r == 0 && !runs.empty()) {  // the strategies that finished are not lost: their rows, then the error
          std::fputs(markdown_table(runs).c_str(), stdout);
          std::printf("\n%s did not finish: its pool ran out (below)\n", strategy.c_str());
          std::fflush(stdout);  // before the error, on stderr
        }
        // The run up to the refused step is a whole trace (the step ran nothing): it
        // shows what filled the pool. No --json: the finished rows are above.
        std::string what = e.what();
        if (record) what += trace_of_the_refused_run(a.trace, [&] { write_the_trace(stopped); });
        else if (!a.trace.empty())  // it records the last strategy, which never ran
          what += " (--trace " + a.trace + " not written: it records " + a.strategies.back() + ", which did not run)";
        if (!a.json.empty()) what += " (--json " + a.json + " not written)";
        throw PoolExhausted(what);
      }
      if (bar) std::fputc('\n', stderr);
      seconds[i].push_back(run.seconds);
      if (r == 0) runs.push_back(std::move(run));
      else if (!same_work(run, runs[i]))
        throw Error("serve-bench: run " + std::to_string(r + 1) + " of " + strategy +
                    " did different work from run 1 (steps, batches, preemptions or blocks); the scheduler is not "
                    "deterministic");
    }
  for (size_t i = 0; i < runs.size(); ++i) runs[i].seconds = median(seconds[i]);
  return runs;
}

// The table, the line that says how it was measured, and --json (of a model of `layers` layers).
void print_results(const ServeBenchArgs& a, int layers, const std::vector<ServeRun>& runs) {
  std::fputs(markdown_table(runs).c_str(), stdout);
  const std::string timed = a.repeat == 1 ? "one run of each strategy"
                                           : "the median of " + plural(a.repeat, "run") + " of each strategy, taken in turn";
  std::printf("\ntokens/s counts generated tokens over the wall time of the run (%s, after an untimed warm-up step); "
              "blocks in use are counted after every step, their peak within a step (after its writes, before its "
              "evictions and releases); recomputed tokens went through the model again after a preemption.\n",
              timed.c_str());
  // Said from the engines that ran, not from --device: a fall-back to the CPU would show.
  if (!runs.empty() && runs[0].backend != "cpu") std::printf("the model ran on the %s backend\n", runs[0].backend.c_str());
  if (!a.json.empty()) {
    write_file_atomically(a.json, [&](std::ostream& out) { out << to_json(a, layers, runs).dump(1) << "\n"; });
    std::printf("wrote %s\n", a.json.c_str());
  }
}

void run_serve_bench(const ServeBenchArgs& a) {
  check_distinct(a.strategies, "--strategies");
  set_threads(a.threads);
  check_args(a);
  const std::string model_dir = a.config.empty() ? a.model_dir : "";  // with --config the model is random
  check_outputs_apart({{"--json", a.json}, {"--trace", a.trace}},
                      {{"--text", held_out_text(a.text, a.model_dir)}, {"--config", a.config},
                       calibration_read(a.calibration, model_dir)},
                      model_dir);
  for (const std::string& out : {a.json, a.trace})
    if (!out.empty()) check_writable(out);  // before the runs, not after them
  const BackendFactory backend = backend_for_device(a.device);  // fails early: before the model loads
  const bool random = !a.config.empty();
  if (!random) check_model_present(a.model_dir);
  if (!random && a.policy == "triattention" && !calibration_file(a.calibration, a.model_dir).empty())
    warn_of_calibration(calibration_file(a.calibration, a.model_dir), a.model_dir);
  const ModelConfig shape = served_shape(a);
  check_a_request_fits(a, shape.max_position_embeddings);
  check_requests_fit_in_memory(a);
  // What can fail without the weights fails before they load: the prompts' text and
  // tokenizer, the policy and its calibration.
  const Prompts p = served_prompts(a, shape, random);
  const EngineConfig evicting = evicting_engine(a, shape, random, backend);
  check_engine_memory(shape, evicting);  // the pool, before the weights load
  const bool draws = a.policy == "random" || random || p.text.empty();  // what --seed seeds
  if (a.seed_given && !draws)
    throw Error("--seed has no effect here: it seeds --policy random, and random prompts and weights (--config)");
  const Model model = served_model(a, shape);
  print_warnings(model.warnings);
  const ModelConfig& c = model.config;
  const std::string model_name =
      random ? shown_path(a.config) + " (" + plural(c.num_layers, "layer") + ", " + params_text(c.parameter_count()) +
                   " parameters, random bf16 weights)"
             : shown_path(a.model_dir);
  ServeConfig serve;
  serve.chunk = a.chunk;
  serve.vocab_limit = p.vocab_limit;  // as generate samples
  const size_t block_bytes = KvStorage::bytes_per_block(c, a.block_size);
  print_setup(a, model_name, p.text, block_bytes);

  EventLog events;  // of the last strategy's first run, when --trace is given
  const auto write_the_trace = [&](const std::vector<Request>& requests) {
    write_trace(a.trace, trace_header(a, evicting, block_bytes, p.text_ids, requests), events);
  };
  const std::vector<ServeRun> runs = serve_every_strategy(a, model, evicting, serve, p.prompts, events, write_the_trace);
  print_results(a, c.num_layers, runs);
  if (!a.trace.empty()) {
    write_the_trace(runs.back().requests);
    std::printf("trace: %zu events of the %s run written to %s\n", events.size(), a.strategies.back().c_str(),
                a.trace.c_str());
  }
}

}  // namespace

void add_serve_bench_command(CLI::App& app) {
  auto args = std::make_shared<ServeBenchArgs>();
  ServeBenchArgs& a = *args;
  CLI::App* cmd = app.add_subcommand("serve-bench", "Many requests through one KV pool under each memory strategy: "
                                                     "concurrency, tokens/s, preemptions");
  // --config replaces the model, so --model and --text (cut with the model's tokenizer)
  // are refused beside it rather than ignored; --layers trims a --config model only.
  CLI::Option* model = cmd->add_option("--model", a.model_dir, "Hugging Face model folder")->capture_default_str();
  CLI::Option* config =
      cmd->add_option("--config", a.config, "A config.json: serve a model of its shape with random bf16 weights "
                                            "and random prompts instead")
          ->excludes(model)
          ->check(kFileName);
  cmd->add_option("--layers", a.layers, "With --config: keep only the first N layers (0 = all)")
      ->capture_default_str()
      ->check(kNonNegative)
      ->needs(config);
  cmd->add_option("--text", a.text, "Text the prompts are cut from (default: MODEL/heldout.txt, else the bundled model's)")
      ->excludes(config)
      ->check(kFileName);
  cmd->add_option("--blocks", a.blocks, "Blocks in the pool: the memory budget")->capture_default_str()->check(kPositive);
  cmd->add_option("--block-size", a.block_size, "Tokens per block")->capture_default_str()->check(kBlockSize);
  cmd->add_option("--requests", a.requests, "Number of requests")->capture_default_str()->check(kPositive);
  cmd->add_option("--prompt-len", a.prompt_len, "Prompt tokens per request")->capture_default_str()->check(kPositive);
  cmd->add_option("--output-len", a.output_len, "New tokens per request (greedy)")->capture_default_str()->check(kPositive);
  cmd->add_option("--chunk", a.chunk, "Prefill tokens per step of a request being admitted")
      ->capture_default_str()
      ->check(kPositive);
  CLI::Option* policy = cmd->add_option("--policy", a.policy, "Eviction policy: streaming, h2o, snapkv, triattention, random")
                            ->capture_default_str()
                            ->check(CLI::IsMember({"streaming", "h2o", "snapkv", "triattention", "random"}));
  CLI::Option* budget = cmd->add_option("--budget", a.budget, "Tokens kept per sequence after each eviction round")
                             ->capture_default_str()
                             ->check(kPositive);  // 0 evicts nothing: the "none" strategy's row
  CLI::Option* slack = cmd->add_option("--slack", a.slack, "A round starts when a sequence's live tokens reach budget + slack")
                           ->capture_default_str()
                           ->check(kPositive);
  CLI::Option* sinks =
      cmd->add_option("--sinks", a.sinks, "First tokens never evicted")->capture_default_str()->check(kNonNegative);
  CLI::Option* recent =
      cmd->add_option("--recent", a.recent, "Newest tokens never evicted")->capture_default_str()->check(kNonNegative);
  cmd->add_option("--strategies", a.strategies, "Runs: none (no eviction), holes, reuse, compact")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "holes", "reuse", "compact"}));
  CLI::Option* calibration = cmd->add_option(
      "--calibration", a.calibration, "TriAttention calibration (default: MODEL/triattention-calibration.json)")
      ->check(kFileName);
  cmd->add_option("--json", a.json, "Also write the numbers and the blocks in use per step to this JSON file")
      ->check(kFileName);
  cmd->add_option("--trace", a.trace, "Record the cache events of the last strategy's run (every request's sequence id) and its tokens; kvscope-viz --trace FILE shows it")
      ->check(kFileName);
  CLI::Option* seed = cmd->add_option(
      "--seed", a.seed,
      "Seed of the random policy, and of random prompts and weights (refused unless --policy random or --config)")
                          ->capture_default_str()
                          ->check(kNonNegative);
  cmd->add_option("--threads", a.threads, "CPU threads (0 = OMP_NUM_THREADS if set, else all cores)")
      ->capture_default_str()
      ->check(kNonNegative);
  cmd->add_option("--device", a.device, "Where the model runs: cpu, or cuda (the first CUDA GPU)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--repeat", a.repeat, "Runs of each strategy, in turn; tokens/s and wall time are their median")
      ->capture_default_str()
      ->check(kPositive);
  // The eviction settings shape only the runs that evict: given with --strategies none
  // alone they would change nothing, so they are refused rather than ignored.
  const std::vector<CLI::Option*> eviction_flags = {policy, budget, slack, sinks, recent, calibration};
  cmd->callback([args, eviction_flags, seed] {
    args->seed_given = seed->count() > 0;
    const std::vector<std::string>& s = args->strategies;
    if (std::all_of(s.begin(), s.end(), [](const std::string& x) { return x == "none"; }))
      for (const CLI::Option* o : eviction_flags)
        if (o->count() > 0)
          throw Error(o->get_name() + " has no effect with --strategies none, which runs without eviction");
    run_serve_bench(*args);
  });
}

}  // namespace kvscope::cli
