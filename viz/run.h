// Run: one recorded run of the paged cache, as the app shows it.
//
// The events are the cache's own event stream (cache/events.h), recorded by
// simulate() or by the engine (scenarios.cpp); the app never changes the cache,
// it replays these events (timeline.h). Next to them, what is known about the
// tokens: how important each one is (a synthetic workload's importance, or the
// scores a model-based policy gave in each round) and, for model runs, the text.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/events.h"
#include "cache/trace.h"

namespace kvscope::viz {

// The scores a policy gave the live tokens of one sequence in one eviction round.
struct RoundScores {
  size_t event = 0;          // index of the round's RoundBegin event
  int seq = 0;
  std::vector<int64_t> pos;  // ascending
  std::vector<float> score;  // [pos.size()], higher = more worth keeping
};

struct Run {
  std::string label;            // what the view is titled: the memory strategy ("holes", "compact", ...)
  std::string name;             // what tells it from the other view when both share a strategy: a trace's file name
  TraceHeader header;           // block size, pool size, strategy; meta: source, policy, workload, ...
  EventLog events;              // everything the cache did, in order
  int64_t bytes_per_token = 0;  // K and V of one token, all layers (what a slot costs)
  std::string token_cost;       // what bytes_per_token is made of, "2 (K, V) x 28 layers x ..."; "" for traces
  std::string policy;           // the eviction policy ("random", "h2o", ...)
  std::string source;           // "synthetic" or "model"
  int sequences = 1;

  // Synthetic workloads: the importance of the token at `pos` of `seq` when the
  // next token to come is `now` (sim/synthetic.h, Workload::importance). Empty
  // when the policy does not rank by it (random, streaming).
  std::function<double(int seq, int64_t pos, int64_t now)> importance;
  // Model runs: what the policy scored, round by round (in event order).
  std::vector<RoundScores> round_scores;
  // Model runs: the text of each token, [seq][pos] (printable, escaped).
  std::vector<std::vector<std::string>> token_text;
  bool traced = false;    // read from a trace file (load_trace_run), not recorded here
  std::string text_note;  // a trace's: where its token text came from, or why it has none
  std::string tokenizer_json;  // a trace's: the tokenizer.json its token text was read with ("" if none)

  bool has_scores() const { return bool(importance) || !round_scores.empty(); }
  // What a score of this run measures, for a tooltip: "H2O: attention received, as of
  // the last round". Higher is kept.
  std::string score_meaning() const;
  // Requests served by the scheduler: sequences finish (or are preempted) and are
  // released. "serve": the app's own; "serve-bench": a trace kvscope serve-bench wrote.
  bool served() const { return meta("source") == "serve" || meta("source") == "serve-bench"; }
  // Random eviction in one round with nothing protected: the run the law (evicted
  // fraction)^block_size describes. Sinks or recent tokens are never evicted, so the
  // rest go more often and such a run frees more (kvscope simulate prints their own law).
  bool random_one_shot() const {
    const auto none = [](const std::string& n) { return n.empty() || n == "0"; };
    return policy == "random" && meta("mode") == "one-shot" && none(meta("sinks")) && none(meta("recent"));
  }
  // The header's meta value for `key` ("policy", "preemptions", ...), or "" when it has none.
  std::string meta(const char* key) const {
    const auto it = header.meta.find(key);
    return it == header.meta.end() ? std::string() : it->second;
  }
  // The token's text, or "" when the run has none.
  const std::string& text(int seq, int64_t pos) const;
};

// A trace file written by `kvscope generate`, `simulate` or `serve-bench --trace`,
// as a run: its header and events (read_trace checks them; Session replays them).
// A trace holds no scores, so the app shades nothing. Its token ids, where it lists
// them (generate and serve-bench do), become text with the tokenizer of the model
// it names; otherwise the app shows positions. bytes_per_token comes from the
// header's meta (0 when it has none). Throws kvscope::Error naming the file.
std::shared_ptr<Run> load_trace_run(const std::string& path);
// kvscope-viz --trace A[,B]: one trace, or two to compare. Two traces of one
// strategy (two policies, say, both compacted) are told apart by their file names
// (Run::name), which the views show beside the strategy. Throws kvscope::Error.
std::vector<std::shared_ptr<const Run>> load_trace_runs(const std::vector<std::string>& paths);
// A path's last part, what the app calls a trace: "/tmp/h2o.trace" -> "h2o.trace".
inline std::string file_name(const std::string& path) { return path.substr(path.find_last_of('/') + 1); }
// A view's short name, for the counters' columns and the headline: the strategy
// ("compact"; "none" for a run without eviction), or the run's name when it has one
// ("h2o.trace").
const std::string& view_label(const Run& run);
// A token's bytes as text to show: UTF-8 kept, control and invalid bytes escaped ("\n", "\xFF").
std::string printable(const std::string& bytes);
// One line on what a trace-loaded run is: "kvscope simulate --trace: policy=random,
// tokens=16000, ..., 33,877 events". With `right`, a trace recorded the same way
// shown beside it: "..., 16,000 events on the left, 18,000 on the right".
std::string trace_summary(const Run& run, const Run* right = nullptr);

// The scores of a run as of a cursor (events applied), resolved once per frame
// and then looked up per token. Synthetic: the workload's importance with `now`
// = the sequence's next position. Model: the score from the sequence's last
// round that began before the cursor (tokens newer than that round have none).
class ScoresAt {
 public:
  ScoresAt(const Run& run, size_t cursor, const std::vector<int64_t>& next_pos);
  std::optional<double> operator()(int seq, int64_t pos) const;
  bool known() const { return run_->has_scores(); }

  // Shading: maps a score to [0, 1] linearly between the live tokens' 5th- and
  // 95th-percentile scores (clamped outside), so a heavy tail does not wash out
  // the rest. `live` lists (seq, pos) of live tokens (a sample is enough).
  void fit(const std::vector<std::pair<int, int64_t>>& live);
  float shade(double score) const;

 private:
  const Run* run_;
  std::vector<int64_t> next_pos_;          // [seq]
  std::vector<const RoundScores*> round_;  // [seq] the round in force, or null
  double lo_ = 0, hi_ = 1;
};

}  // namespace kvscope::viz
