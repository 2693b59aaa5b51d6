// kvscope eval's measurements (core/eval) on a tiny checkpoint: the full-cache row
// is the reference, eviction really happens, and the two memory strategies differ
// only in the blocks they free.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "engine/engine.h"
#include "eval/eval.h"
#include "eval/heads.h"
#include "evict/oracle.h"
#include "evict/policy.h"
#include "model/qwen3.h"
#include "sample/sampler.h"
#include "test_paths.h"
#include "util/error.h"
#include "util/splitmix64.h"

namespace kvscope {
namespace {

std::vector<std::vector<int>> random_windows(int n, int length, int vocab, uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<std::vector<int>> w(static_cast<size_t>(n), std::vector<int>(static_cast<size_t>(length)));
  for (auto& window : w)
    for (int& t : window) t = int(rng.next() % uint64_t(vocab));
  return w;
}

// A window (random_windows' seed) whose evicted greedy continuation in
// ARowIsItsDefinitionWorkedOutByHand agrees with the full cache's, parts, and agrees again.
constexpr uint64_t kPartlyMatchingSeed = 12;

EvalSettings small_settings() {
  EvalSettings s;
  s.context = 160;
  s.continuation = 8;
  s.keep = {0.3, 0.6};
  s.policies = {"streaming", "h2o", "random", "oracle"};
  s.slack = 8;
  s.sinks = 4;
  s.recent = 16;
  return s;
}

TEST(Eval, FullCacheRowIsTheReferenceAndEveryRowIsFilled) {
  const Model m = load_model(test::tiny_model("tiny-tied"));
  const EvalSettings s = small_settings();
  const EvalReport r = evaluate(m, random_windows(2, s.context + 1, 300, 1), s);
  ASSERT_EQ(r.rows.size(), 1 + s.policies.size() * s.keep.size());
  EXPECT_EQ(r.rows[0].policy, "full");
  EXPECT_EQ(r.rows[0].blocks_freed_compact, 0.0);
  double least_top1 = 1;  // the rows are compared with the full cache: some eviction must show
  for (const EvalRow& row : r.rows) {
    EXPECT_TRUE(std::isfinite(row.perplexity) && row.perplexity > 1) << row.policy;
    if (row.policy == "full") continue;
    EXPECT_EQ(row.budget, int(std::lround(row.keep * s.context)));
    // Eviction happened: at most budget + slack of the context's tokens are live.
    EXPECT_GE(row.evicted, 1.0 - double(row.budget + s.slack) / s.context - 1e-9) << row.policy;
    // Compaction frees every block that the kept tokens do not need; holes only can't do better.
    EXPECT_GE(row.blocks_freed_compact, row.blocks_freed_holes) << row.policy;
    EXPECT_GT(row.blocks_freed_compact, 0.25) << row.policy;
    least_top1 = std::min(least_top1, row.top1_agreement);
  }
  EXPECT_LT(least_top1, 1.0);
}

// The logits after each token of `window[0..context)`, teacher-forced, then the
// greedy continuation (first largest logit), on an engine of config `c`.
struct Forced {
  std::vector<std::vector<float>> logits;  // [context][vocab]
  std::vector<int> greedy;                 // [continuation]
  SequenceStats at_end;                    // the cache when the window's last token is in
};

Forced force(const Model& m, const EngineConfig& c, const std::vector<int>& window, int context, int continuation) {
  const int vocab = m.config.vocab_size;
  Engine e(m, c);
  const int seq = e.add_sequence();
  Forced f;
  const float* l = e.prefill(seq, {window[0]});
  for (int i = 0;; l = e.decode(seq, window[++i])) {
    f.logits.emplace_back(l, l + vocab);
    if (i + 1 == context) break;
  }
  f.at_end = e.stats(seq);
  for (int g = 0; g < continuation; ++g) {
    f.greedy.push_back(int(std::max_element(l, l + vocab) - l));
    if (g + 1 < continuation) l = e.decode(seq, f.greedy.back());
  }
  return f;
}

TEST(Eval, ARowIsItsDefinitionWorkedOutByHand) {
  // Two windows, streaming at 30%: perplexity over the second half of each context
  // (the logits after token i predict token i + 1) and over both windows' tokens
  // together, top-1 agreement with the full cache at those positions, greedy tokens
  // equal to the full cache's up to the first difference, evicted fraction and blocks
  // freed at each window's end; all but perplexity averaged over the windows. Worked
  // out here from the engine's logits, with p = e^l / sum e^l.
  const Model m = load_model(test::tiny_model("tiny-tied"));
  EvalSettings s = small_settings();
  s.policies = {"streaming"};
  s.keep = {0.3};
  const std::vector<std::vector<int>> windows = {random_windows(1, s.context + 1, 300, 4)[0],
                                                 random_windows(1, s.context + 1, 300, kPartlyMatchingSeed)[0]};
  const EvalReport r = evaluate(m, windows, s);
  ASSERT_EQ(r.rows.size(), 2u);
  ASSERT_EQ(r.windows, 2);

  EngineConfig c;
  c.block_size = s.block_size;
  c.num_blocks = 64;
  EngineConfig ce = c;
  ce.strategy = MemoryStrategy::Compact;
  ce.schedule = {48, s.slack, s.sinks, s.recent};  // 30% of 160
  ce.policy = policy_factory("streaming", s.seed, "", m.config);
  const auto top1 = [](const std::vector<float>& l) { return std::max_element(l.begin(), l.end()) - l.begin(); };
  double nll_full = 0, nll_evicted = 0, same_top1 = 0, greedy = 0, evicted_fraction = 0, freed = 0;
  int scored = 0;
  std::vector<int> greedy_prefix, greedy_anywhere;
  for (const std::vector<int>& window : windows) {
    const Forced full = force(m, c, window, s.context, s.continuation);
    const Forced evicted = force(m, ce, window, s.context, s.continuation);
    for (int i = s.context / 2 - 1; i < s.context; ++i, ++scored) {
      const int next = window[size_t(i) + 1];
      for (auto [run, nll] : {std::pair{&full, &nll_full}, std::pair{&evicted, &nll_evicted}}) {
        double sum = 0;
        for (float x : run->logits[size_t(i)]) sum += std::exp(double(x));
        *nll -= std::log(std::exp(double(run->logits[size_t(i)][size_t(next)])) / sum);
      }
      same_top1 += top1(full.logits[size_t(i)]) == top1(evicted.logits[size_t(i)]);
    }
    int same = 0, anywhere = 0;
    while (same < s.continuation && evicted.greedy[size_t(same)] == full.greedy[size_t(same)]) ++same;
    for (int g = 0; g < s.continuation; ++g) anywhere += evicted.greedy[size_t(g)] == full.greedy[size_t(g)];
    greedy_prefix.push_back(same);
    greedy_anywhere.push_back(anywhere);
    greedy += double(same) / s.continuation / 2;
    evicted_fraction += evicted.at_end.evicted_fraction() / 2;
    freed += evicted.at_end.blocks_freed_fraction() / 2;
  }

  EXPECT_EQ(scored, 2 * 81);
  EXPECT_NEAR(r.rows[0].perplexity, std::exp(nll_full / scored), 1e-9 * r.rows[0].perplexity);
  EXPECT_EQ(r.rows[0].top1_agreement, 1.0);
  EXPECT_EQ(r.rows[0].greedy_match, 1.0);
  EXPECT_EQ(r.rows[0].evicted, 0.0);
  EXPECT_EQ(r.rows[1].budget, 48);
  EXPECT_NEAR(r.rows[1].perplexity, std::exp(nll_evicted / scored), 1e-9 * r.rows[1].perplexity);
  EXPECT_DOUBLE_EQ(r.rows[1].top1_agreement, same_top1 / scored);
  EXPECT_DOUBLE_EQ(r.rows[1].greedy_match, greedy);
  EXPECT_DOUBLE_EQ(r.rows[1].evicted, evicted_fraction);
  EXPECT_DOUBLE_EQ(r.rows[1].blocks_freed_compact, freed);
  // Eviction changed something, or nothing here would be tested; and the second
  // window's greedy tokens agree, part and agree again, so a count of the matches
  // would not pass for the prefix.
  EXPECT_NE(r.rows[1].perplexity, r.rows[0].perplexity);
  EXPECT_LT(same_top1, scored);
  EXPECT_GT(greedy_prefix[1], 0);
  EXPECT_GT(greedy_anywhere[1], greedy_prefix[1]);
  std::printf("perplexity %.4f (full %.4f), top-1 %g of %d, greedy %d and %d of %d, evicted %.3f\n",
              r.rows[1].perplexity, r.rows[0].perplexity, same_top1, scored, greedy_prefix[0], greedy_prefix[1],
              s.continuation, evicted_fraction);
}

// The oracle's future is the window after its first token, then the full cache's
// greedy continuation: built here from those pieces, the row must be eval's own (a
// future shifted by one token moved the bundled model's oracle rows by under 1%).
TEST(Eval, TheOracleReadsTheWindowsFutureAndTheFullCachesContinuation) {
  const Model m = load_model(test::tiny_model("tiny-tied"));
  EvalSettings s = small_settings();
  s.policies = {"oracle"};
  s.keep = {0.3};
  const std::vector<int> window = random_windows(1, s.context + 1, 300, 6)[0];
  const EvalReport r = evaluate(m, {window}, s);
  ASSERT_EQ(r.rows.size(), 2u);

  EngineConfig c;
  c.block_size = s.block_size;
  c.num_blocks = 64;
  const Forced full = force(m, c, window, s.context, s.continuation);
  std::vector<int> future(window.begin() + 1, window.begin() + s.context);
  future.insert(future.end(), full.greedy.begin(), full.greedy.end());
  c.strategy = MemoryStrategy::Compact;
  c.schedule = {48, s.slack, s.sinks, s.recent};
  // The perplexity of the scored positions with the oracle that knows `what_comes`.
  const auto perplexity_knowing = [&](const std::vector<int>& what_comes) {
    const FutureAttention oracle = record_future_attention(m, {window[0]}, what_comes);
    c.policy = [&oracle] { return std::make_unique<OraclePolicy>(oracle); };
    const Forced evicted = force(m, c, window, s.context, s.continuation);
    double nll = 0;
    int scored = 0;
    for (int i = s.context / 2 - 1; i < s.context; ++i, ++scored) {
      const std::vector<float>& l = evicted.logits[size_t(i)];
      double sum = 0;
      for (float x : l) sum += std::exp(double(x));
      nll -= std::log(std::exp(double(l[size_t(window[size_t(i) + 1])])) / sum);
    }
    return std::exp(nll / scored);
  };
  EXPECT_NEAR(r.rows[1].perplexity, perplexity_knowing(future), 1e-9 * r.rows[1].perplexity);
  // And a future one token off would show: the test can fail.
  const std::vector<int> shifted(future.begin() + 1, future.end());
  EXPECT_GT(std::abs(perplexity_knowing(shifted) / r.rows[1].perplexity - 1), 1e-6);
}

TEST(Eval, StreamingKeepsWholeBlocksSoHolesFreeAsMuchAsCompaction) {
  // Streaming drops the oldest tokens (after the sinks): the survivors are
  // contiguous, so whole blocks empty out without any compaction.
  const Model m = load_model(test::tiny_model("tiny-tied"));
  EvalSettings s = small_settings();
  s.policies = {"streaming"};
  s.sinks = 0;
  const EvalReport r = evaluate(m, random_windows(1, s.context + 1, 300, 2), s);
  ASSERT_EQ(r.rows.size(), 1 + s.keep.size());  // full, then streaming at each budget
  for (size_t i = 1; i < r.rows.size(); ++i) {
    EXPECT_GT(r.rows[i].blocks_freed_compact, 0.25);
    EXPECT_NEAR(r.rows[i].blocks_freed_holes, r.rows[i].blocks_freed_compact, 1.0 / 11 + 1e-9);
  }
}

TEST(Eval, HolesColumnIsWhatARunUnderHolesOnlyHolds) {
  // eval runs the model once per policy and budget, under compaction, and counts
  // the holes-only blocks by replaying that run's writes and evictions on a cache
  // that leaves holes. Here each policy also runs under holes only, model and all
  // (the oracle aside: it is made from the window's future), and must hold exactly
  // the blocks the replay counted.
  const Model m = load_model(test::source_path("assets/model"));
  EvalSettings s = small_settings();
  s.policies = {"streaming", "h2o", "snapkv", "triattention", "random"};
  s.calibration = test::source_path("assets/model/triattention-calibration.json");
  const std::vector<int> window = random_windows(1, s.context + 1, m.config.vocab_size, 3)[0];
  const EvalReport r = evaluate(m, {window}, s);
  ASSERT_EQ(r.rows.size(), 1 + s.policies.size() * s.keep.size());
  size_t row = 1;
  int scattered = 0;  // rows where holes free fewer blocks than compaction: the replay is not a copy
  for (const std::string& policy : s.policies) {
    for (double keep : s.keep) {
      EngineConfig c;
      c.block_size = s.block_size;
      c.num_blocks = (s.context + s.continuation + s.block_size - 1) / s.block_size + 1;
      c.strategy = MemoryStrategy::HolesOnly;
      c.schedule = {int(std::lround(keep * s.context)), s.slack, s.sinks, s.recent};
      c.policy = policy_factory(policy, s.seed, s.calibration, m.config);
      Engine holes(m, c);
      const int seq = holes.add_sequence();
      holes.prefill(seq, {window[0]});
      for (int i = 1; i < s.context; ++i) holes.decode(seq, window[i]);
      EXPECT_EQ(r.rows[row].blocks_freed_holes, holes.stats(seq).blocks_freed_fraction()) << policy << " " << keep;
      scattered += r.rows[row].blocks_freed_holes < r.rows[row].blocks_freed_compact;
      ++row;
    }
  }
  EXPECT_GE(scattered, 4);
}

// evaluate()'s refusal, or "accepted".
std::string refusal(const Model& m, const std::vector<std::vector<int>>& windows, const EvalSettings& s) {
  try {
    evaluate(m, windows, s);
    return "accepted";
  } catch (const Error& e) {
    return e.what();
  }
}

// Each window draws its own random evictions: a copy of the random policy's factory
// started its count again, and every window evicted the same positions (the random row
// was one draw, 15 times). Two copies of one window must then give two different runs.
TEST(Eval, TheRandomPolicyDrawsAfreshInEveryWindow) {
  const Model m = load_model(test::tiny_model("tiny-tied"));
  EvalSettings s = small_settings();
  s.policies = {"random"};
  s.keep = {0.3};
  const std::vector<int> window = random_windows(1, s.context + 1, 300, 5)[0];
  const EvalReport once = evaluate(m, {window}, s), twice = evaluate(m, {window, window}, s);
  ASSERT_EQ(once.rows.size(), 2u);
  ASSERT_EQ(twice.rows.size(), 2u);
  const auto apart = [](double a, double b) { return std::abs(a / b - 1); };  // the mean of two equal sums rounds
  EXPECT_LT(apart(once.rows[0].perplexity, twice.rows[0].perplexity), 1e-12) << "the full cache differs on a copy";
  EXPECT_GT(apart(once.rows[1].perplexity, twice.rows[1].perplexity), 1e-6) << "the copy evicted the same positions";
  // A row is its seed's, window's and budget's alone: rerun by itself, it is the same.
  s.keep = {0.6, 0.3};
  const EvalReport with_another_row = evaluate(m, {window, window}, s);
  ASSERT_EQ(with_another_row.rows.size(), 3u);
  EXPECT_EQ(with_another_row.rows[2].perplexity, twice.rows[1].perplexity);
  EXPECT_EQ(with_another_row.rows[2].blocks_freed_holes, twice.rows[1].blocks_freed_holes);
}

TEST(Eval, RefusesBadSettingsWithAMessage) {
  const Model m = load_model(test::tiny_model("tiny-tied"));
  EvalSettings s = small_settings();
  const auto w = random_windows(1, s.context + 1, 300, 3);
  const auto expect_refused = [&](const std::vector<std::vector<int>>& windows, const std::string& part) {
    const std::string why = refusal(m, windows, s);
    EXPECT_NE(why.find(part), std::string::npos) << why;
  };
  s.keep = {1.5};
  expect_refused(w, "eval: a kept fraction must be above 0 and below 1 (got 1.5)");
  s.keep = {0.05};   // 8 tokens < sinks + recent
  expect_refused(w, "is 8 tokens, fewer than the protected 4 sinks + 16 recent");
  s.keep = {0.97};   // 155 + 8 slack > 160: no round would come within the context
  expect_refused(w, "a round starts at 155 + 8 (--slack) = 163 live tokens, not before the context ends");
  s.keep = {0.95};   // 152 + 8 = 160: the round comes after the last prediction (once let through)
  expect_refused(w, "a round starts at 152 + 8 (--slack) = 160 live tokens, not before the context ends");
  s.keep = {0.9};    // 144 + 8 < 160: one round
  EXPECT_NO_THROW(check_eval_settings(s, m.config.max_position_embeddings));
  // The positions: the window and the greedy tokens but the last (never fed), or all
  // of them when the oracle runs (its recording feeds the last one too). 160 + 41 - 1
  // = 200 fit 200 positions; once every run counted 201.
  s.continuation = 41;
  s.policies = {"streaming"};
  EXPECT_NO_THROW(check_eval_settings(s, 200));
  s.policies = {"streaming", "oracle"};
  EXPECT_THROW(check_eval_settings(s, 200), Error);
  s.policies = {"streaming"};
  s.continuation = 42;
  EXPECT_THROW(check_eval_settings(s, 200), Error);
  s.continuation = small_settings().continuation;
  s.policies = small_settings().policies;
  s.keep = {0.001};  // 0 tokens: a budget of 0 is "never evict" (it ran the full cache under the policy's name)
  s.sinks = s.recent = 0;
  expect_refused(w, "eval: keeping 0.001 of the 160-token context is 0 tokens: raise --keep or --context");
  s = small_settings();
  s.policies = {"triattention"};   // no calibration file
  expect_refused(w, "eval: policy triattention needs a calibration file");
  s = small_settings();
  expect_refused(random_windows(1, s.context, 300, 3), "eval: window 0 has 160 tokens; context 160 needs 161");
}

TEST(Heads, EvenAttentionBaselineMatchesItsDefinition) {
  HeadSettings s;
  s.from = 100;
  s.sinks = 4;
  s.recent = 10;
  const HeadStats u = uniform_head_stats(101, s);   // one query, at position 100: 101 keys
  EXPECT_NEAR(u.sink, 4.0 / 101, 1e-12);
  EXPECT_NEAR(u.local, 10.0 / 101, 1e-12);
  // 86 middle keys [4, 90), each given the same: their top 10% (8 keys) hold 8/86. It
  // was printed as 10% whatever the count; 1/14 = 7.1% for 14 keys.
  EXPECT_NEAR(u.heavy, 8.0 / 86, 1e-12);
  s.from = 50, s.recent = 32;
  EXPECT_NEAR(uniform_head_stats(60, s).heavy, 1.0 / 14, 1e-12);
  s.from = 256;  // the defaults: 220 middle keys
  EXPECT_NEAR(uniform_head_stats(300, s).heavy, 0.1, 1e-12);
}

TEST(Heads, SharesAreFractionsOfEachQuerysAttention) {
  const Model m = load_model(test::tiny_model("tiny-tied"));
  HeadSettings s;
  s.from = 64;
  const auto stats = head_stats(m, random_windows(2, 96, 300, 4), s);
  ASSERT_EQ(stats.size(), size_t(m.config.num_layers * m.config.num_heads));
  const double even = uniform_head_stats(96, s).heavy;  // 2 of 28 middle keys: 7.1%
  for (const HeadStats& h : stats) {
    EXPECT_GT(h.sink, 0);
    EXPECT_LT(h.sink + h.local, 1.0 + 1e-6);
    EXPECT_GE(h.heavy, even - 1e-6);   // the top 10% of keys hold at least their count's share
    EXPECT_LE(h.heavy, 1.0 + 1e-6);
  }
}

// The three columns from their definitions (core/eval/heads.h), summed here from each
// query's attention row: sink over positions [0, 4), local over the newest 32 up to
// the query itself, heavy the share of the 28 middle keys [4, 32) that their top 2
// take in a window, averaged over the two windows. (The bounds-only test above passed
// a sink range of 5, a local window of 33, a middle range one short and an unaveraged
// heavy column.)
TEST(Heads, StatsAreTheirDefinitionWorkedOutByHand) {
  const Model m = load_model(test::tiny_model("tiny-tied"));
  const ModelConfig& c = m.config;
  HeadSettings s;
  s.from = 64;
  const int length = 96, heads = c.num_layers * c.num_heads;
  const auto windows = random_windows(2, length, 300, 7);
  const std::vector<HeadStats> got = head_stats(m, windows, s);
  ASSERT_EQ(got.size(), size_t(heads));

  std::vector<HeadStats> want(static_cast<size_t>(heads));
  for (const std::vector<int>& w : windows) {
    PagedKvCache cache(8, 16, MemoryStrategy::HolesOnly);  // 128 slots: slot j holds position j
    KvStorage kv(c, cache.num_blocks(), 16);
    const int seq = cache.add_sequence();
    RunState state;
    forward(m, cache, kv, seq, state, w.data(), s.from);
    std::vector<float> row;
    ForwardOptions eager;
    eager.attention = AttentionPath::Eager;
    eager.prob_sums = &row;
    std::vector<std::vector<double>> middle(size_t(heads), std::vector<double>(28, 0.0));
    for (int q = s.from; q < length; ++q) {
      forward(m, cache, kv, seq, state, &w[size_t(q)], 1, eager);
      const size_t table = row.size() / size_t(heads);
      for (int h = 0; h < heads; ++h) {
        const float* a = row.data() + size_t(h) * table;
        for (int p = 0; p <= q; ++p) {
          if (p < 4) want[h].sink += a[p] / (2 * 32.0);      // 2 windows x 32 queries
          if (p > q - 32) want[h].local += a[p] / (2 * 32.0);
          if (p >= 4 && p < 32) middle[h][size_t(p - 4)] += a[p];
        }
      }
    }
    for (int h = 0; h < heads; ++h) {
      std::vector<double> sorted = middle[h];
      std::sort(sorted.begin(), sorted.end());
      double total = 0;
      for (double x : sorted) total += x;
      want[h].heavy += (sorted[27] + sorted[26]) / total / 2;
    }
  }
  for (int h = 0; h < heads; ++h) {
    EXPECT_NEAR(got[h].sink, want[h].sink, 1e-9) << "head " << h;
    EXPECT_NEAR(got[h].local, want[h].local, 1e-9) << "head " << h;
    EXPECT_NEAR(got[h].heavy, want[h].heavy, 1e-9) << "head " << h;
  }
}

// Weights that overflow the activations (3e38 in a q_proj row: finite, far past what a
// sum holds) give attention that is not finite: refused by name, as the engine refuses
// such logits (the table printed "-nan%" rows, exit 0).
TEST(Heads, AttentionThatIsNotFiniteIsAnError) {
  Model m = load_model(test::tiny_model("tiny-tied"), WeightFormat::F32);
  Matrix& q_proj = m.weights.layers[1].q_proj;
  std::vector<float> huge(q_proj.f32(), q_proj.f32() + size_t(q_proj.rows) * q_proj.cols);  // [q_dim, hidden]
  std::fill(huge.begin(), huge.begin() + q_proj.cols, 3e38f);  // row 0: head 0's first dimension
  q_proj.data = huge.data();
  HeadSettings s;
  s.from = 64;
  try {
    head_stats(m, random_windows(1, 96, 300, 4), s);
    ADD_FAILURE() << "head_stats returned";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("heads: the attention of layer 1 head 0 at position 64 is not finite", 0), 0u)
        << e.what();
  }
}

}  // namespace
}  // namespace kvscope
