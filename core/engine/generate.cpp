#include "engine/generate.h"

#include <algorithm>

#include "cache/kv_cache.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/format.h"

namespace kvscope {

int64_t check_positions_fit(const ModelConfig& c, size_t prompt_tokens, int max_new_tokens) {
  // The positions fed to the model: the prompt, then every new token but the last
  // (it is sampled, never fed), as the scheduler counts them. 64 bits: -n may be near INT_MAX.
  const int64_t total = int64_t(prompt_tokens) + std::max(max_new_tokens - 1, 0);
  if (total > c.max_position_embeddings)
    throw Error("generate: " + std::to_string(prompt_tokens) + " prompt + " + plural(max_new_tokens, "new token") +
                " need " + std::to_string(total) + " positions" +
                (max_new_tokens > 0 ? " (the last new token is never fed)" : "") + ", more than the model's "
                "max_position_embeddings (" + std::to_string(c.max_position_embeddings) + ")");
  return total;
}

GenerateStats generate(const Model& model, const std::vector<int>& prompt, const GenerateOptions& options,
                       const std::function<void(int token)>& on_token) {
  const ModelConfig& c = model.config;
  if (prompt.empty()) throw Error("generate: the prompt has no tokens");
  if (options.max_new_tokens < 0) throw Error("generate: the number of new tokens must be >= 0");
  const int64_t total = check_positions_fit(c, prompt.size(), options.max_new_tokens);
  const int vocab = options.vocab_limit > 0 ? std::min(options.vocab_limit, c.vocab_size) : c.vocab_size;

  EngineConfig config = options.engine;
  check_block_size(config.block_size);  // before it divides anything
  if (config.num_blocks == 0) config.num_blocks = int(blocks_for_tokens(total, config.block_size));
  Engine engine(model, config, options.events);
  const int seq = engine.add_sequence();
  if (options.on_ready) options.on_ready();
  Sampler sampler(options.sampler);
  GenerateStats stats;
  stats.prompt_tokens = int(prompt.size());
  stats.backend = engine.backend().name();

  double t0 = now_seconds();
  const float* logits = engine.prefill(seq, prompt);
  stats.prefill_seconds = now_seconds() - t0;

  t0 = now_seconds();
  for (int i = 0; i < options.max_new_tokens; ++i) {
    const int token = sampler.sample(logits, vocab);
    ++stats.new_tokens;
    on_token(token);
    if (std::find(options.stop_ids.begin(), options.stop_ids.end(), token) != options.stop_ids.end()) {
      stats.stopped = true;
      break;
    }
    if (i + 1 == options.max_new_tokens) break;  // no need to run the token we will not sample after
    logits = engine.decode(seq, token);
    ++stats.decode_steps;
  }
  stats.decode_seconds = now_seconds() - t0;
  stats.cache = engine.stats(seq);
  return stats;
}

}  // namespace kvscope
