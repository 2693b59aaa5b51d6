// Scenarios: named presets, and recording the runs they describe.
//
// RunSettings is what the controls panel edits: the source (the synthetic
// workload, or a model generating text), the policy, the schedule, the block
// size, the memory strategies to show side by side. record() turns settings
// into recorded runs:
//
//   synthetic, one sequence   simulate() (sim/synthetic.h), the same runner as
//                             `kvscope simulate`, with record_events
//   synthetic, 2+ sequences   the same loop over one shared PagedKvCache, the
//                             sequences interleaved token by token
//   model                     generate() (engine/generate.h) on --model DIR,
//                             the policy wrapped to record its scores per round
//   model, 2+ sequences       that many requests served by the scheduler
//                             (serve/scheduler.h) through a pool too small for all
//
// Each strategy is a separate run of the same workload and seed: the policy
// makes the same choices in each, only what the cache does with the holes differs.
// Served requests are the exception: the scheduler admits and preempts by what
// each strategy frees, so their runs differ.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "run.h"

namespace kvscope::viz {

enum class Source { Synthetic, Model };

struct RunSettings {
  Source source = Source::Synthetic;
  // Synthetic: random | streaming | importance (ranks by the workload).
  // Model: h2o | snapkv | streaming | random | triattention.
  std::string policy = "random";
  std::string workload = "uniform";  // synthetic: uniform | sinks-recency | clustered | heavy-tailed
  bool streaming = false;            // synthetic: one round at the end (one-shot) or rounds as tokens come
  int64_t tokens = 16000;            // synthetic: tokens per sequence; model: new tokens to generate
  double evict_fraction = 0.875;     // one-shot: the share of the tokens the round evicts
  int budget = 512;                  // streaming and model: live tokens kept by a round
  int slack = 128;                   // a round starts at budget + slack live tokens
  int sinks = 0, recent = 0;         // protected: the first and the newest tokens
  int block_size = 16;
  int sequences = 1;  // sequences sharing the pool (model: requests served together)
  uint64_t seed = 1;
  std::vector<MemoryStrategy> strategies = {MemoryStrategy::HolesOnly, MemoryStrategy::Compact};  // left to right
  std::string prompt;  // model: empty = the built-in text

  bool operator==(const RunSettings&) const = default;
};

struct Scenario {
  std::string name;
  std::string summary;  // one line, for --list-scenarios and the window
  RunSettings settings;
  double speed = 10000;  // playback, events per second
};

const std::vector<Scenario>& scenarios();
const Scenario* find_scenario(const std::string& name);  // nullptr if unknown

// Where a model comes from: a Hugging Face folder (config.json, *.safetensors,
// tokenizer.json) and, for TriAttention, a calibration file (kvscope calibrate).
struct ModelSource {
  std::string dir;          // empty: no model
  std::string calibration;  // empty: look for DIR/triattention-calibration.json
};
// The bundled model's folder (assets/model) when it holds a config.json, else "".
std::string bundled_model_dir();
// The text the model scenarios prompt with when the settings give none.
const std::string& builtin_prompt();

struct Recording {
  std::vector<std::shared_ptr<const Run>> runs;  // one per strategy, left to right
  RunSettings settings;                          // as recorded (after any fallback)
  std::string note;                              // said to the user: a fallback, a caveat
};

// Records the runs. kvscope::Error for settings that cannot run (a policy the
// source lacks, a budget below the protected tokens, a missing calibration).
// A model scenario with no model falls back to a synthetic stand-in, with a note.
Recording record(const RunSettings& settings, const ModelSource& model);

// The policies each source offers (for the controls).
const std::vector<std::string>& policies_for(Source source);

}  // namespace kvscope::viz
