// Chapter 8: many requests, one pool.
//
// Part 1: the same requests through one small pool of blocks, under each memory
// strategy, drawn as a timeline of who runs, who waits and who is done. Part 2:
// why compaction lets more in: the blocks one request holds once eviction runs.
// Part 3: preemption loses nothing: with no eviction, every request preempted on
// the way ends with the same greedy tokens as when served alone.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "evict/policy.h"
#include "model/weights.h"
#include "serve/scheduler.h"
#include "serve/serve_bench.h"
#include "tokenizer/tokenizer.h"
#include "tutorial.h"
#include "util/file.h"

using namespace kvscope;
using namespace kvscope::tutorial;

constexpr int kRequests = 8, kPromptLen = 64, kNewTokens = 128;
constexpr int kPoolBlocks = 24, kBlockSize = 16;
constexpr int kChunk = 32;    // prompt tokens prefilled per step
constexpr int kColumns = 64;  // timeline width: each column is a few steps

// Request i's prompt: 64 tokens of the held-out text, from token i * 64 on.
std::vector<std::vector<int>> prompts(const Tokenizer& tok) {
  const std::vector<int> text = tok.encode(read_file(repo_path("assets/model/heldout.txt")));
  std::vector<std::vector<int>> out;
  for (int i = 0; i < kRequests; ++i) out.emplace_back(text.begin() + i * kPromptLen, text.begin() + (i + 1) * kPromptLen);
  return out;
}

// H2O keeping 48 tokens of each sequence, in rounds when it reaches 64.
EngineConfig evicting() {
  EngineConfig c;
  c.num_blocks = kPoolBlocks;
  c.block_size = kBlockSize;
  c.schedule = {/*budget=*/48, /*slack=*/16, /*sinks=*/4, /*recent=*/16};
  c.policy = [] { return make_policy("h2o", /*seed=*/1); };
  return c;
}

// What one strategy's run looked like, step by step. [request][step]: '#' running,
// '.' waiting, ' ' finished.
struct Timeline {
  std::vector<std::string> rows;
  ServeStats stats;
  std::vector<Request> requests;  // at the end
};

Timeline serve(const Model& model, const std::string& strategy, const std::vector<std::vector<int>>& prompts) {
  Engine engine(model, engine_for_strategy(strategy, evicting()));
  Scheduler scheduler(engine, ServeConfig{kChunk});
  for (const std::vector<int>& p : prompts) scheduler.submit(p, kNewTokens);
  Timeline t;
  t.rows.resize(prompts.size());
  while (scheduler.step())
    for (int id = 0; id < scheduler.num_requests(); ++id) {
      const Request& r = scheduler.request(id);
      t.rows[size_t(id)] += r.finished ? ' ' : r.seq >= 0 ? '#' : '.';
    }
  t.stats = scheduler.stats();
  for (int id = 0; id < scheduler.num_requests(); ++id) t.requests.push_back(scheduler.request(id));
  return t;
}

// A row squeezed to kColumns characters, all rows on one scale of `steps_per_column`:
// a column shows '#' if the request ran in any of its steps, else '.' if it waited.
std::string squeeze(const std::string& row, int steps_per_column) {
  std::string out;
  for (size_t at = 0; at < row.size(); at += size_t(steps_per_column)) {
    const std::string part = row.substr(at, size_t(steps_per_column));
    out += part.find('#') != std::string::npos ? '#' : part.find('.') != std::string::npos ? '.' : ' ';
  }
  out.erase(out.find_last_not_of(' ') + 1);
  return out;
}

double mean(const std::vector<int>& v) {
  double s = 0;
  for (int x : v) s += x;
  return v.empty() ? 0 : s / double(v.size());
}

// Part 1: each strategy's timeline, all on one scale of steps per column.
static void who_runs_who_waits(const std::vector<std::string>& strategies, const std::vector<Timeline>& runs) {
  size_t longest = 0;
  for (const Timeline& t : runs)
    for (const std::string& row : t.rows) longest = std::max(longest, row.size());
  const int per_column = int((longest + kColumns - 1) / kColumns);

  std::printf("\nPart 1: who runs (#), who waits (.), one column per %d steps\n", per_column);
  for (size_t i = 0; i < runs.size(); ++i) {
    const ServeStats& st = runs[i].stats;
    std::printf("\n%s: %d steps, at most %d running at once (%.1f on average), %d preemption%s\n",
                strategies[i].c_str(), st.steps, st.peak_running, mean(st.running), st.preemptions,
                st.preemptions == 1 ? "" : "s");
    for (size_t id = 0; id < runs[i].rows.size(); ++id)
      std::printf("  request %zu |%s\n", id, squeeze(runs[i].rows[id], per_column).c_str());
  }
}

// Part 2: the blocks a sequence holds, on average, under each strategy.
static void blocks_a_sequence_holds(const std::vector<std::string>& strategies, const std::vector<Timeline>& runs,
                                    const EvictionSchedule& schedule) {
  // Both counted after each step: the blocks in use, and the sequences that hold them
  // (the step's batch less those that finished in it and gave theirs back).
  std::printf("\nPart 2: blocks in use after a step, averaged over the steps (the pool has %d)\n", kPoolBlocks);
  for (size_t i = 0; i < runs.size(); ++i) {
    const ServeStats& st = runs[i].stats;
    std::printf("  %-8s %5.1f blocks held by %.1f sequences: %.1f blocks a sequence\n", strategies[i].c_str(),
                mean(st.blocks_in_use), mean(st.holding), mean(st.blocks_in_use) / mean(st.holding));
  }
  // A round runs once a step leaves budget + slack live: the most a decoding sequence
  // holds. A prefill chunk can land on up to round_starts_at() - 1 live tokens first.
  const int most = schedule.round_starts_at();
  const int prefilling = most - 1 + kChunk;
  std::printf("  under eviction a decoding sequence holds at most %d tokens: %d blocks when its survivors are packed\n"
              "  (one being prefilled, up to %d: a chunk of %d can come before the round)\n",
              most, (most + kBlockSize - 1) / kBlockSize, prefilling, kChunk);
}

// Part 3: every request preempted in the run without eviction, served again alone
// in a pool of `whole` blocks: the same greedy tokens.
static void preemption_loses_nothing(const Model& model, const Timeline& none, int whole) {
  std::printf("\nPart 3: preemption loses nothing (no eviction)\n");
  int preempted = 0, same = 0;
  for (size_t id = 0; id < none.requests.size(); ++id) {
    const Request& r = none.requests[id];
    if (r.preemptions == 0) continue;
    ++preempted;
    EngineConfig roomy = engine_for_strategy("none", evicting());
    roomy.num_blocks = whole;
    Engine engine(model, roomy);
    Scheduler alone(engine, ServeConfig{kChunk});
    alone.submit(r.prompt, kNewTokens);
    alone.run();
    same += alone.request(0).output == r.output;
    std::printf("  request %zu: preempted %d time%s, recomputed; its %d tokens %s those served alone\n", id,
                r.preemptions, r.preemptions == 1 ? "" : "s", kNewTokens,
                alone.request(0).output == r.output ? "equal" : "DIFFER FROM (!)");
  }
  std::printf("  %d of %d preempted requests end as if never stopped; %lld tokens went through the model again\n", same,
              preempted, static_cast<long long>(none.stats.recomputed_tokens));
}

static void chapter() {
  const Model model = load_model(repo_path("assets/model"));
  const Tokenizer tok = Tokenizer::load(repo_path("assets/model/tokenizer.json"));
  const std::vector<std::vector<int>> ps = prompts(tok);
  const int whole = (kPromptLen + kNewTokens - 1 + kBlockSize - 1) / kBlockSize;
  std::printf("%d requests of %d prompt + %d new tokens (the bundled model, greedy); a pool of %d blocks of %d.\n",
              kRequests, kPromptLen, kNewTokens, kPoolBlocks, kBlockSize);
  std::printf("A whole context takes %d blocks, so %d requests fit without eviction.\n", whole, kPoolBlocks / whole);
  const EvictionSchedule schedule = evicting().schedule;
  std::printf("Eviction: H2O keeps %d tokens of a sequence (the %d first and the %d newest always) whenever it\n"
              "reaches %d. A prompt is prefilled %d tokens a step.\n",
              schedule.budget, schedule.sinks, schedule.recent, schedule.budget + schedule.slack, kChunk);

  const std::vector<std::string> strategies = {"none", "holes", "compact"};
  std::vector<Timeline> runs;
  for (const std::string& s : strategies) runs.push_back(serve(model, s, ps));
  who_runs_who_waits(strategies, runs);
  blocks_a_sequence_holds(strategies, runs, schedule);
  preemption_loses_nothing(model, runs[0], whole);
}

int main(int argc, char** argv) { return run_chapter(argc, argv, chapter); }
