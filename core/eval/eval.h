// Policy evaluation: what eviction costs in quality and what it gives back in memory.
//
// For each held-out window of `context` tokens, teacher-forced one token at a time
// (so every policy sees the same text and evicts as it would while generating):
//
//   full cache                     -> reference logits and a greedy continuation
//   policy x kept fraction x {holes only, compaction}
//     perplexity      exp(mean -log p(next token)) over positions >= scored_from
//     top-1 agreement argmax of the logits equals the full cache's, same positions
//     greedy match    greedy tokens after the window equal to the full cache's,
//                     counted up to the first difference, out of `continuation`
//     blocks freed    1 - blocks in use / blocks the full cache needs, at the
//                     window's end (the cache's own counters, per strategy)
//
// The two strategies keep the same tokens and give bit-identical logits (a test
// checks it), so the model runs once per policy and budget, under compaction;
// its writes and evictions, replayed on a cache that leaves holes, give the
// holes-only blocks. Numbers are averaged over windows (perplexity: over all
// scored tokens).
//
// Two things a reader of the table should know. H2O and SnapKV run the eager
// attention path (they need the probabilities), whose sums round differently from
// the flash path's: before their first round their logits already differ from the
// full cache's in the last bits, which can flip a near-tied top-1. And a row's
// first round comes at budget + slack live tokens: where that is past scored_from
// (the 50% rows by default: 528 > 512), the first predictions scored saw no eviction.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "model/weights.h"

namespace kvscope {

struct EvalSettings {
  int context = 1024;                          // tokens per window, teacher-forced
  int continuation = 32;                       // greedy tokens compared after each window
  int scored_from = -1;                        // perplexity and top-1 over positions >= this; -1 = context / 2
  std::vector<double> keep = {0.1, 0.25, 0.5}; // budget = keep * context tokens
  std::vector<std::string> policies = {"streaming", "h2o", "snapkv", "triattention", "random", "oracle"};
  int block_size = 16;
  int slack = 16;                              // rounds start at budget + slack live tokens
  int sinks = 4;
  int recent = 32;
  uint64_t seed = 1;                           // for the random policy
  std::string calibration;                     // TriAttention's calibration file
};

// Whether `policy` is among the settings' policies.
bool runs_policy(const EvalSettings& s, const std::string& policy);

// One policy at one budget, averaged over the windows.
struct EvalRow {
  std::string policy;                 // "full" for the reference row
  double keep = 1.0;                  // kept fraction of the context
  int budget = 0;                     // tokens
  double perplexity = 0;
  double top1_agreement = 1;          // fraction of scored positions
  double greedy_match = 1;            // fraction of the continuation
  double blocks_freed_holes = 0;      // fraction of the full cache's blocks
  double blocks_freed_compact = 0;
  double evicted = 0;                 // fraction of the tokens seen
};

struct EvalReport {
  EvalSettings settings;
  int windows = 0;
  std::vector<EvalRow> rows;          // the full cache first, then policy by policy
};

// progress(done, total) after each run of a window.
using EvalProgress = std::function<void(int done, int total)>;

// kvscope::Error if a setting is out of range: context < 2, continuation < 1,
// context + continuation past the model's positions, keep outside (0, 1), a budget
// below sinks + recent or whose first round (budget + slack live tokens) would
// not come within the context, a bad block size. Needs no model or text: eval
// calls it before loading either.
void check_eval_settings(const EvalSettings& settings, int max_position_embeddings);

// windows: token ids, each at least context + 1 long (the +1 is the last target).
// kvscope::Error on bad settings (check_eval_settings), a window too short, or
// TriAttention without a calibration file.
EvalReport evaluate(const Model& model, const std::vector<std::vector<int>>& windows, const EvalSettings& settings,
                    const EvalProgress& progress = {});

// The report as a Markdown table, one row per policy and budget.
std::string markdown_table(const EvalReport& report);

}  // namespace kvscope
