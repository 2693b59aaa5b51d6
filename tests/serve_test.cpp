// Many requests, one pool: batched forward passes, the scheduler, preemption, serve-bench.
#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <numeric>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cache/invariants.h"
#include "cache/occupancy.h"
#include "cache/trace.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "model/weights.h"
#include "markdown_table.h"
#include "refused_run_trace.h"
#include "run_kvscope.h"
#include "scoped_threads.h"
#include "serve/scheduler.h"
#include "serve/serve_bench.h"
#include "test_paths.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/file.h"
#include "util/format.h"
#include "util/max_abs_diff.h"

namespace kvscope {
namespace {

std::vector<int> tokens(int n, int salt) {
  std::vector<int> t;
  for (int i = 0; i < n; ++i) t.push_back((i * 37 + salt * 101 + 11) % 300);
  return t;
}

EngineConfig config(MemoryStrategy strategy, const std::string& policy, int budget, int num_blocks = 128) {
  EngineConfig c;
  c.num_blocks = num_blocks;
  c.block_size = 4;
  c.strategy = strategy;
  c.schedule = {budget, /*slack=*/6, /*sinks=*/2, /*recent=*/5};
  if (budget > 0) c.policy = [policy] { return make_policy(policy, 1); };
  return c;
}

// One sequence's script: its prompt in chunks, then one token per step.
struct Script {
  int start;                              // the batched step it joins at
  std::vector<std::vector<int>> pieces;   // what it feeds at each of its steps
};

Script script(int start, int prompt_len, int chunk, int decode_steps, int salt) {
  Script s{start, {}};
  const std::vector<int> prompt = tokens(prompt_len, salt);
  for (int i = 0; i < prompt_len; i += chunk)
    s.pieces.emplace_back(prompt.begin() + i, prompt.begin() + std::min(prompt_len, i + chunk));
  for (int t : tokens(decode_steps, salt + 7)) s.pieces.push_back({t});
  return s;
}

// Runs the scripts together, one step_batch per step: the logits after each piece. [script][piece][vocab]
std::vector<std::vector<std::vector<float>>> run_batched(const Model& m, const EngineConfig& c,
                                                         const std::vector<Script>& scripts) {
  Engine e(m, c);
  const int vocab = m.config.vocab_size;
  std::vector<int> seq;
  for (size_t i = 0; i < scripts.size(); ++i) seq.push_back(e.add_sequence());
  std::vector<std::vector<std::vector<float>>> out(scripts.size());
  for (int step = 0;; ++step) {
    std::vector<BatchItem> items;
    std::vector<size_t> who;
    for (size_t i = 0; i < scripts.size(); ++i) {
      const int k = step - scripts[i].start;
      if (k < 0 || k >= int(scripts[i].pieces.size())) continue;
      BatchItem it;
      it.seq = seq[i];
      it.tokens = scripts[i].pieces[size_t(k)];
      items.push_back(it);
      who.push_back(i);
    }
    if (items.empty() && step > 0) break;
    if (items.empty()) continue;
    const float* logits = e.step_batch(items);
    for (size_t j = 0; j < who.size(); ++j) out[who[j]].emplace_back(logits + j * vocab, logits + (j + 1) * vocab);
  }
  check_invariants(e.cache());
  return out;
}

// The same script alone in its own engine, through prefill() and decode(): the logits after each piece.
std::vector<std::vector<float>> run_alone(const Model& m, const EngineConfig& c, const Script& s) {
  Engine e(m, c);
  const int seq = e.add_sequence();
  std::vector<std::vector<float>> out;
  for (const std::vector<int>& piece : s.pieces) {
    const float* logits = piece.size() == 1 ? e.decode(seq, piece[0]) : e.prefill(seq, piece);
    out.emplace_back(logits, logits + m.config.vocab_size);
  }
  return out;
}

TEST(Batch, EachSequenceGetsTheLogitsItWouldGetAlone) {
  // Three sequences of different lengths, joining at different steps, prefilling
  // in chunks of 4 while the others decode. Only the rows are stacked: the logits
  // must be those of each sequence run by itself, chunked the same way, to the bit
  // (the decode rows share matvec_f32_n, whose sums are a lone GEMV's; each chunk is
  // its own GEMM, as alone). Two threads, so the pieces' attention runs in parallel
  // as it does when serving.
  const test::ScopedThreads two(2);
  Model m = load_model(test::tiny_model("tiny-untied"));
  const std::vector<Script> scripts = {script(0, 13, 4, 20, 1), script(2, 5, 4, 20, 2), script(3, 22, 4, 20, 3)};
  struct Case {
    MemoryStrategy strategy;
    const char* policy;
    int budget;
  };
  // Eviction rounds run after the same pieces in both runs, so the same tokens are kept.
  for (const Case& k : {Case{MemoryStrategy::HolesOnly, "", 0}, Case{MemoryStrategy::Compact, "streaming", 12},
                        Case{MemoryStrategy::Compact, "h2o", 12}, Case{MemoryStrategy::ReuseHoles, "h2o", 12}}) {
    const EngineConfig c = config(k.strategy, k.policy, k.budget);
    const auto batched = run_batched(m, c, scripts);
    float worst = 0;
    for (size_t i = 0; i < scripts.size(); ++i) {
      const auto alone = run_alone(m, c, scripts[i]);
      ASSERT_EQ(batched[i].size(), alone.size());
      for (size_t p = 0; p < alone.size(); ++p) {
        const float diff = max_abs_diff(batched[i][p], alone[p]);
        EXPECT_EQ(diff, 0.0f) << strategy_name(k.strategy) << " " << k.policy << ": sequence " << i << ", piece " << p;
        worst = std::max(worst, diff);
      }
    }
    std::printf("%s %s: max |batched - alone| = %g\n", strategy_name(k.strategy), k.policy, worst);
  }
}

// SnapKV votes with the window's queries only: a prefill chunk longer than its
// window (40 > 32; serve-bench's default chunk is 64) tells it the last 32 of the
// chunk's queries, batched as alone. (Telling it all 40 in batched steps changed the
// kept tokens and serve-bench's generated text, and passed every other test.)
TEST(Batch, SnapKVCountsOnlyItsWindowsQueriesInALongChunk) {
  const test::ScopedThreads two(2);
  Model m = load_model(test::tiny_model("tiny-untied"));
  const std::vector<Script> scripts = {script(0, 90, 40, 12, 1), script(1, 45, 40, 12, 2), script(2, 70, 40, 12, 3)};
  const EngineConfig c = config(MemoryStrategy::Compact, "snapkv", 40);  // above 2 sinks + the window of 32
  const auto batched = run_batched(m, c, scripts);
  for (size_t i = 0; i < scripts.size(); ++i) {
    const auto alone = run_alone(m, c, scripts[i]);
    ASSERT_EQ(batched[i].size(), alone.size());
    for (size_t p = 0; p < alone.size(); ++p)
      EXPECT_EQ(max_abs_diff(batched[i][p], alone[p]), 0.0f) << "sequence " << i << ", piece " << p;
  }
}

TEST(Batch, DecodingTogetherMatchesAWholePromptPrefillAndDecodeAlone) {
  // No eviction: one prefill of the whole prompt and decode steps, alone, against
  // chunked prefill and decode inside a batch of three. Chunks change the order of
  // float sums (the projections' GEMM, and the flash path's tiles of queries, whose
  // Q K^T rounds a row by where it sits in the tile): these logits are about 10, where
  // a float's spacing is 1e-6, and the worst pair differs by 1.3e-5.
  constexpr float kTolerance = 2e-5f;
  Model m = load_model(test::tiny_model("tiny-tied"));
  const std::vector<Script> scripts = {script(0, 9, 3, 16, 4), script(1, 17, 5, 16, 5), script(1, 2, 2, 16, 6)};
  const EngineConfig c = config(MemoryStrategy::HolesOnly, "", 0);
  const auto batched = run_batched(m, c, scripts);
  for (size_t i = 0; i < scripts.size(); ++i) {
    Script whole{0, {}};
    std::vector<int> prompt;
    size_t k = 0;
    for (; k < scripts[i].pieces.size() && scripts[i].pieces[k].size() > 1; ++k)
      prompt.insert(prompt.end(), scripts[i].pieces[k].begin(), scripts[i].pieces[k].end());
    whole.pieces.push_back(prompt);
    for (; k < scripts[i].pieces.size(); ++k) whole.pieces.push_back(scripts[i].pieces[k]);
    const auto alone = run_alone(m, c, whole);
    const size_t prompt_pieces = scripts[i].pieces.size() - (whole.pieces.size() - 1);
    // The logits after the prompt, then after each decoded token.
    EXPECT_LE(max_abs_diff(batched[i][prompt_pieces - 1], alone[0]), kTolerance) << "sequence " << i;
    for (size_t p = 1; p < alone.size(); ++p)
      EXPECT_LE(max_abs_diff(batched[i][prompt_pieces - 1 + p], alone[p]), kTolerance) << "sequence " << i << ", step " << p;
  }
}

TEST(Batch, ARefusedBatchChangesNothing) {
  Model m = load_model(test::tiny_model("tiny-tied"));
  Engine e(m, config(MemoryStrategy::HolesOnly, "", 0, /*num_blocks=*/4));
  const int a = e.add_sequence(), b = e.add_sequence();
  e.prefill(a, tokens(6, 1));  // 2 blocks of 4, 2 free
  e.prefill(b, tokens(3, 2));  // 1 block, 1 free
  const auto live_a = e.cache().live_positions(a), live_b = e.cache().live_positions(b);
  // a needs 2 more blocks for 5 tokens (2 fit in its tail), b none for 1: 2 > 1 free.
  try {
    e.step_batch({BatchItem{a, tokens(7, 3)}, BatchItem{b, {5}}});
    ADD_FAILURE() << "no error";
  } catch (const Error& err) {
    EXPECT_STREQ(err.what(),
                 "block pool exhausted: the batch of 2 sequences needs 2 more blocks, the pool has 1 free; "
                 "the step is refused and no sequence is changed");
  }
  EXPECT_EQ(e.cache().live_positions(a), live_a);
  EXPECT_EQ(e.cache().live_positions(b), live_b);
  EXPECT_EQ(e.cache().pool().num_free(), 1);
  try {
    e.step_batch({BatchItem{a, {1}}, BatchItem{a, {2}}});
    ADD_FAILURE() << "no error";
  } catch (const Error& err) {
    EXPECT_STREQ(err.what(), "forward: sequence 0 comes twice in one batch");
  }
  EXPECT_THROW(e.step_batch({BatchItem{b, {1}}, BatchItem{a, {100000}}}), Error);  // a bad token id
  EXPECT_EQ(e.cache().live_positions(b), live_b);
  check_invariants(e.cache());
  // What fits runs.
  e.step_batch({BatchItem{a, {1, 2}}, BatchItem{b, {5}}});
  EXPECT_EQ(e.cache().sequence(a).live, 8);
  EXPECT_EQ(e.cache().sequence(b).live, 4);
}

// Serves the requests to the end; their greedy outputs.
std::vector<std::vector<int>> serve(const Model& m, const EngineConfig& c, const std::vector<std::vector<int>>& prompts,
                                    int n, int chunk, ServeStats* stats = nullptr) {
  Engine e(m, c);
  Scheduler s(e, {chunk, 0});
  for (const auto& p : prompts) s.submit(p, n);
  int steps = 0;
  while (s.step()) {
    check_invariants(e.cache());
    // The stats' last step: the sequences holding blocks are those still running,
    // and the blocks in use are theirs (tutorial 8 divides one by the other).
    size_t held = 0;
    int holding = 0;
    for (int i = 0; i < s.num_requests(); ++i)
      if (s.request(i).seq >= 0) {
        held += e.cache().sequence(s.request(i).seq).blocks.size();
        ++holding;
      }
    EXPECT_EQ(s.stats().holding.back(), holding);
    EXPECT_EQ(size_t(s.stats().blocks_in_use.back()), held);
    // First come, first served: every request holding blocks arrived before every one
    // waiting (a preempted request goes back to the front of the queue), and a
    // finished one holds none.
    int newest_holding = -1, oldest_waiting = s.num_requests();
    for (int i = 0; i < s.num_requests(); ++i) {
      const Request& q = s.request(i);
      if (q.finished) EXPECT_EQ(q.seq, -1) << "request " << i;
      else if (q.seq >= 0) newest_holding = std::max(newest_holding, i);
      else oldest_waiting = std::min(oldest_waiting, i);
    }
    EXPECT_LT(newest_holding, oldest_waiting) << "step " << steps;
    EXPECT_LT(++steps, 100000) << "no progress";
    if (steps >= 100000) break;
  }
  std::vector<std::vector<int>> out;
  for (int i = 0; i < s.num_requests(); ++i) {
    EXPECT_TRUE(s.request(i).finished) << "request " << i;
    EXPECT_EQ(int(s.request(i).output.size()), n) << "request " << i;
    out.push_back(s.request(i).output);
  }
  // Nothing is left behind: every block is back in the pool.
  EXPECT_EQ(e.cache().pool().num_free(), e.cache().num_blocks());
  EXPECT_EQ(s.num_running() + s.num_waiting(), 0);
  if (stats) *stats = s.stats();
  return out;
}

std::vector<std::vector<int>> prompts(int n, int len) {
  std::vector<std::vector<int>> p;
  for (int i = 0; i < n; ++i) p.push_back(tokens(len + i % 3, i + 1));
  return p;
}

// A sequence whose last token this step samples is released right after it: its due
// round is skipped (once it evicted and compacted for nothing, and counted the bytes).
// The scheduler passes them; serving stops paying a round in a request's last step.
TEST(Batch, ASequenceThatFinishesInTheStepHasNoRound) {
  Model m = load_model(test::tiny_model("tiny-tied"));
  Engine e(m, config(MemoryStrategy::Compact, "random", 12));  // a round at 12 + 6 live
  const int a = e.add_sequence(), b = e.add_sequence();
  e.step_batch({BatchItem{a, tokens(18, 1)}, BatchItem{b, tokens(18, 2)}}, /*finishing=*/{b});
  EXPECT_EQ(e.stats(a).rounds, 1);
  EXPECT_EQ(e.cache().sequence(a).live, 12);
  EXPECT_EQ(e.stats(b).rounds, 0);
  EXPECT_EQ(e.cache().sequence(b).live, 18);

  // Through the scheduler: one request whose last step reaches a round moves no more
  // bytes than one that stops a token short of it.
  const auto moved = [&](int n) {
    ServeStats st;
    serve(m, config(MemoryStrategy::Compact, "random", 12), {tokens(17, 3)}, n, 32, &st);
    return st.bytes_moved;
  };
  EXPECT_EQ(moved(2), 0u);  // the prompt's step reaches 17 live, the next (18) is its last: no round
  EXPECT_GT(moved(3), 0u);  // one token more: the step that reaches 18 is not the last, and its round moves
}

TEST(Scheduler, PreemptedRequestsFinishWithTheSameGreedyOutput) {
  // No eviction. With room for all, nobody is preempted; with a pool that holds
  // two or three requests, the newest are preempted again and again and recompute
  // their prompt and output. Greedy decoding must produce the same tokens.
  Model m = load_model(test::tiny_model("tiny-untied"));
  const auto ps = prompts(6, 10);
  ServeStats roomy, tight;
  const auto a = serve(m, config(MemoryStrategy::HolesOnly, "", 0, /*num_blocks=*/200), ps, 30, 4, &roomy);
  const auto b = serve(m, config(MemoryStrategy::HolesOnly, "", 0, /*num_blocks=*/24), ps, 30, 4, &tight);
  EXPECT_EQ(roomy.preemptions, 0);
  EXPECT_EQ(roomy.peak_running, 6);
  EXPECT_GT(tight.preemptions, 0);
  EXPECT_GT(tight.recomputed_tokens, 0);
  EXPECT_LT(tight.peak_running, 6);
  EXPECT_EQ(a, b);
  // And the same as generate(), one request at a time with no batching at all.
  for (size_t i = 0; i < ps.size(); ++i) {
    GenerateOptions g;
    g.max_new_tokens = 30;
    g.sampler.temperature = 0;
    g.engine.block_size = 4;
    std::vector<int> out;
    generate(m, ps[i], g, [&](int t) { out.push_back(t); });
    EXPECT_EQ(out, a[i]) << "request " << i;
  }
}

TEST(Scheduler, EveryRequestFinishesUnderEveryStrategy) {
  Model m = load_model(test::tiny_model("tiny-tied"));
  const auto ps = prompts(8, 12);
  for (MemoryStrategy st : {MemoryStrategy::HolesOnly, MemoryStrategy::ReuseHoles, MemoryStrategy::Compact}) {
    ServeStats s;
    serve(m, config(st, "h2o", 12, /*num_blocks=*/20), ps, 40, 4, &s);
    EXPECT_EQ(s.generated_tokens, 8 * 40) << strategy_name(st);
    EXPECT_EQ(s.bytes_moved > 0, st == MemoryStrategy::Compact) << strategy_name(st);
  }
}

TEST(Scheduler, CompactionRunsMoreSequencesAtOnceThanHolesOnly) {
  // Random eviction scatters the survivors: under holes only few blocks empty and
  // a sequence holds nearly its whole context; compaction gives the emptied slots
  // back as whole blocks, so the same pool holds more sequences at once.
  Model m = load_model(test::tiny_model("tiny-tied"));
  const auto ps = prompts(12, 16);
  ServeStats none, holes, compact;
  serve(m, config(MemoryStrategy::HolesOnly, "", 0, 48), ps, 80, 8, &none);
  serve(m, config(MemoryStrategy::HolesOnly, "random", 12, 48), ps, 80, 8, &holes);
  serve(m, config(MemoryStrategy::Compact, "random", 12, 48), ps, 80, 8, &compact);
  const auto mean = [](const std::vector<int>& v) { return double(std::accumulate(v.begin(), v.end(), 0)) / v.size(); };
  EXPECT_GT(compact.peak_running, holes.peak_running);
  EXPECT_GT(mean(compact.running), mean(holes.running));
  EXPECT_GT(mean(holes.running), mean(none.running));
  EXPECT_LT(compact.steps, holes.steps);  // the same tokens in fewer, wider steps
  EXPECT_LT(holes.steps, none.steps);
  EXPECT_GT(compact.bytes_moved, 0u);
  EXPECT_EQ(holes.bytes_moved, 0u);
}

TEST(Scheduler, RefusesARequestThatCouldNeverFit) {
  Model m = load_model(test::tiny_model("tiny-tied"));
  Engine e(m, config(MemoryStrategy::HolesOnly, "", 0, /*num_blocks=*/4));  // 16 tokens
  Scheduler s(e, {4, 0});
  try {
    s.submit(tokens(10, 1), 8);  // 17 tokens in the cache at the end
    ADD_FAILURE() << "no error";
  } catch (const Error& err) {
    EXPECT_STREQ(err.what(), "request 0: 10 prompt + 8 new tokens need at least 5 blocks of 4 at once, and the pool "
                             "has only 4: it could never run");
  }
  EXPECT_THROW(s.submit({}, 4), Error);
  EXPECT_THROW(s.submit(tokens(3, 1), 0), Error);
  EXPECT_THROW(s.submit({1, 2, 100000}, 1), Error);
  // prompt + new tokens in 64 bits: INT_MAX new tokens wrapped negative and passed both checks.
  EXPECT_THROW(s.submit({1, 2}, 2147483647), Error);
  EXPECT_EQ(s.num_waiting(), 0);
  s.submit(tokens(10, 1), 7);  // exactly 16
  s.run();
  EXPECT_EQ(s.request(0).output.size(), 7u);
  EXPECT_THROW(Scheduler(e, {0, 0}), Error);
}

// With eviction a request holds at most budget + slack - 1 tokens between rounds,
// plus one step's: 16 + 6 - 1 + 11 (a prefill chunk) = 32 tokens, 8 blocks of 4,
// however long it is. A pool of exactly 8 admits it and runs it to the end.
TEST(Scheduler, WithEvictionARequestNeedsItsBudgetAndSlackAndOneChunk) {
  EXPECT_EQ(most_live_tokens({16, 6, 2, 5}, 100, 11), 32);
  EXPECT_EQ(most_live_tokens({16, 6, 2, 5}, 20, 11), 20);
  EXPECT_EQ(most_live_tokens({16, 6, 2, 5}, 100, std::numeric_limits<int>::max()), 100);  // one chunk: all of it
  EXPECT_EQ(blocks_a_request_needs({16, 6, 2, 5}, 100, 11, 4), 8);
  EXPECT_EQ(blocks_a_request_needs({16, 6, 2, 5}, 20, 11, 4), 5);  // a short one: its whole context
  EXPECT_EQ(blocks_a_request_needs({0, 6, 2, 5}, 100, 11, 4), 25);  // no eviction: all of it
  Model m = load_model(test::tiny_model("tiny-tied"));
  Engine e(m, config(MemoryStrategy::Compact, "streaming", 16, /*num_blocks=*/8));
  Scheduler s(e, {11, 0});
  s.submit(tokens(40, 1), 61);  // 100 tokens of context
  s.run();
  EXPECT_EQ(s.request(0).output.size(), 61u);
}

// Two requests of 4 prompt + 9 new tokens (12 fed at the end, 3 blocks of 4 each) in a
// pool of 3, worked by hand. A request is admitted for the blocks its context needs
// now, and preempted when the pool runs out.
//   Step 1 prefills A (1 block); A samples its first token.
//   Step 2: A's 5th token opens a block, which leaves 3 - 1 - 1 = 1 free for B, whose
//   4-token prompt needs exactly 1: B is admitted, and the pool is full after the step.
//   Step 3: B's 5th token needs a block and none is free: B, the newest, is preempted.
//   It held 1 block and asked for 1, so it waits for 2, and its 4 fed tokens will be
//   fed again.
TEST(Scheduler, AdmissionAndPreemptionWorkedByHand) {
  Model m = load_model(test::tiny_model("tiny-tied"));
  Engine e(m, config(MemoryStrategy::HolesOnly, "", 0, /*num_blocks=*/3));
  Scheduler s(e, {8, 0});
  s.submit(tokens(4, 1), 9);
  s.submit(tokens(4, 2), 9);
  s.step();
  EXPECT_EQ(s.num_running(), 1);
  EXPECT_EQ(e.cache().pool().num_free(), 2);
  s.step();
  EXPECT_EQ(s.num_running(), 2) << "the one block A's step leaves is what B needs";
  EXPECT_EQ(e.cache().pool().num_free(), 0);
  EXPECT_EQ(s.stats().preemptions, 0);
  s.step();
  const Request& b = s.request(1);
  EXPECT_EQ(s.stats().preemptions, 1);
  EXPECT_EQ(b.preemptions, 1);
  EXPECT_EQ(b.seq, -1);
  EXPECT_EQ(b.need, 1 + 1) << "the block it held and the block its step asked for";
  EXPECT_EQ(s.stats().recomputed_tokens, 4);
  EXPECT_EQ(s.request(0).preemptions, 0);
  s.run();
  EXPECT_EQ(s.request(0).output.size(), 9u);
  EXPECT_EQ(b.output.size(), 9u);
}

// A preempted request waits for the blocks it held and those its refused step asked for
// (Request::need), not just for what its context needs now: readmitted sooner, under
// holes, it lost its place again at once. Checked at every readmission of a run with
// many (admission happens only when no running request is prefilling, one at a time).
TEST(Scheduler, APreemptedRequestWaitsForTheBlocksItHeldAndAskedFor) {
  Model m = load_model(test::tiny_model("tiny-tied"));
  Engine e(m, config(MemoryStrategy::HolesOnly, "random", 16, /*num_blocks=*/24));
  Scheduler s(e, {4, 0});
  for (int i = 0; i < 8; ++i) s.submit(tokens(16, i), 120);
  int readmissions = 0;
  for (bool more = true; more;) {
    // What admission sees before the step: the free blocks less those the running take in it.
    std::vector<int> seq_before;
    int64_t running_take = 0;
    for (int i = 0; i < s.num_requests(); ++i) {
      seq_before.push_back(s.request(i).seq);
      if (s.request(i).seq >= 0) running_take += e.cache().blocks_needed(s.request(i).seq, 1);
    }
    const int64_t free = e.cache().pool().num_free();
    const bool anyone_running = s.num_running() > 0;
    more = s.step();
    for (int i = 0; i < s.num_requests(); ++i) {
      const Request& r = s.request(i);
      if (seq_before[i] >= 0 || r.seq < 0 || r.preemptions == 0 || !anyone_running) continue;
      ++readmissions;
      EXPECT_GE(free - running_take, r.need) << "request " << i << " readmitted at step " << s.stats().steps;
    }
  }
  EXPECT_GT(readmissions, 5);
  EXPECT_EQ(s.stats().generated_tokens, 8 * 120);
}

// Admission counts the blocks the running requests take in this same step: 3 blocks of
// 4; A's prompt fills one, and its next token needs a second. B's 8 tokens need 2, and
// only 1 is left beside A's: B waits. (Admitted on the 2 free blocks, B would be
// preempted in the very step it joined: the batch asks 3.)
TEST(Scheduler, AdmissionLeavesTheBlocksTheRunningRequestsTakeThisStep) {
  Model m = load_model(test::tiny_model("tiny-tied"));
  Engine e(m, config(MemoryStrategy::HolesOnly, "", 0, /*num_blocks=*/3));
  Scheduler s(e, {8, 0});
  s.submit(tokens(4, 1), 5);
  s.submit(tokens(8, 2), 1);
  s.step();
  ASSERT_EQ(e.cache().pool().num_free(), 2);
  s.step();
  EXPECT_EQ(s.num_running(), 1);
  EXPECT_TRUE(s.request(1).seqs.empty()) << "B was admitted into blocks A's step takes";
  EXPECT_EQ(s.stats().preemptions, 0);
  s.run();
  EXPECT_EQ(s.stats().preemptions, 0);
  EXPECT_EQ(s.request(1).output.size(), 1u);
}

TEST(Scheduler, ALoneRequestThatOutgrowsThePoolIsAnErrorNotAHang) {
  // Eviction keeps 16 tokens, which compaction would hold in 6 blocks of 4; but
  // holes only with random eviction leaves survivors scattered over ever more
  // blocks. Alone in the pool, with nobody to preempt, the run stops with an error.
  Model m = load_model(test::tiny_model("tiny-tied"));
  Engine e(m, config(MemoryStrategy::HolesOnly, "random", 16, /*num_blocks=*/8));
  Scheduler s(e, {4, 0});
  s.submit(tokens(8, 1), 300);
  try {
    s.run();
    ADD_FAILURE() << "no error";
  } catch (const Error& err) {
    const std::string what = err.what();
    EXPECT_EQ(what,
              "request 0 alone needs 1 more block for its next token, and the pool of 8 blocks has 0 free with nothing "
              "left to preempt (memory strategy holes: a block returns only when every slot in it is evicted; compact "
              "gives the emptied slots back)");
  }
  EXPECT_GT(s.request(0).output.size(), 8u);  // it ran a while first
  EXPECT_LT(s.request(0).output.size(), 300u);
  // The same request under compaction runs to the end in the same pool.
  Engine compact(m, config(MemoryStrategy::Compact, "random", 16, /*num_blocks=*/8));
  Scheduler t(compact, {4, 0});
  t.submit(tokens(8, 1), 300);
  t.run();
  EXPECT_EQ(t.request(0).output.size(), 300u);
}

TEST(Scheduler, TheEventStreamShowsRequestsSharingThePool) {
  // Every cache event carries its sequence id: a recorded serving run replays, the
  // requests' sequences interleave, and a waiting request's first block comes from
  // blocks another request's eviction, compaction or end gave back.
  Model m = load_model(test::tiny_model("tiny-tied"));
  EventLog events;
  const EngineConfig c = config(MemoryStrategy::Compact, "h2o", 12, /*num_blocks=*/16);
  const ServeRun run = serve_requests(m, "compact", c, {4, 0}, prompts(6, 12), 30, {}, &events);
  EXPECT_EQ(run.finished, 6);
  const Occupancy end = replay({c.block_size, c.num_blocks, c.strategy, {}}, events);
  EXPECT_EQ(end.blocks_in_use(), 0);
  std::vector<int> first_alloc(6, -1), freed_before(6, 0);
  int freed = 0, last_of_0 = -1;
  for (size_t i = 0; i < events.size(); ++i) {
    const Event& e = events[i];
    ASSERT_GE(e.seq, 0);
    if (e.seq == 0) last_of_0 = int(i);
    if (e.kind == EventKind::BlockFreed) ++freed;
    if (e.kind == EventKind::BlockAllocated && e.seq < 6 && first_alloc[size_t(e.seq)] < 0) {
      first_alloc[size_t(e.seq)] = int(i);
      freed_before[size_t(e.seq)] = freed;
    }
  }
  for (int s = 0; s < 6; ++s) EXPECT_GE(first_alloc[size_t(s)], 0) << "sequence " << s;
  EXPECT_LT(first_alloc[1], last_of_0);  // the second starts while the first runs
  EXPECT_GT(freed_before[5], 0);                   // the last is admitted into blocks given back
}

TEST(ServeBench, BadInputIsAClearError) {
  for (const std::string args : {"--blocks 0", "--requests 0", "--prompt-len 0", "--chunk 0", "--block-size 0",
                                  "--strategies holes,nowhere", "--budget 8 --recent 32", "--repeat 0"}) {
    const test::ProgramRun r = test::run_kvscope("serve-bench --model " + test::tiny_model("tiny-tied") + " " + args);
    EXPECT_EQ(r.code, 1) << args << "\n" << r.output;
    EXPECT_EQ(r.output.rfind("kvscope: error: ", 0), 0u) << args << "\n" << r.output;
  }
  const test::ProgramRun r = test::run_kvscope("serve-bench --blocks 0");
  EXPECT_EQ(r.output, "kvscope: error: --blocks: must be above 0, not 0 (--help lists the options)\n");

  // A pool too small for one request is refused before any run, naming the strategy
  // and the way out. The defaults: 256 + 256 tokens (511 cached), blocks of 16, H2O
  // keeping 64 with rounds at +32, prefill chunks of 64.
  const test::ProgramRun none = test::run_kvscope("serve-bench --blocks 16");
  EXPECT_EQ(none.output,
            "kvscope: error: --blocks 16: under strategy none one request needs 32 blocks of 16 at once (its whole "
            "context of 511 tokens, with nothing evicted): give --blocks 32, or leave none out of --strategies\n");
  const test::ProgramRun evicting = test::run_kvscope("serve-bench --blocks 9 --strategies holes,compact");
  EXPECT_EQ(evicting.output,  // ceil((64 + 32 - 1 + 64) / 16) = 10
            "kvscope: error: --blocks 9: under strategy holes one request needs 10 blocks of 16 at once (up to budget "
            "+ slack - 1 tokens between rounds, plus a prefill chunk: 159): give --blocks 10, or lower --budget, "
            "--slack or --chunk\n");
  // A request longer than the model's positions is said first: no pool would help it.
  // (It was a pool refusal, "give --blocks 3141", and with those blocks this message.)
  EXPECT_EQ(test::run_kvscope("serve-bench --prompt-len 50000").output,
            "kvscope: error: --prompt-len 50000 + --output-len 256 exceed the model's max_position_embeddings "
            "(2048): lower either\n");
  // A chunk near INT_MAX (a whole prompt at once): budget + slack - 1 + chunk overflowed an int
  // in the pool check, which then passed any --blocks. The whole context is what one request needs.
  EXPECT_EQ(test::run_kvscope("serve-bench --blocks 16 --chunk 2147483647 --strategies holes").output,
            "kvscope: error: --blocks 16: under strategy holes one request needs 32 blocks of 16 at once (its whole "
            "context of 511 tokens, no more than budget + slack - 1 + a prefill chunk): give --blocks 32, or lower "
            "--prompt-len or --output-len\n");
  // So is a short request's, with the default chunk: 40 + 60 - 1 = 99 tokens, 7 blocks (it said "up to
  // budget + slack - 1 tokens between rounds", which are 159 here).
  EXPECT_EQ(test::run_kvscope("serve-bench --blocks 4 --prompt-len 40 --output-len 60 --strategies compact").output,
            "kvscope: error: --blocks 4: under strategy compact one request needs 7 blocks of 16 at once (its whole "
            "context of 99 tokens, no more than budget + slack - 1 + a prefill chunk): give --blocks 7, or lower "
            "--prompt-len or --output-len\n");
  // Requests too short for a round: the evicting rows were the "none" row under other names.
  EXPECT_EQ(test::run_kvscope("serve-bench --prompt-len 16 --output-len 4").output,
            "kvscope: error: --budget 64 + --slack 32 = 96 live tokens start a round, and a request holds at most 18 "
            "before its last step, which runs none (--prompt-len + --output-len - 2): nothing would be evicted under "
            "holes; lower --budget or --slack, or raise the lengths\n");
  // At the boundary: a request's last step runs no round (it is released), so a
  // context of exactly 96 was accepted and every row was "none" (0 MB moved). One more
  // token starts a round in the step before the last.
  const std::string lengths = "serve-bench --requests 2 --blocks 40 --repeat 1 --strategies compact ";
  EXPECT_EQ(test::run_kvscope(lengths + "--prompt-len 48 --output-len 49").output.rfind(
                "kvscope: error: --budget 64 + --slack 32 = 96 live tokens start a round, and a request holds at most "
                "95 before its last step", 0), 0u);
  EXPECT_EQ(test::run_kvscope(lengths + "--prompt-len 48 --output-len 50").code, 0);
  // One new token: the prompt's last chunk is the last step; 100 tokens in chunks of 64
  // reach 64 before it (100 > 96 once passed the check, and nothing was evicted).
  EXPECT_EQ(test::run_kvscope(lengths + "--prompt-len 100 --output-len 1").output.rfind(
                "kvscope: error: --budget 64 + --slack 32 = 96 live tokens start a round, and a request holds at most "
                "64 before its last step, which runs none (its prompt's chunks of --chunk before the last)", 0), 0u);
  EXPECT_EQ(test::run_kvscope(lengths + "--prompt-len 100 --output-len 1 --chunk 96").code, 0);
  // More requests than the memory holds, said before the model loads (it was "out of memory").
  const test::ProgramRun many = test::run_kvscope("serve-bench --requests 2147483647");
  EXPECT_EQ(many.code, 1) << many.output;
  EXPECT_EQ(many.output.rfind("kvscope: error: not enough memory for 2147483647 requests of 256 + 256 tokens, kept "
                              "for 4 strategies (lower --requests): ", 0), 0u) << many.output;
  // A pool larger than the memory, refused before any of it is made: its tables and its
  // K/V together (once the slot table, 12.8 GB, was made before the K/V were refused).
  const test::ProgramRun pool = test::run_kvscope("serve-bench --blocks 1000000000");
  EXPECT_EQ(pool.output.rfind("kvscope: error: not enough memory for the paged K/V storage (1000000000 blocks of 16 "
                              "tokens; K and V of 4 layers, f32) and the cache's slot table (1000000000 blocks of 16 "
                              "slots, a position each): ", 0), 0u) << pool.output;
  // A --text shorter than one prompt (once repeated to fill it, without a word).
  const std::string short_text = test::binary_path("serve_short_" + std::to_string(::getpid()) + ".txt");
  std::FILE* f = std::fopen(short_text.c_str(), "w");
  std::fputs("short text", f);
  std::fclose(f);
  const test::ProgramRun text = test::run_kvscope("serve-bench --text " + short_text);
  std::remove(short_text.c_str());
  EXPECT_EQ(text.code, 1) << text.output;
  EXPECT_NE(text.output.find(short_text + ": has 3 tokens, fewer than --prompt-len 256: give a longer --text or a "
                                          "smaller --prompt-len\n"), std::string::npos) << text.output;
}

// Options that the run would not use are refused, not dropped: --text and --model
// beside --config (a random model has neither tokenizer nor weights to read), --layers
// without --config or beyond its layers, the eviction settings when no run evicts;
// and --strategies names the four it takes.
// The last new token is never fed, so 16 prompt + 1 new token hold 16 tokens at most:
// one block of 16, and a pool of 96 fits 96 such requests.
TEST(ServeBench, AWholeContextCountsTheTokensFed) {
  const test::ProgramRun r = test::run_kvscope("serve-bench --model " + test::tiny_model("tiny-tied") +
                                               " --requests 2 --prompt-len 16 --output-len 1 --blocks 96"
                                               " --block-size 16 --strategies none --repeat 1");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("a request's whole context takes 1 block, so 96 fit without eviction"), std::string::npos)
      << r.output;
}

TEST(ServeBench, OptionsItWouldIgnoreAreRefused) {
  const std::string config = test::source_path("assets/configs/qwen3-0.6b-config.json");
  const std::string model = test::tiny_model("tiny-tied");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--layers 2", "kvscope: error: --layers requires --config"},
      {"--config " + config + " --layers 99", "kvscope: error: --layers 99: " + config + " has only 28 layers\n"},
      {"--config " + config + " --text " + model + "/tokenizer.json", "excludes"},
      {"--config " + config + " --model " + model, "excludes"},
      {"--strategies none,holes,bogus", "kvscope: error: --strategies: bogus not in {none,holes,reuse,compact}"},
      {"--strategies none --policy snapkv",
       "kvscope: error: --policy has no effect with --strategies none, which runs without eviction\n"},
      {"--strategies none,none --budget 32",
       "kvscope: error: --budget has no effect with --strategies none, which runs without eviction\n"},
      // The held-out text's prompts and H2O draw nothing: the seed changed nothing, unsaid.
      {"--seed 7", "kvscope: error: --seed has no effect here: it seeds --policy random, and random prompts and "
                   "weights (--config)\n"},
  };
  for (const auto& [args, message] : cases) {
    const test::ProgramRun r = test::run_kvscope("serve-bench " + args);
    EXPECT_EQ(r.code, 1) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << args << "\n" << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << args << "\n" << r.output;
  }
}

// --threads 0, the default, leaves OpenMP its own count (every core here) and --threads N
// sets N: the header says how many ran. ctest gives each test OMP_NUM_THREADS=1, so these
// runs unset it. (On a one-core machine the two cases cannot be told apart.)
TEST(ServeBench, TheHeaderSaysHowManyThreadsRan) {
  const auto header = [](int threads) {
    return test::run_shell("env -u OMP_NUM_THREADS " + test::binary_path("kvscope") + " serve-bench --model '" +
                           test::tiny_model("tiny-tied") + "' --strategies none --requests 1 --prompt-len 8 "
                           "--output-len 2 --repeat 1 --threads " + std::to_string(threads) + " 2>/dev/null")
        .output;
  };
  const std::string all = header(0), one = header(1);
  EXPECT_NE(all.find(", " + plural(omp_get_num_procs(), "thread") + "\n"), std::string::npos) << all;
  EXPECT_NE(one.find(", 1 thread\n"), std::string::npos) << one;
}

// The cell of `column` in the table row of `strategy`.
std::string cell(const std::string& table, const std::string& strategy, int column) {
  const std::vector<std::string> cells = test::table_row(table, "| " + strategy + " |");
  return cells.empty() ? "" : cells.at(size_t(column));
}

TEST(ServeBench, APoolOfHolesThatRunsOutKeepsItsTrace) {
  // The scheduler's lone-request refusal (above) from the command line, with --trace:
  // the run up to the refused step is written, as generate writes its own, and it
  // replays to the pool of holes that stopped it. Once the trace was lost with the run.
  const std::string path = testing::TempDir() + "serve_exhausted.trace";
  const test::ProgramRun r = test::run_shell(
      test::binary_path("kvscope") + " serve-bench --model '" + test::tiny_model("tiny-tied") +
      "' --strategies holes --requests 1 --prompt-len 8 --output-len 300 --blocks 8 --block-size 4 --budget 16 "
      "--slack 6 --sinks 2 --recent 5 --policy random --chunk 4 --repeat 1 --trace " + path + " 2>&1 >/dev/null");
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.output,
            "kvscope: error: request 0 alone needs 1 more block for its next token, and the pool of 8 blocks has 0 "
            "free with nothing left to preempt (memory strategy holes: a block returns only when every slot in it is "
            "evicted; compact gives the emptied slots back) (the run up to that step: " + path + ")\n");
  test::expect_the_trace_of_a_refused_run(path, /*num_blocks=*/8);
  std::remove(path.c_str());
}

// A strategy whose pool runs out does not take the finished ones with it: their rows
// are printed, then the error (once the compact row was lost with the holes run).
TEST(ServeBench, TheStrategiesThatFinishedArePrintedWhenALaterOneRunsOut) {
  const test::ProgramRun r = test::run_shell(
      test::binary_path("kvscope") + " serve-bench --model '" + test::tiny_model("tiny-tied") +
      "' --strategies compact,holes --requests 1 --prompt-len 8 --output-len 300 --blocks 8 --block-size 4 "
      "--budget 16 --slack 6 --sinks 2 --recent 5 --policy random --chunk 4 --repeat 1 2>/dev/null");
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(cell(r.output, "compact", 9), "1") << r.output;  // finished: 1 of 1 request
  EXPECT_EQ(r.output.find("| holes |"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\nholes did not finish: its pool ran out (below)\n"), std::string::npos) << r.output;
  // With --json, the error says it was not written (a file from an earlier run stays,
  // and once looked like this run's).
  const std::string json = testing::TempDir() + "serve_not_written.json";
  const test::ProgramRun j = test::run_kvscope(
      "serve-bench --model '" + test::tiny_model("tiny-tied") + "' --strategies compact,holes --requests 1 "
      "--prompt-len 8 --output-len 300 --blocks 8 --block-size 4 --budget 16 --slack 6 --sinks 2 --recent 5 "
      "--policy random --chunk 4 --repeat 1 --json " + json);
  EXPECT_EQ(j.code, 1);
  EXPECT_NE(j.output.find("(--json " + json + " not written)\n"), std::string::npos) << j.output;
  // --trace records the last strategy; holes first running out means it never ran
  // (once no word of the missing file).
  const std::string trace = testing::TempDir() + "serve_not_recorded.trace";
  std::remove(trace.c_str());
  const test::ProgramRun t = test::run_kvscope(
      "serve-bench --model '" + test::tiny_model("tiny-tied") + "' --strategies holes,compact --requests 1 "
      "--prompt-len 8 --output-len 300 --blocks 8 --block-size 4 --budget 16 --slack 6 --sinks 2 --recent 5 "
      "--policy random --chunk 4 --repeat 1 --trace " + trace);
  EXPECT_EQ(t.code, 1);
  EXPECT_NE(t.output.find("(--trace " + trace + " not written: it records compact, which did not run)\n"),
            std::string::npos) << t.output;
  EXPECT_FALSE(std::filesystem::exists(trace));
}

// The peak is taken within a step, after its K/V writes and before the finished
// requests give their blocks back: these one-token requests hold 2 blocks in every
// step and none after it (once reported as "0.0 (0)").
TEST(ServeBench, ThePeakOfBlocksInUseIsTakenWithinAStep) {
  const std::string json = testing::TempDir() + "serve_peak.json";
  const test::ProgramRun r = test::run_kvscope(
      "serve-bench --model '" + test::tiny_model("tiny-tied") + "' --requests 3 --prompt-len 8 --output-len 1 "
      "--blocks 4 --block-size 4 --strategies none --repeat 1 --json " + json);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(cell(r.output, "none", 6), "0.0 (2)") << r.output;
  const nlohmann::json j = nlohmann::json::parse(read_file(json));
  EXPECT_EQ(j["runs"][0]["peak_blocks"], 2);
  // With no strategy that evicts, the JSON says no eviction, as the setup line and the trace do.
  EXPECT_EQ(j["policy"], "none");
  EXPECT_EQ(j["budget"], 0);
  EXPECT_EQ(j["sinks"], 0);
  // What the runs were, to tell two files apart: the model, the seed, the threads, and
  // the sequences holding blocks after each step (tutorial 8's "blocks a sequence").
  EXPECT_EQ(j["model"], absolute_path(test::tiny_model("tiny-tied")));
  EXPECT_EQ(j["layers"], 2) << "the model's layers, not --layers' 0 (all)";
  EXPECT_EQ(j["seed"], 1);
  EXPECT_GE(j["threads"].get<int>(), 1);
  // Each request finishes in one step: in that step's batch ("running"), not among those
  // holding blocks after it.
  const std::vector<int> running = j["runs"][0]["running"], holding = j["runs"][0]["holding"];
  ASSERT_EQ(holding.size(), running.size());
  int finished = 0;
  for (size_t i = 0; i < running.size(); ++i) {
    EXPECT_LE(holding[i], running[i]) << "step " << i;
    finished += running[i] - holding[i];
  }
  EXPECT_EQ(finished, 3);
  std::remove(json.c_str());
}

// Sampling stays inside the tokenizer's ids, as generate's does: tiny-tied's embeddings
// have 384 rows for 379 tokens, and greedy decoding of this text once picked id 379,
// which kvscope-viz then refused in the trace ("not in tokenizer.json").
TEST(ServeBench, SampledIdsAreTheTokenizers) {
  const std::string text = testing::TempDir() + "serve_vocab.txt", trace = testing::TempDir() + "serve_vocab.trace";
  std::FILE* f = std::fopen(text.c_str(), "w");
  std::fputs("changes directly on the documentation pages.", f);
  std::fclose(f);
  const test::ProgramRun r = test::run_kvscope(
      "serve-bench --model '" + test::tiny_model("tiny-tied") + "' --text " + text + " --requests 1 --prompt-len 28 "
      "--output-len 16 --blocks 64 --strategies none --repeat 1 --trace " + trace);
  ASSERT_EQ(r.code, 0) << r.output;
  const Tokenizer tokenizer = Tokenizer::load(test::tiny_model("tiny-tied"));
  const std::map<int, std::vector<int>> ids = trace_token_ids(read_trace(trace).header, trace);
  ASSERT_EQ(ids.size(), 1u);
  ASSERT_EQ(ids.at(0).size(), 28u + 16u);  // the prompt, then every new token
  for (int id : ids.at(0)) EXPECT_LT(id, tokenizer.vocab_size());
  std::remove(text.c_str());
  std::remove(trace.c_str());
}

TEST(ServeBench, CompactionAdmitsMoreSequencesThanHolesOnlyOnTheBundledModel) {
  const test::ProgramRun r = test::run_kvscope(
      "serve-bench --requests 8 --prompt-len 96 --output-len 48 --blocks 24 --budget 32 --slack 16 --recent 8 "
      "--chunk 32 --policy h2o --threads 1 --repeat 2");  // the second runs must do the same work, or it fails
  ASSERT_EQ(r.code, 0) << r.output;
  const int none = std::stoi(cell(r.output, "none", 1)), holes = std::stoi(cell(r.output, "holes", 1)),
            compact = std::stoi(cell(r.output, "compact", 1));
  EXPECT_GT(compact, holes) << r.output;
  EXPECT_GE(holes, none) << r.output;
  EXPECT_GT(std::stod(cell(r.output, "compact", 2)), std::stod(cell(r.output, "holes", 2))) << r.output;  // mean
  for (const char* s : {"none", "holes", "reuse", "compact"}) EXPECT_EQ(cell(r.output, s, 9), "8") << s;  // finished
  EXPECT_EQ(cell(r.output, "holes", 7), "0.00 MB");  // only compaction moves bytes
  EXPECT_NE(cell(r.output, "compact", 7), "0.00 MB");
}

TEST(Readme, ServeBenchTableMatchesARerun) {
  // The README's serve-bench table, against the command it names: every column
  // but the timings (tokens/s and wall time) must be the same.
  const std::string readme = read_file(test::source_path("README.md"));
  const std::string marker = "<!-- serve-table: build/kvscope ";
  const size_t at = readme.find(marker);
  ASSERT_NE(at, std::string::npos);
  const size_t args_end = readme.find(" -->", at);
  const std::string args = readme.substr(at + marker.size(), args_end - at - marker.size());
  const std::string quoted = readme.substr(args_end, readme.find("<!-- /serve-table", at) - args_end);
  // One run of each: the columns compared are the same in every run (serve-bench
  // checks that when it repeats); only the timings are medians.
  const test::ProgramRun r = test::run_kvscope(args + " --repeat 1");
  ASSERT_EQ(r.code, 0) << r.output;
  int rows = 0;
  for (const char* s : {"none", "holes", "reuse", "compact"}) {
    if (quoted.find(std::string("| ") + s + " |") == std::string::npos) continue;
    ++rows;
    for (int column : {1, 2, 4, 5, 6, 7, 8, 9})
      EXPECT_EQ(cell(quoted, s, column), cell(r.output, s, column)) << s << ", column " << column << "\n" << r.output;
  }
  EXPECT_EQ(rows, 4);
}

// The prose under the README's serve-bench table reads its numbers off that table
// (which the test above checks against a rerun): a new table must bring new prose.
TEST(Readme, ServeBenchProseQuotesItsTable) {
  std::string readme = read_file(test::source_path("README.md"));
  const size_t from = readme.find("<!-- serve-table: "), to = readme.find("<!-- /serve-table", from);
  ASSERT_NE(to, std::string::npos);
  const std::string table = readme.substr(from, to - from);
  std::replace(readme.begin(), readme.end(), '\n', ' ');  // the prose wraps anywhere
  const auto quoted = [&](const std::string& s) { EXPECT_NE(readme.find(s), std::string::npos) << "README: " << s; };
  const auto number = [&](const char* strategy, int column) { return std::stod(cell(table, strategy, column)); };
  const auto whole = [&](const char* strategy, int column) { return commas(int64_t(number(strategy, column))); };

  quoted("preempted as they grow (" + whole("none", 4) + " times)");
  quoted("requests are preempted " + whole("holes", 4) + " times, " + whole("holes", 5) + " tokens recomputed");
  quoted(whole("compact", 1) + " sequences at once instead of " + whole("holes", 1) + " (" +
         cell(table, "compact", 2) + " against " + cell(table, "holes", 2) + " on average)");
  EXPECT_EQ(number("compact", 4), 0);  // "no preemption"
  quoted("no preemption, about a third of the steps, for " + fmt("%.0f", number("compact", 7)) + " MB of K/V moved");
  EXPECT_NEAR(number("compact", 8) / number("holes", 8), 1.0 / 3, 0.05) << "\"about a third of the steps\"";
  quoted("(" + fmt("%.1f", number("compact", 3) / number("holes", 3)) + "x for " +
         fmt("%.1f", number("compact", 2) / number("holes", 2)) + "x)");
}

}  // namespace
}  // namespace kvscope
