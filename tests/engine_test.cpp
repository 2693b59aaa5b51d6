// The engine's eviction rounds on a real (tiny) model: what compaction changes
// and, above all, what it must not change.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>

#include "cache/invariants.h"
#include "cache/occupancy.h"
#include "cache/trace.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "eval/eval.h"
#include "evict/h2o.h"
#include "evict/oracle.h"
#include "evict/streaming.h"
#include "model/weights.h"
#include "sample/sampler.h"
#include "test_paths.h"
#include "util/error.h"
#include "util/max_abs_diff.h"

namespace kvscope {
namespace {

EngineConfig config_for(MemoryStrategy strategy, const std::string& policy, int budget, int block_size = 4) {
  EngineConfig c;
  c.num_blocks = 64;
  c.block_size = block_size;
  c.strategy = strategy;
  c.schedule = {budget, /*slack=*/6, /*sinks=*/2, /*recent=*/5};
  c.policy = [policy] { return make_policy(policy, 1); };
  return c;
}

// No eviction: `num_blocks` blocks of 4 tokens.
EngineConfig plain(int num_blocks) {
  EngineConfig c;
  c.num_blocks = num_blocks;
  c.block_size = 4;
  return c;
}

// Greedy decoding, teacher-forced with the tokens of `script` when given: logits of every step.
std::vector<std::vector<float>> run(const Model& m, Engine& e, const std::vector<int>& script) {
  const int seq = e.add_sequence();
  const int vocab = m.config.vocab_size;
  const std::vector<int> prompt = {3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46, 26};
  std::vector<std::vector<float>> out;
  const float* logits = e.prefill(seq, prompt);
  for (size_t i = 0; i < script.size(); ++i) {
    out.emplace_back(logits, logits + vocab);
    logits = e.decode(seq, script[i]);
  }
  out.emplace_back(logits, logits + vocab);
  return out;
}

std::vector<int> tokens(int n) {
  std::vector<int> t;
  for (int i = 0; i < n; ++i) t.push_back((i * 37 + 11) % 300);
  return t;
}

TEST(Engine, CompactionLeavesEveryLogitBitUnchanged) {
  // Holes only and compaction keep the same tokens (same policy, same scores);
  // compaction just moves them. Attention reads the live keys in token order in
  // both cases, so the next steps must be identical to the last bit.
  Model m = load_model(test::tiny_model("tiny-untied"));
  for (const char* policy : {"streaming", "h2o", "snapkv", "random"}) {
    // SnapKV keeps its window of 32 whole: its votes choose only the tokens above it.
    const int budget = std::string(policy) == "snapkv" ? 40 : 16;
    Engine holes(m, config_for(MemoryStrategy::HolesOnly, policy, budget));
    Engine compact(m, config_for(MemoryStrategy::Compact, policy, budget));
    const auto script = tokens(60);
    const auto a = run(m, holes, script), b = run(m, compact, script);
    EXPECT_EQ(a, b) << policy;
    EXPECT_GT(compact.stats(0).rounds, 3) << policy;
    EXPECT_GT(compact.stats(0).bytes_moved, 0u) << policy;
    EXPECT_EQ(holes.cache().live_positions(0), compact.cache().live_positions(0)) << policy;
    EXPECT_LE(compact.stats(0).blocks_in_use, holes.stats(0).blocks_in_use) << policy;
  }
}

// Every way into the engine (the commands check first, with their flags' names) meets
// the same check: SnapKV's window of 32 and the 2 sinks do not fit a budget of 20.
// The engine refuses before the sequence exists, so nothing is half added.
TEST(Engine, ASnapKVBudgetBelowItsWindowIsRefusedBeforeTheSequenceIsAdded) {
  const Model m = load_model(test::tiny_model("tiny-untied"));
  Engine e(m, config_for(MemoryStrategy::Compact, "snapkv", 20));
  EXPECT_THROW(e.add_sequence(), Error);
  EXPECT_EQ(e.cache().num_sequences(), 0);
  Engine streaming_in_disguise(m, config_for(MemoryStrategy::Compact, "snapkv", 34));  // 2 sinks + 32: no votes
  EXPECT_THROW(streaming_in_disguise.add_sequence(), Error);
  Engine fits(m, config_for(MemoryStrategy::Compact, "snapkv", 35));
  EXPECT_EQ(fits.add_sequence(), 0);
}

// A schedule the engine cannot run is refused before the pool is made: here a pool
// of 2^29 blocks, more than memory holds, would be that error (and, where it fitted,
// gigabytes allocated to be thrown away).
TEST(Engine, ABadScheduleIsRefusedBeforeThePoolIsAllocated) {
  const Model m = load_model(test::tiny_model("tiny-untied"));
  EngineConfig c = config_for(MemoryStrategy::Compact, "h2o", 40);
  c.num_blocks = 1 << 29;
  c.block_size = 256;
  c.policy = nullptr;
  try {
    Engine e(m, c);
    ADD_FAILURE() << "no error";
  } catch (const Error& err) {
    EXPECT_STREQ(err.what(), "engine: an eviction budget needs a policy");
  }
  c = config_for(MemoryStrategy::Compact, "h2o", 40);
  c.num_blocks = 1 << 29;
  c.block_size = 256;
  c.schedule.sinks = 50;  // more than the budget holds
  try {
    Engine e(m, c);
    ADD_FAILURE() << "no error";
  } catch (const Error& err) {
    EXPECT_EQ(std::string(err.what()).rfind("--budget 40 is smaller than the protected tokens", 0), 0u) << err.what();
  }
}

TEST(Engine, HoleReuseKeepsTheSameTokensAndNearlyTheSameLogits) {
  // Reusing holes puts new tokens out of order in the table; attention follows the
  // recorded positions, so only the order of the float sums changes.
  Model m = load_model(test::tiny_model("tiny-untied"));
  Engine holes(m, config_for(MemoryStrategy::HolesOnly, "h2o", 16));
  Engine reuse(m, config_for(MemoryStrategy::ReuseHoles, "h2o", 16));
  const auto script = tokens(60);
  const auto a = run(m, holes, script), b = run(m, reuse, script);
  ASSERT_EQ(a.size(), b.size());
  float worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, max_abs_diff(a[i], b[i]));  // inf for a NaN
  EXPECT_LE(worst, 1e-4f);
  auto kept = reuse.cache().live_positions(0);
  ASSERT_FALSE(std::is_sorted(kept.begin(), kept.end())) << "no hole was reused";
  std::sort(kept.begin(), kept.end());
  EXPECT_EQ(kept, holes.cache().live_positions(0));
}

TEST(Engine, RoundsPruneToTheBudgetAndProtectSinksAndRecent) {
  Model m = load_model(test::tiny_model("tiny-tied"));
  Engine e(m, config_for(MemoryStrategy::Compact, "h2o", 16));
  run(m, e, tokens(40));
  const SequenceStats s = e.stats(0);
  EXPECT_GE(s.live, 16);
  EXPECT_LT(s.live, 16 + 6);
  const auto live = e.cache().live_positions(0);
  EXPECT_EQ(live[0], 0);
  EXPECT_EQ(live[1], 1);
  EXPECT_EQ(live.back(), s.tokens_seen - 1);
  EXPECT_EQ(s.tokens_seen, 12 + 40);
  // The stats agree with the cache they describe.
  EXPECT_EQ(s.live, int64_t(live.size()));
  EXPECT_DOUBLE_EQ(s.evicted_fraction(), 1.0 - double(live.size()) / 52.0);
}

TEST(Engine, StreamingKeepsExactlySinksAndTheNewest) {
  Model m = load_model(test::tiny_model("tiny-tied"));
  Engine e(m, config_for(MemoryStrategy::Compact, "streaming", 16));
  run(m, e, tokens(30));
  const auto live = e.cache().live_positions(0);
  const int64_t seen = e.stats(0).tokens_seen;
  EXPECT_GT(e.stats(0).rounds, 0);
  EXPECT_GE(live.size(), 16u);  // pruned to the budget, and fewer than budget + slack since
  EXPECT_LT(live.size(), 16u + 6u);
  std::vector<int64_t> expected = {0, 1};
  for (int64_t p = seen - int64_t(live.size()) + 2; p < seen; ++p) expected.push_back(p);
  EXPECT_EQ(live, expected);
}

// The sum of H2O's scores over a sequence's live tokens.
double total_score(Engine& e, int seq) {
  double total = 0;
  for (float x : e.policy(seq)->scores({e.cache().live_positions(seq), e.cache().sequence(seq).next_pos})) total += x;
  return total;
}

TEST(Engine, H2OAccumulatesTheAttentionOfEveryQuery) {
  // Each query's probabilities sum to 1 per head, so after a prefill of T tokens
  // the accumulated attention over all tokens is T x layers x heads: every query of
  // the prompt counts, not only SnapKV's window of the last 32.
  Model m = load_model(test::tiny_model("tiny-tied"));
  EngineConfig c = config_for(MemoryStrategy::Compact, "h2o", 1000);
  Engine e(m, c);
  const int seq = e.add_sequence();
  const int T = 40;
  e.prefill(seq, tokens(T));
  const double per_query = double(m.config.num_layers) * m.config.num_heads;
  const std::vector<int64_t> pos = e.cache().live_positions(seq);
  const auto scores = e.policy(seq)->scores({pos, T});
  EXPECT_NEAR(total_score(e, seq), T * per_query, 1e-3);
  // The first token gets every query's attention at least a little: it leads.
  EXPECT_EQ(std::max_element(scores.begin(), scores.end()) - scores.begin(), 0);
  // A decode step adds its query's attention to the sums (they do not restart).
  e.decode(seq, 11);
  EXPECT_NEAR(total_score(e, seq), (T + 1) * per_query, 1e-3);
}

// After a round H2O forgets the evicted tokens, not the kept ones: every survivor
// keeps the attention it had gathered (a token that restarted at 0 would be the
// next round's first victim). Under holes only the survivors' positions are no
// longer their indices in the cache: the next step's attention still lands on the
// token it was paid to, each survivor's sum grows, and the total by exactly
// layers x heads.
TEST(Engine, H2OKeepsTheSumsOfTheTokensItKeeps) {
  Model m = load_model(test::tiny_model("tiny-tied"));
  for (MemoryStrategy strategy : {MemoryStrategy::Compact, MemoryStrategy::HolesOnly}) {
    SCOPED_TRACE(strategy_name(strategy));
    Engine e(m, config_for(strategy, "h2o", /*budget=*/8));  // rounds at 8 + 6 live
    const int seq = e.add_sequence();
    e.prefill(seq, tokens(10));
    int token = 1;
    while (e.cache().sequence(seq).live != 8) e.decode(seq, token++);  // the step that made 14 evicted 6
    ASSERT_EQ(e.stats(seq).rounds, 1);
    const std::vector<int64_t> pos = e.cache().live_positions(seq);
    ASSERT_NE(pos.back(), int64_t(pos.size()) - 1);  // positions are not indices
    const std::vector<float> before = e.policy(seq)->scores({pos, e.cache().sequence(seq).next_pos});
    for (float score : before) EXPECT_GT(score, 0.0f);
    const double total = total_score(e, seq);

    e.decode(seq, token++);  // 9 live: no round
    ASSERT_EQ(e.stats(seq).rounds, 1);
    const std::vector<float> after = e.policy(seq)->scores({pos, e.cache().sequence(seq).next_pos});
    for (size_t i = 0; i < pos.size(); ++i) EXPECT_GT(after[i], before[i]) << "position " << pos[i];
    EXPECT_NEAR(total_score(e, seq), total + double(m.config.num_layers) * m.config.num_heads, 1e-3);
  }
}

// ...and the evicted tokens are gone from its sums: asked about them, it has
// nothing (positions are never reused, so a sum it kept would only take memory,
// but it would be memory that grows with every token ever seen).
TEST(Engine, H2OForgetsTheTokensItEvicts) {
  Model m = load_model(test::tiny_model("tiny-tied"));
  Engine e(m, config_for(MemoryStrategy::Compact, "h2o", /*budget=*/8));
  const int seq = e.add_sequence();
  e.prefill(seq, tokens(10));
  std::vector<int64_t> seen(10);
  std::iota(seen.begin(), seen.end(), 0);
  const std::vector<float> gathered = e.policy(seq)->scores({seen, 10});
  for (float score : gathered) ASSERT_GT(score, 0.0f);  // every prompt token was attended to
  for (int token = 1; e.stats(seq).rounds == 0; ++token) {
    e.decode(seq, token);
    seen.push_back(seen.back() + 1);
  }
  std::vector<int64_t> live = e.cache().live_positions(seq);
  std::sort(live.begin(), live.end());
  const std::vector<int64_t> evicted = complement(seen, live);
  ASSERT_EQ(evicted.size(), seen.size() - 8);
  for (float score : e.policy(seq)->scores({evicted, e.cache().sequence(seq).next_pos})) EXPECT_EQ(score, 0.0f);
}

// SnapKV votes with the last window() = 32 queries of a prefill: the tokens they
// cover are kept outright (+inf), those before them scored by the votes. A 40-token
// prompt: positions 0-7 finite, 8-39 infinite (engine.cpp's sum_from and the count
// of queries it reports; every other test's prompt fits inside the window).
TEST(Engine, SnapKVVotesWithTheLastWindowOfALongPrefill) {
  Model m = load_model(test::tiny_model("tiny-untied"));
  Engine e(m, config_for(MemoryStrategy::Compact, "snapkv", 1000));
  const int seq = e.add_sequence();
  e.prefill(seq, tokens(40));
  const std::vector<int64_t> pos = e.cache().live_positions(seq);
  const std::vector<float> scores = e.policy(seq)->scores({pos, 40});
  ASSERT_EQ(scores.size(), 40u);
  for (int j = 0; j < 8; ++j) EXPECT_TRUE(std::isfinite(scores[size_t(j)])) << "position " << j << ", before it";
  for (int j = 8; j < 40; ++j) EXPECT_TRUE(std::isinf(scores[size_t(j)])) << "position " << j << ", in the window";
}

// stats(seq) are one sequence's, whatever else the pool holds: sequences of 12 and 13
// tokens in blocks of 4 hold 3 and 4 blocks (the pool, 7), and a full cache of 13
// tokens needs ceil(13 / 4) = 4.
TEST(Engine, StatsAreTheSequencesOwn) {
  Model m = load_model(test::tiny_model("tiny-tied"));
  Engine e(m, plain(64));
  const int a = e.add_sequence(), b = e.add_sequence();
  e.prefill(a, tokens(12));
  e.prefill(b, tokens(13));
  EXPECT_EQ(e.stats(a).blocks_in_use, 3);
  EXPECT_EQ(e.stats(b).blocks_in_use, 4);
  EXPECT_EQ(e.stats(a).blocks_full_cache, 3);
  EXPECT_EQ(e.stats(b).blocks_full_cache, 4);
  EXPECT_EQ(e.cache().pool().num_used(), 7);
  // After a round the two part: what a cache that never evicted would hold, ceil(seen
  // / 4), against the blocks in use (without eviction they are equal, whatever is counted).
  Engine evicting(m, config_for(MemoryStrategy::Compact, "h2o", /*budget=*/8));
  const int c = evicting.add_sequence();
  evicting.prefill(c, tokens(13));  // 13 live: not yet 8 + 6
  evicting.decode(c, 1);            // 14: a round keeps 8
  const SequenceStats st = evicting.stats(c);
  ASSERT_EQ(st.rounds, 1);
  EXPECT_EQ(st.blocks_full_cache, 4);  // 14 tokens seen
  EXPECT_EQ(st.blocks_in_use, 2);      // 8 live, compacted
}

// The random policy of each sequence draws its own numbers, and not the ones the
// sampler (seeded with the same --seed) draws the tokens with: two sequences with
// the same prompt keep different tokens, and a copy of the factory replays them.
TEST(RandomPolicy, EachSequenceDrawsItsOwnStreamApartFromTheSampler) {
  const Model m = load_model(test::tiny_model("tiny-tied"));
  const uint64_t seed = 7;
  std::vector<int64_t> pos(200);
  for (int64_t i = 0; i < 200; ++i) pos[size_t(i)] = i;
  const ScoreContext ctx{pos, 200};
  auto scores_of = [&](std::unique_ptr<EvictionPolicy> p) { return p->scores(ctx); };

  PolicyFactory factory = policy_factory("random", seed, "", m.config);
  const PolicyFactory replay = factory;  // a copy starts again at the first sequence
  const std::vector<float> first = scores_of(factory()), second = scores_of(factory());
  EXPECT_NE(first, second);
  EXPECT_EQ(scores_of(PolicyFactory(replay)()), first);
  EXPECT_NE(first, scores_of(make_policy("random", seed)));  // SplitMix64(seed): the sampler's stream

  EngineConfig c = config_for(MemoryStrategy::Compact, "random", 16);
  c.policy = factory;
  Engine e(m, c);
  const int a = e.add_sequence(), b = e.add_sequence();
  e.prefill(a, tokens(30));
  e.prefill(b, tokens(30));
  ASSERT_EQ(e.stats(a).rounds, 1);
  ASSERT_EQ(e.stats(b).rounds, 1);
  EXPECT_NE(e.cache().live_positions(a), e.cache().live_positions(b));
}

TEST(Engine, AnExhaustedPoolRefusesTheStepAndLeavesOtherSequencesIntact) {
  Model m = load_model(test::tiny_model("tiny-tied"));
  Engine e(m, plain(3));
  const int a = e.add_sequence(), b = e.add_sequence();
  e.prefill(a, {1, 2, 3, 4, 5, 6, 7, 8});  // 2 blocks
  e.prefill(b, {9, 10, 11});               // 1 block: the pool is full
  const auto before = e.cache().live_positions(a);
  try {
    e.prefill(b, {1, 2});  // b needs a second block
    ADD_FAILURE() << "no error";
  } catch (const PoolExhausted& err) {  // an Error, of the kind a caller can wait out
    EXPECT_STREQ(err.what(),
                 "block pool exhausted: sequence 1 needs room for 2 more tokens, the pool has 1 (0 free blocks of 4); "
                 "the step is refused and the sequence is unchanged");
  }
  EXPECT_EQ(e.cache().live_positions(a), before);
  EXPECT_EQ(e.cache().sequence(b).live, 3);
  check_invariants(e.cache());
  EXPECT_NO_THROW(e.decode(b, 5));  // its last free slot still works
}

// Two sequences decode in turn from one pool that cannot hold both to the end,
// next to a reference engine with room for everything. When the pool runs out,
// the sequence that needs a block is refused and waits (paused): its tokens and
// the other sequence's are untouched, and the other goes on producing exactly
// the reference's logits until it is done (or paused too). Once a is released,
// b resumes where it stopped and also matches the reference to the last bit.
class Exhaustion {
 public:
  Exhaustion(const Model& m, MemoryStrategy strategy) : m_(m) {
    EngineConfig small = config_for(strategy, "h2o", /*budget=*/16);  // up to 22 live tokens each
    small.num_blocks = 10;
    EngineConfig big = small;
    big.num_blocks = 64;
    e_ = std::make_unique<Engine>(m, small);
    ref_ = std::make_unique<Engine>(m, big);
    const std::vector<std::vector<int>> prompts = {{3, 14, 15, 92, 65, 35}, {89, 79, 32, 38, 46}};
    for (const auto& p : prompts) {
      const int seq = e_->add_sequence();
      ref_->add_sequence();
      e_->prefill(seq, p);
      ref_->prefill(seq, p);
    }
  }

  // The next scripted token of `seq`; false when the pool refused it (nothing changed).
  bool step(int seq) {
    const int token = script_[next_[seq]];
    const auto before = live_positions();
    try {
      const float* got = e_->decode(seq, token);
      const float* want = ref_->decode(seq, token);
      EXPECT_TRUE(std::equal(got, got + m_.config.vocab_size, want)) << "sequence " << seq << " step " << next_[seq];
      ++next_[seq];
      check_invariants(e_->cache());
      return true;
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find("block pool exhausted: sequence " + std::to_string(seq)), std::string::npos)
          << err.what();
      EXPECT_NE(std::string(err.what()).find("refused"), std::string::npos) << err.what();
      EXPECT_EQ(live_positions(), before);
      return false;
    }
  }

  // The positions each sequence holds (none for a released one).
  std::vector<std::vector<int64_t>> live_positions() const {
    std::vector<std::vector<int64_t>> out;
    for (int seq : {0, 1})
      out.push_back(e_->cache().has_sequence(seq) ? e_->cache().live_positions(seq) : std::vector<int64_t>{});
    return out;
  }

  bool done(int seq) const { return next_[seq] == script_.size(); }
  Engine& engine() { return *e_; }
  const Engine& reference() const { return *ref_; }

 private:
  const Model& m_;
  std::unique_ptr<Engine> e_, ref_;
  std::vector<int> script_ = tokens(40);
  size_t next_[2] = {0, 0};
};

TEST(Engine, ExhaustionMidGenerationPausesOneSequenceAndLosesNothing) {
  Model m = load_model(test::tiny_model("tiny-tied"));
  for (MemoryStrategy strategy : {MemoryStrategy::HolesOnly, MemoryStrategy::ReuseHoles, MemoryStrategy::Compact}) {
    SCOPED_TRACE(strategy_name(strategy));
    Exhaustion x(m, strategy);
    bool paused[2] = {false, false};
    int refusals = 0;
    while (!(paused[0] || x.done(0)) || !(paused[1] || x.done(1))) {
      for (int seq : {0, 1}) {
        if (paused[seq] || x.done(seq) || x.step(seq)) continue;
        paused[seq] = true;
        ++refusals;
      }
      if (::testing::Test::HasFailure()) return;
    }
    ASSERT_GT(refusals, 0) << "the pool never ran out: the test does not reach that path";

    x.engine().release_sequence(0);  // a gives its blocks back; b resumes where it stopped
    check_invariants(x.engine().cache());
    while (!x.done(1)) ASSERT_TRUE(x.step(1)) << "b refused again with the pool to itself";
    EXPECT_EQ(x.engine().cache().live_positions(1), x.reference().cache().live_positions(1));
  }
}

TEST(Engine, GenerateReportsWhatEvictionDid) {
  Model m = load_model(test::tiny_model("tiny-tied"));
  GenerateOptions o;
  o.max_new_tokens = 80;
  o.sampler.temperature = 0;
  o.engine = config_for(MemoryStrategy::Compact, "h2o", 20);
  o.engine.num_blocks = 0;  // just enough for the whole sequence
  const GenerateStats s = generate(m, {5, 6, 7}, o, [](int) {});
  EXPECT_EQ(s.cache.tokens_seen, 3 + 80 - 1);  // the last sampled token is never run
  EXPECT_GT(s.cache.rounds, 0);
  EXPECT_GT(s.cache.evicted_fraction(), 0.5);
  EXPECT_GT(s.cache.blocks_freed_fraction(), 0.5);
}

// Weights that are all finite can still overflow: a gate row of 3e38 makes the MLP
// infinite, and the logits NaN. Greedy sampling once took token 0 at every step and
// generate returned normally; eval compared NaN with NaN and reported 100% top-1
// agreement with the full cache.
TEST(Engine, LogitsThatAreNotFiniteAreAnError) {
  Model m = load_model(test::tiny_model("tiny-tied"), WeightFormat::F32);
  Matrix& gate = m.weights.layers[0].gate_proj;
  std::vector<float> huge(gate.f32(), gate.f32() + size_t(gate.rows) * gate.cols);  // [intermediate, hidden]
  std::fill(huge.begin(), huge.begin() + gate.cols, 3e38f);  // row 0: finite, and far past what a sum holds
  gate.data = huge.data();
  const std::string expected = "forward: sequence 0's logits are not finite (token id ";

  GenerateOptions o;
  o.max_new_tokens = 4;
  o.sampler.temperature = 0;
  try {
    generate(m, {1, 2, 3}, o, [](int) {});
    ADD_FAILURE() << "generate returned";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(expected, 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find("the model's activations overflowed"), std::string::npos) << e.what();
  }
  EvalSettings s;
  s.context = 48;
  s.continuation = 4;
  s.keep = {0.5};
  s.policies = {"streaming"};
  s.recent = 8;
  try {
    evaluate(m, {std::vector<int>(49, 7)}, s);
    ADD_FAILURE() << "eval returned";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(expected, 0), 0u) << e.what();
  }
}

TEST(Engine, ARecordedRunReplaysToTheSameCache) {
  Model m = load_model(test::tiny_model("tiny-tied"));
  for (MemoryStrategy strategy : {MemoryStrategy::HolesOnly, MemoryStrategy::ReuseHoles, MemoryStrategy::Compact}) {
    EventLog events;
    Engine e(m, config_for(strategy, "h2o", 16), &events);
    run(m, e, tokens(50));
    const TraceHeader header{4, 64, strategy, {}};
    const Occupancy replayed = replay(header, events, events.size());
    EXPECT_EQ(replayed.live(0), e.stats(0).live);
    EXPECT_EQ(replayed.table(0), e.cache().sequence(0).blocks);
    for (int b = 0; b < 64; ++b)
      for (int j = 0; j < 4; ++j) ASSERT_EQ(replayed.position(b, j), e.cache().position({b, j})) << b << " " << j;
  }
}

TEST(Oracle, ScoresAreTheAttentionStillToCome) {
  Model m = load_model(test::tiny_model("tiny-tied"));
  const std::vector<int> prompt = {1, 2, 3, 4, 5, 6};
  const auto cont = tokens(10);
  const FutureAttention future = record_future_attention(m, prompt, cont);
  const double per_query = double(m.config.num_layers) * m.config.num_heads;  // each head's row sums to 1
  // received_from(q) - received_from(q + 1) is what the query at q alone gives:
  // a row of probabilities over positions 0..q, summing to 1 per layer and head.
  for (int64_t q = 6; q < 16; ++q) {
    double row = 0;
    for (int64_t p = 0; p <= q; ++p) {
      const double d = future.received_from(q, p) - future.received_from(q + 1, p);
      EXPECT_GE(d, -1e-5);
      row += d;
    }
    EXPECT_NEAR(row, per_query, 1e-3) << "query at " << q;
  }
  EXPECT_EQ(future.received_from(16, 0), 0.0f);
  EXPECT_GE(future.received_from(6, 0), future.received_from(10, 0));
}

TEST(Oracle, PlugsIntoTheEngineTeacherForced) {
  Model m = load_model(test::tiny_model("tiny-untied"));
  const std::vector<int> prompt = {3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46, 26};
  const auto script = tokens(60);
  const FutureAttention future = record_future_attention(m, prompt, script);
  EngineConfig c = config_for(MemoryStrategy::Compact, "h2o", 16);
  c.policy = [&future] { return std::make_unique<OraclePolicy>(future); };
  EventLog log;
  Engine e(m, c, &log);
  run(m, e, script);
  EXPECT_GT(e.stats(0).rounds, 3);
  EXPECT_LT(e.stats(0).live, 16 + 6);

  // In the last round, every token kept by choice (not a sink, not recent) gets at
  // least as much future attention as every token evicted: the oracle's scores chose.
  const auto begin =
      std::find_if(log.rbegin(), log.rend(), [](const Event& ev) { return ev.kind == EventKind::RoundBegin; });
  ASSERT_NE(begin, log.rend());
  const size_t round = size_t(log.rend() - begin) - 1;  // index of the last RoundBegin
  const Occupancy before = replay(TraceHeader{c.block_size, c.num_blocks, c.strategy, {}}, log, round);
  int64_t now = 0;  // the position of the next token at that round
  for (size_t i = 0; i < round; ++i)
    if (log[i].kind == EventKind::SlotWritten) now = log[i].pos + 1;
  std::vector<int64_t> evicted;
  for (size_t i = round; i < log.size() && log[i].kind != EventKind::RoundEnd; ++i)
    if (log[i].kind == EventKind::SlotEvicted) evicted.push_back(log[i].pos);
  ASSERT_FALSE(evicted.empty());
  double least_kept = 1e300, most_evicted = -1e300;
  int chosen = 0;
  for (int b = 0; b < before.num_blocks(); ++b)
    for (int j = 0; j < before.block_size(); ++j) {
      const int64_t p = before.position(b, j);
      if (p == kEmpty) continue;
      const double score = future.received_from(now, p);
      if (std::find(evicted.begin(), evicted.end(), p) != evicted.end()) {
        most_evicted = std::max(most_evicted, score);
      } else if (p >= 2 && p < now - 5) {  // sinks 2, recent 5
        least_kept = std::min(least_kept, score);
        ++chosen;
      }
    }
  ASSERT_GT(chosen, 0);
  EXPECT_GE(least_kept, most_evicted);
}

}  // namespace
}  // namespace kvscope
