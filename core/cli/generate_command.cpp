// kvscope generate: tokenize a prompt, run the model, stream the text.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cache/kv_storage.h"
#include "cache/trace.h"
#include "engine/generate.h"
#include "evict/policy.h"
#include "model/weights.h"
#include "sample/sampler.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/file.h"
#include "util/format.h"

namespace kvscope::cli {

namespace {

struct GenerateArgs {
  std::string model_dir = bundled_model_dir();
  std::string prompt;
  int n = 64;
  bool chat = false;
  double temperature = 0.8;
  int top_k = 40;
  double top_p = 0.95;
  uint64_t seed = 0;
  int threads = 0;
  std::string weights = "stored";
  std::string device = "cpu";
  // The cache and eviction.
  int block_size = 16;
  std::string strategy = "compact";
  std::string policy = "h2o";
  int budget = 0;
  int slack = 128;
  int sinks = 4;
  int recent = 32;
  double kv_memory_mb = 0;
  std::string calibration;  // TriAttention's query centres (kvscope calibrate)
  std::string trace;        // where to record the cache's events
};

WeightFormat parse_weight_format(const std::string& s) {
  if (s == "stored") return WeightFormat::AsStored;
  if (s == "f32") return WeightFormat::F32;
  if (s == "bf16") return WeightFormat::BF16;
  throw Error("--weights must be stored, f32 or bf16");
}

// The dtypes present, each once and always in the same order: "BF16", or "F32 and BF16"
// for a mixed checkpoint.
std::string dtype_list(const std::vector<DType>& dtypes) {
  std::string out;
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    if (std::find(dtypes.begin(), dtypes.end(), t) != dtypes.end())
      out += (out.empty() ? "" : " and ") + std::string(dtype_name(t));
  return out;
}

// How the weights' matrices were held, which sets the bytes each decode step reads:
// "weights: matrices in BF16 as stored, 2.62 MB", "weights: matrices stored in BF16,
// held in F32 (--weights f32), 5.24 MB" (F16 is always widened to F32).
void print_weights(const Weights& w, const std::string& format) {
  std::vector<DType> stored, held;
  for (const auto& [name, t] : w.checkpoint->tensors())
    if (t.shape.size() == 2) stored.push_back(t.dtype);  // the matrices; norms are vectors
  for (const Matrix* m : w.matrices()) held.push_back(m->dtype);
  const std::string in = dtype_list(stored) == dtype_list(held)
                             ? "in " + dtype_list(held) + " as stored"
                             : "stored in " + dtype_list(stored) + ", held in " + dtype_list(held);
  const std::string asked = format == "stored" ? "" : " (--weights " + format + ")";
  std::fprintf(stderr, "weights: matrices %s%s, %.2f MB\n", in.c_str(), asked.c_str(), w.matrix_bytes() / 1e6);
}

// What eviction did, in the numbers the project is about. Without eviction
// there is no strategy to name and nothing was evicted, freed or moved.
void print_cache_stats(const SequenceStats& s, const GenerateArgs& a) {
  if (a.budget == 0) {
    std::fprintf(stderr, "cache: no eviction, block size %d: %s cached in %s\n", a.block_size,
                 plural(s.tokens_seen, "token").c_str(), plural(s.blocks_in_use, "block").c_str());
    return;
  }
  std::fprintf(stderr, "cache: policy %s, block size %d, %s, budget %d (+%d slack), %s\n", a.policy.c_str(),
               a.block_size, strategy_name(parse_strategy(a.strategy)), a.budget, a.slack,
               plural(s.rounds, "round").c_str());
  std::fprintf(stderr, "  tokens: %lld seen, %d live: %.1f%% evicted\n", (long long)s.tokens_seen, s.live,
               100 * s.evicted_fraction());
  std::fprintf(stderr, "  blocks: %d in use, a full cache needs %d: %.1f%% freed, %.2f MB reclaimed\n", s.blocks_in_use,
               s.blocks_full_cache, 100 * s.blocks_freed_fraction(), s.bytes_reclaimed() / 1e6);
  switch (parse_strategy(a.strategy)) {
    case MemoryStrategy::Compact:
      std::fprintf(stderr, "  compaction moved %.2f MB\n", s.bytes_moved / 1e6);
      break;
    case MemoryStrategy::HolesOnly:
      std::fprintf(stderr, "  nothing moved: under holes the survivors stay in their slots\n");
      break;
    case MemoryStrategy::ReuseHoles:
      std::fprintf(stderr, "  nothing moved: under reuse new tokens fill the holes\n");
      break;
  }
}

// Which flag would have made room, when a pool sized by --kv-memory runs out (the
// refusal itself says what the step needed). The cases go from the plainest cause
// to the one this project is about: holes that keep their blocks.
std::string pool_advice(const GenerateArgs& a, int num_blocks, size_t prompt_tokens) {
  const int64_t capacity = int64_t(num_blocks) * a.block_size;  // tokens, as check_pool_holds_the_run counts them
  const std::string pool = "--kv-memory " + number_text(a.kv_memory_mb) + " MB holds " + plural(num_blocks, "block") +
                           " (" + plural(capacity, "token") + ")";
  if (int64_t(prompt_tokens) > capacity)
    return pool + ", fewer than the prompt's " + std::to_string(prompt_tokens) + ": raise --kv-memory";
  if (a.budget == 0)  // a round must start (budget + slack live tokens) before the pool is full
    return pool + " and nothing is evicted: raise --kv-memory, or evict with a --budget and --slack that add up to " +
           "at most " + plural(capacity, "token") +
           (int64_t(a.sinks) + a.recent >= capacity ? " (and --sinks + --recent, which the budget keeps, below that)"
                                                     : "");
  if (int64_t(a.budget) + a.slack > capacity)
    return pool + ", fewer than a round waits for (--budget " + std::to_string(a.budget) + " + --slack " +
           std::to_string(a.slack) + "): lower them, or raise --kv-memory";
  if (parse_strategy(a.strategy) == MemoryStrategy::HolesOnly)
    return pool + ", and under --strategy holes a block goes back only when every token in it is evicted: "
                  "use --strategy compact, or raise --kv-memory";
  return pool + ": raise --kv-memory";
}

// The tokens a run feeds the model, as a sum: "47 tokens (8 prompt + 40 new - 1)".
// The last new token is never fed.
int64_t tokens_fed(size_t prompt_tokens, int n) { return int64_t(prompt_tokens) + std::max(n - 1, 0); }
std::string tokens_fed_text(size_t prompt_tokens, int n) {
  const std::string total = plural(tokens_fed(prompt_tokens, n), "token");
  if (n == 0) return total + " (the prompt alone)";
  return total + " (" + std::to_string(prompt_tokens) + " prompt + " + std::to_string(n) + " new - 1)";
}

// A pool that must run out before the run ends, refused before the run starts (as
// serve-bench refuses a pool too small for one request): the prompt alone is larger,
// or the run feeds more tokens than the pool holds and nothing frees a block first
// (no eviction, or a round that waits for more live tokens than fit). Under
// --strategy holes a pool can still run out mid-run: which blocks empty depends on
// what the policy keeps, so that is said when it happens.
void check_pool_holds_the_run(const GenerateArgs& a, int num_blocks, size_t prompt_tokens) {
  const int64_t capacity = int64_t(num_blocks) * a.block_size;  // tokens
  const bool frees_nothing_first = a.budget == 0 || int64_t(a.budget) + a.slack > capacity;
  if (int64_t(prompt_tokens) > capacity || (tokens_fed(prompt_tokens, a.n) > capacity && frees_nothing_first))
    throw Error("this run feeds " + tokens_fed_text(prompt_tokens, a.n) + ", more than the pool can hold: " +
                pool_advice(a, num_blocks, prompt_tokens));
}

// The flags that need no model, checked before loading one.
void check_args(const GenerateArgs& a) {
  const EvictionSchedule schedule{a.budget, a.slack, a.sinks, a.recent};
  schedule.validate();
  check_budget_holds_the_window(a.policy, schedule);
  if (!a.calibration.empty() && a.policy != "triattention")
    throw Error("--calibration is for --policy triattention, not " + a.policy);
  const Sampler checked({a.temperature, a.top_k, a.top_p, a.seed});  // its checks, before the prompt is printed
  check_outputs_apart({{"--trace", a.trace}}, {calibration_read(a.calibration, a.model_dir)}, a.model_dir);
  if (!a.trace.empty()) check_writable(a.trace);
}

// The prompt's token ids: the text as given, or with --chat as a ChatML user message,
// with the model's BOS first if it has one.
std::vector<int> prompt_ids(const GenerateArgs& a, const Tokenizer& tokenizer) {
  // ChatML's markers must be tokens of their own, added tokens that encode() matches:
  // otherwise they would be read as plain text (a vocabulary entry of the same bytes
  // is not enough).
  const auto one_token = [&](const char* marker) { return tokenizer.encode(marker).size() == 1; };
  if (a.chat && !(one_token("<|im_start|>") && one_token("<|im_end|>")))
    throw Error("--chat: " + shown_path(tokenizer.path()) +
                " has no <|im_start|> and <|im_end|> tokens: the model was not trained on ChatML (drop --chat)");
  check_prompt_utf8(a.prompt);  // the offset in --prompt, not in the ChatML text around it
  const std::string text = a.chat ? chat_prompt({{"user", a.prompt}}) : a.prompt;
  const std::vector<int> ids = tokenizer.encode(text);
  if (ids.empty()) throw Error("--prompt: the prompt is empty");
  return tokenizer.with_special_tokens(ids);
}

// A prompt token the model has no embedding row for: a tokenizer.json from another
// model. Said before the weights load; the forward pass would refuse it after them.
void check_prompt_in_vocabulary(const std::vector<int>& prompt, const ModelConfig& config, const Tokenizer& tokenizer) {
  const int most = *std::max_element(prompt.begin(), prompt.end());
  if (most >= config.vocab_size)
    throw Error(shown_path(tokenizer.path()) + " gives the prompt token " + std::to_string(most) +
                ", and the model's embedding has " + std::to_string(config.vocab_size) +
                " rows (vocab_size in config.json): the tokenizer is another model's");
}

// An EOS id the sampler can never draw (a typo such as 1516450) would leave the run to
// stop only at -n, without a word: say so.
void warn_of_unreachable_stops(const std::vector<int>& stop_ids, int vocab) {
  std::string ids;
  for (int id : stop_ids)
    if (id >= vocab) ids += (ids.empty() ? "" : ", ") + std::to_string(id);
  if (!ids.empty())
    print_warnings({"eos_token_id " + ids + ": not a token this model writes (ids 0 to " + std::to_string(vocab - 1) +
                    "), so generation never stops at it"});
}

// The flags as GenerateOptions: sampling, stopping, the cache (block size, memory
// strategy, the pool's blocks) and eviction (schedule, policy). Warns when the
// schedule would never start a round in this run.
GenerateOptions generate_options(const GenerateArgs& a, const ModelConfig& config, const Tokenizer& tokenizer,
                                 size_t prompt_tokens, PolicyFactory policy) {
  const EvictionSchedule schedule{a.budget, a.slack, a.sinks, a.recent};  // validated by check_args
  if (schedule.enabled() && schedule.round_starts_at() > tokens_fed(prompt_tokens, a.n))
    print_warnings({"--budget " + std::to_string(a.budget) + " + --slack " + std::to_string(a.slack) + " = " +
                    std::to_string(schedule.round_starts_at()) + " live tokens start a round, and this run feeds " +
                    tokens_fed_text(prompt_tokens, a.n) + ": nothing will be evicted"});
  GenerateOptions options;
  options.max_new_tokens = a.n;
  options.sampler = {a.temperature, a.top_k, a.top_p, a.seed};
  options.stop_ids = config.eos_token_ids;
  options.vocab_limit = tokenizer.vocab_size();
  warn_of_unreachable_stops(options.stop_ids, std::min(tokenizer.vocab_size(), config.vocab_size));
  options.engine.block_size = a.block_size;
  options.engine.strategy = parse_strategy(a.strategy);
  options.engine.schedule = schedule;
  options.engine.policy = std::move(policy);
  // The tokens fed (the last new token is never fed), in blocks.
  options.engine.num_blocks = int(blocks_for_tokens(tokens_fed(prompt_tokens, a.n), a.block_size));
  if (a.kv_memory_mb > 0) try {
      options.engine.num_blocks = blocks_for_budget(config, a.block_size, size_t(std::llround(a.kv_memory_mb * 1e6)));
    } catch (const Error& e) {  // "a KV memory budget of 1,000 bytes is smaller than one block (...)"
      throw Error("--kv-memory " + number_text(a.kv_memory_mb) + ": " + e.what());
    }
  if (a.kv_memory_mb > 0) check_pool_holds_the_run(a, options.engine.num_blocks, prompt_tokens);
  return options;
}

// The lines a run ends with, on stderr: the speeds, the device, the weights, the cache.
void print_summary(const GenerateStats& stats, const Model& model, const GenerateArgs& a) {
  // The first new token is sampled from the prompt's pass: a decode speed needs a second.
  const std::string decode_speed = stats.decode_steps > 0 ? fmt("%.1f tokens/s", stats.decode_tokens_per_second())
                                                          : std::string("no decode step to time");
  std::fprintf(stderr, "\nprompt: %s, %.1f tokens/s | decode: %s, %s%s\n", plural(stats.prompt_tokens, "token").c_str(),
               stats.prefill_tokens_per_second(), plural(stats.new_tokens, "token").c_str(), decode_speed.c_str(),
               stats.stopped ? " (stopped at end of sequence)" : "");
  // Said from the engine that ran, not from --device: a fall-back to the CPU would show.
  if (stats.backend != "cpu") std::fprintf(stderr, "device: the model ran on the %s backend\n", stats.backend.c_str());
  print_weights(model.weights, a.weights);
  print_cache_stats(stats.cache, a);
}

void run_generate(const GenerateArgs& a) {
  set_threads(a.threads);
  check_args(a);
  const BackendFactory backend = backend_for_device(a.device);  // fails early: before the model loads
  check_model_present(a.model_dir);
  // What can fail without the weights fails before they load: the tokenizer, the
  // prompt, and against config.json the positions, the policy and its calibration,
  // and the pool --kv-memory holds.
  Tokenizer tokenizer = Tokenizer::load(a.model_dir + "/tokenizer.json");
  const std::vector<int> prompt = prompt_ids(a, tokenizer);
  const ModelConfig config = load_config(a.model_dir);  // config.json, and generation_config.json's stop ids
  check_prompt_in_vocabulary(prompt, config, tokenizer);
  check_positions_fit(config, prompt.size(), a.n);  // before the pool's checks: fixing one error shows no other
  PolicyFactory policy;
  if (a.budget > 0) policy = policy_factory(a.policy, a.seed, calibration_file(a.calibration, a.model_dir), config);
  if (a.budget > 0 && a.policy == "triattention") warn_of_calibration(calibration_file(a.calibration, a.model_dir),
                                                                      a.model_dir);
  GenerateOptions options = generate_options(a, config, tokenizer, prompt.size(), std::move(policy));  // the pool
  Model model = load_model(a.model_dir, parse_weight_format(a.weights));
  print_warnings(model.warnings);
  options.engine.backend = backend;
  EventLog events;
  if (!a.trace.empty()) options.events = &events;

  // Stream: the prompt as given once the pool is allocated, then each completed
  // character as it arrives.
  StreamDecoder stream(tokenizer);
  bool started = false;
  options.on_ready = [&] {
    std::fputs(a.prompt.c_str(), stdout);
    if (a.chat) std::fputc('\n', stdout);
    std::fflush(stdout);
    started = true;
  };
  // The streamed text ends its line, also when an error cuts it short (the error
  // then gets a line of its own, and no held-back bytes are lost).
  const auto end_the_text = [&] {
    if (!started) return;
    std::fputs(stream.flush().c_str(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
  };
  std::vector<int> ids = prompt;  // [position]  every token of the run, for the trace
  const auto write_the_trace = [&] {
    TraceHeader header{a.block_size, options.engine.num_blocks, options.engine.strategy,
                       {{"source", "generate"}, {"model", absolute_path(a.model_dir)},
                        {"policy", a.budget > 0 ? a.policy : "none"}, {"budget", std::to_string(a.budget)},
                        {"slack", std::to_string(a.slack)},
                        {"bytes_per_token",
                         std::to_string(KvStorage::bytes_per_block(model.config, a.block_size) / size_t(a.block_size))},
                        {"tokens.0", token_ids_value(ids)}}};  // the viewer shows them as text
    write_trace(a.trace, header, events);
  };
  GenerateStats stats;
  try {
    stats = generate(model, prompt, options, [&](int token) {
      ids.push_back(token);
      if (tokenizer.is_special(token)) return;  // e.g. <|im_end|>: not text
      std::fputs(stream.push(token).c_str(), stdout);
      std::fflush(stdout);
    });
  } catch (const PoolExhausted& e) {
    end_the_text();
    // The run up to the refused step is a whole trace (the step wrote nothing): it shows
    // what filled the pool.
    const std::string traced = a.trace.empty() ? "" : trace_of_the_refused_run(a.trace, write_the_trace);
    if (a.kv_memory_mb > 0)
      throw Error(std::string(e.what()) + ". " + pool_advice(a, options.engine.num_blocks, prompt.size()) + traced);
    if (!traced.empty()) throw Error(std::string(e.what()) + traced);
    throw;
  } catch (const Error&) {
    end_the_text();
    throw;
  }
  end_the_text();
  print_summary(stats, model, a);
  if (!a.trace.empty()) {
    write_the_trace();
    std::fprintf(stderr, "trace: %zu events written to %s\n", events.size(), a.trace.c_str());
  }
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt with a Qwen3 model");
  cmd->add_option("--model", args->model_dir, "Hugging Face model folder (config.json, *.safetensors, tokenizer.json)")
      ->capture_default_str();
  cmd->add_option("--prompt", args->prompt, "The prompt text")->required();
  cmd->add_option("-n,--tokens", args->n, "Number of new tokens to generate")->capture_default_str()->check(kNonNegative);
  cmd->add_flag("--chat", args->chat, "Wrap the prompt in the ChatML template as a user message");
  cmd->add_option("--temperature", args->temperature, "Sampling temperature; 0 means greedy")
      ->capture_default_str()
      ->check(kNonNegative);
  CLI::Option* top_k = cmd->add_option("--top-k", args->top_k, "Sample among the k most likely tokens; 0 = all")
      ->capture_default_str()
      ->check(kNonNegative);
  CLI::Option* top_p = cmd->add_option("--top-p", args->top_p, "Nucleus sampling: smallest set with this probability")
      ->capture_default_str()
      ->check(number_check(0, true, 1, "(0,1]"));
  CLI::Option* seed = cmd->add_option(
      "--seed", args->seed, "Random seed of sampling and of --policy random: the same seed gives the same text")
      ->capture_default_str()
      ->check(kNonNegative);  // -1 is not "a random seed" here: it would wrap to 2^64 - 1
  cmd->add_option("--threads", args->threads, "CPU threads (0 = OMP_NUM_THREADS if set, else all cores)")
      ->capture_default_str()
      ->check(kNonNegative);
  cmd->add_option("--weights", args->weights, "Hold matrices as stored, or convert to f32 or bf16")
      ->capture_default_str()
      ->check(CLI::IsMember({"stored", "f32", "bf16"}));
  cmd->add_option("--device", args->device, "Where the model runs: cpu, or cuda (the first CUDA GPU)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--block-size", args->block_size, "Tokens per KV block")->capture_default_str()->check(kBlockSize);
  CLI::Option* strategy =
      cmd->add_option("--strategy", args->strategy, "After eviction: holes (blocks free only when empty), reuse (fill holes), compact")
          ->capture_default_str()
          ->check(CLI::IsMember({"holes", "reuse", "compact"}));
  CLI::Option* policy = cmd->add_option("--policy", args->policy, "Eviction policy: streaming, h2o, snapkv, triattention, random")
                            ->capture_default_str()
                            ->check(CLI::IsMember({"streaming", "h2o", "snapkv", "triattention", "random"}));
  CLI::Option* calibration =
      cmd->add_option("--calibration", args->calibration,
                      "TriAttention calibration file (default: MODEL/triattention-calibration.json)")
          ->check(kFileName);
  CLI::Option* budget = cmd->add_option("--budget", args->budget, "Tokens kept after each eviction round; 0 = no eviction")
                             ->capture_default_str()
                             ->check(kNonNegative);
  CLI::Option* slack = cmd->add_option("--slack", args->slack, "A round starts when the live tokens reach budget + slack")
                            ->capture_default_str()
                            ->check(kPositive);
  CLI::Option* sinks = cmd->add_option("--sinks", args->sinks, "First tokens never evicted (attention sinks)")
                           ->capture_default_str()
                           ->check(kNonNegative);
  CLI::Option* recent =
      cmd->add_option("--recent", args->recent, "Newest tokens never evicted")->capture_default_str()->check(kNonNegative);
  // The eviction settings need a budget: without one (or with --budget 0) nothing is
  // evicted, and they would go unused.
  const std::vector<CLI::Option*> eviction_flags = {strategy, policy, calibration, slack, sinks, recent};
  for (CLI::Option* o : eviction_flags) o->needs(budget);
  cmd->add_option("--kv-memory", args->kv_memory_mb, "KV pool size in MB (1e6 bytes); 0 = enough for the whole sequence")
      ->capture_default_str()
      ->check(number_check(0, false, 1e9, "0..1e9"));  // a petabyte at most: its bytes fit a size_t
  cmd->add_option("--trace", args->trace, "Record every cache event of the run, and its tokens, to this file; kvscope-viz --trace FILE shows it")
      ->check(kFileName);
  const std::vector<CLI::Option*> sampling_flags = {top_k, top_p, seed};
  cmd->callback([args, eviction_flags, sampling_flags] {
    for (const CLI::Option* o : eviction_flags)
      if (args->budget == 0 && o->count() > 0)
        throw Error(o->get_name() + " needs a budget above 0: --budget 0 means no eviction");
    // Greedy decoding draws nothing: said, not silently ignored. (The seed still
    // draws the tokens --policy random evicts.)
    const bool seed_evicts = args->budget > 0 && args->policy == "random";
    std::string unused;
    for (const CLI::Option* o : sampling_flags)
      if (args->temperature == 0 && o->count() > 0 && !(o->get_name() == "--seed" && seed_evicts))
        unused += (unused.empty() ? "" : ", ") + o->get_name();
    if (!unused.empty())
      print_warnings({unused + ": no effect with --temperature 0 (greedy: the most likely token at every step)"});
    run_generate(*args);
  });
}

}  // namespace kvscope::cli
