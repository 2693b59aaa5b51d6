// kvscope generate: tokenize a prompt, run the model, stream the text.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "engine/generate.h"
#include "model/weights.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/file.h"

namespace kvscope::cli {

namespace {

struct GenerateArgs {
  std::string model_dir = std::string(KVSCOPE_ASSETS_DIR) + "/model";  // the bundled model
  std::string prompt;
  int n = 64;
  bool chat = false;
  float temperature = 0.8f;
  int top_k = 40;
  float top_p = 0.95f;
  uint64_t seed = 0;
  int threads = 0;
  std::string weights = "stored";
};

WeightFormat parse_weight_format(const std::string& s) {
  if (s == "stored") return WeightFormat::AsStored;
  if (s == "f32") return WeightFormat::F32;
  if (s == "bf16") return WeightFormat::BF16;
  throw Error("--weights must be stored, f32 or bf16");
}

void run_generate(const GenerateArgs& a) {
  set_threads(a.threads);
  if (a.model_dir == std::string(KVSCOPE_ASSETS_DIR) + "/model" && !file_exists(a.model_dir + "/config.json"))
    throw Error(a.model_dir + ": no bundled model there yet; pass --model DIR (e.g. tests/models/tiny-tied)");
  Model model = load_model(a.model_dir, parse_weight_format(a.weights));
  Tokenizer tokenizer = Tokenizer::load(a.model_dir + "/tokenizer.json");

  const std::string text = a.chat ? chat_prompt({{"user", a.prompt}}) : a.prompt;
  std::vector<int> prompt = tokenizer.encode(text);
  if (prompt.empty()) throw Error("the prompt is empty");

  GenerateOptions options;
  options.max_new_tokens = a.n;
  options.sampler = {a.temperature, a.top_k, a.top_p, a.seed};
  options.stop_ids = model.config.eos_token_ids;
  options.vocab_limit = tokenizer.vocab_size();

  // Stream: the prompt as given, then each completed character as it arrives.
  StreamDecoder stream(tokenizer);
  std::fputs(a.prompt.c_str(), stdout);
  if (a.chat) std::fputc('\n', stdout);
  std::fflush(stdout);
  GenerateStats stats = generate(model, prompt, options, [&](int token) {
    if (tokenizer.is_special(token)) return;  // e.g. <|im_end|>: not text
    std::fputs(stream.push(token).c_str(), stdout);
    std::fflush(stdout);
  });
  std::fputs(stream.flush().c_str(), stdout);
  std::fputc('\n', stdout);

  std::fprintf(stderr, "\nprompt: %d tokens, %.1f tokens/s | decode: %d tokens, %.1f tokens/s%s\n", stats.prompt_tokens,
               stats.prefill_tokens_per_second(), stats.new_tokens, stats.decode_tokens_per_second(),
               stats.stopped ? " (stopped at end of sequence)" : "");
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt with a Qwen3 model");
  cmd->add_option("--model", args->model_dir, "Hugging Face model folder (config.json, *.safetensors, tokenizer.json)")
      ->capture_default_str();
  cmd->add_option("--prompt", args->prompt, "The prompt text")->required();
  cmd->add_option("-n,--tokens", args->n, "Number of new tokens to generate")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_flag("--chat", args->chat, "Wrap the prompt in the ChatML template as a user message");
  cmd->add_option("--temperature", args->temperature, "Sampling temperature; 0 means greedy")->capture_default_str();
  cmd->add_option("--top-k", args->top_k, "Sample among the k most likely tokens; 0 = all")->capture_default_str();
  cmd->add_option("--top-p", args->top_p, "Nucleus sampling: smallest set with this probability")->capture_default_str();
  cmd->add_option("--seed", args->seed, "Random seed: the same seed gives the same text")->capture_default_str();
  cmd->add_option("--threads", args->threads, "CPU threads (0 = all cores)")->capture_default_str();
  cmd->add_option("--weights", args->weights, "Hold matrices as stored, or convert to f32 or bf16")
      ->capture_default_str()
      ->check(CLI::IsMember({"stored", "f32", "bf16"}));
  cmd->callback([args] { run_generate(*args); });
}

}  // namespace kvscope::cli
