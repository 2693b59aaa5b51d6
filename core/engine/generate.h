// generate(): prefill the prompt, then decode one token at a time until N new
// tokens or an end-of-sequence id. Tokens are handed to a callback as they come.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "model/weights.h"
#include "sample/sampler.h"

namespace kvscope {

struct GenerateOptions {
  int max_new_tokens = 64;
  SamplerConfig sampler;
  std::vector<int> stop_ids;  // usually the config's EOS ids
  int vocab_limit = 0;        // sample only ids below this (the tokenizer's size); 0 = all logits
  // The cache: its block size and memory strategy, and an eviction schedule and
  // policy (no eviction when schedule.budget is 0). num_blocks 0 = just enough
  // blocks for the whole sequence without eviction.
  EngineConfig engine;
  EventLog* events = nullptr;  // receives every cache event when set
  // Called once the engine and its block pool exist, before the prefill: where
  // kvscope generate prints the prompt, so a pool refused for its size shows none.
  std::function<void()> on_ready;
};

struct GenerateStats {
  int prompt_tokens = 0;
  int new_tokens = 0;         // sampled tokens, the stop token included
  int decode_steps = 0;       // forward calls after the prefill
  double prefill_seconds = 0;
  double decode_seconds = 0;
  bool stopped = false;       // ended on a stop id
  SequenceStats cache;        // what eviction did: tokens evicted, blocks freed, bytes moved
  std::string backend;        // what ran the model: "cpu" or "cuda" (Backend::name)

  double prefill_tokens_per_second() const { return prefill_seconds > 0 ? prompt_tokens / prefill_seconds : 0; }
  double decode_tokens_per_second() const { return decode_seconds > 0 ? decode_steps / decode_seconds : 0; }
};

// Throws unless a prompt of `prompt_tokens` and `max_new_tokens` new tokens fit the
// model's max_position_embeddings (the last new token is sampled, never fed).
// Returns the positions fed. generate() checks it; kvscope generate checks it first,
// before the pool, so fixing one error does not reveal another.
int64_t check_positions_fit(const ModelConfig& c, size_t prompt_tokens, int max_new_tokens);

GenerateStats generate(const Model& model, const std::vector<int>& prompt, const GenerateOptions& options,
                       const std::function<void(int token)>& on_token);

}  // namespace kvscope
