// The app's serving scenario: several requests of a model through one pool.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "scenarios.h"
#include "session.h"
#include "timeline.h"

namespace kvscope::viz {
namespace {

TEST(VizScenarios, ServingRunsShowRequestsSharingThePool) {
  const ModelSource tiny{std::string(KVSCOPE_SOURCE_DIR) + "/tests/models/tiny-tied", ""};
  RunSettings s = find_scenario("serve-model")->settings;
  ASSERT_EQ(s.sequences, 4);
  s.tokens = 96;
  const Recording rec = record(s, tiny);
  ASSERT_EQ(rec.runs.size(), 2u);
  for (const auto& run : rec.runs) {
    Timeline t(run);  // replays (and checks) the scheduler's events
    t.seek(t.size());
    const Counters& c = t.counters();
    EXPECT_EQ(c.blocks_in_use, 0) << run->label;  // every request finished, every block back
    // A finished or preempted request's tokens are released, not evicted: the evicted
    // count is what the rounds took (each RoundBegin and RoundEnd carries the live count).
    int64_t taken_by_rounds = 0;
    for (const Event& e : run->events)
      if (e.kind == EventKind::RoundBegin) taken_by_rounds += e.pos;
      else if (e.kind == EventKind::RoundEnd) taken_by_rounds -= e.pos;
    EXPECT_EQ(c.evicted, taken_by_rounds) << run->label;
    EXPECT_GT(c.released, 0) << run->label;
    EXPECT_EQ(c.evicted + c.released, c.written) << run->label;
    // Nothing is held, and no sequence is left for a full cache to hold: no fraction to show.
    EXPECT_EQ(c.full_cache_blocks, 0) << run->label;
    EXPECT_TRUE(std::isnan(c.blocks_freed_fraction())) << run->label;
    std::set<int> seqs;
    for (const Event& e : run->events) seqs.insert(e.seq);
    EXPECT_GE(seqs.size(), 4u) << run->label;  // one per request, more after preemptions
    EXPECT_EQ(int(seqs.size()), run->sequences) << run->label;
    ASSERT_EQ(int(run->token_text.size()), run->sequences) << run->label;
    for (const auto& text : run->token_text) EXPECT_FALSE(text.empty()) << run->label;
    ASSERT_FALSE(run->round_scores.empty()) << run->label;
    // The last request waits: its first block comes after blocks went back to the pool.
    size_t first_of_last = run->events.size(), first_free = run->events.size();
    for (size_t i = 0; i < run->events.size(); ++i) {
      const Event& e = run->events[i];
      if (e.kind == EventKind::BlockFreed && first_free == run->events.size()) first_free = i;
      if (e.seq == 3 && first_of_last == run->events.size()) first_of_last = i;
    }
    EXPECT_LT(first_free, first_of_last) << run->label;
  }
}

// The "requests" slider's 2 and 3, on the bundled model with the scenario's settings:
// a pool of (requests - 1) budgets once held fewer blocks than one request pins under
// holes only (8 and 16 against 23), and the recording failed with "nothing left to
// preempt". The pool now holds at least one whole request.
TEST(VizScenarios, TwoAndThreeRequestsFinishInTheirPool) {
  const ModelSource bundled{std::string(KVSCOPE_SOURCE_DIR) + "/assets/model", ""};
  for (int n : {2, 3}) {
    RunSettings s = find_scenario("serve-model")->settings;
    s.sequences = n;
    const Recording rec = record(s, bundled);
    ASSERT_EQ(rec.runs.size(), 2u) << n << " requests";
    for (const auto& run : rec.runs) {
      Timeline t(run);
      t.seek(t.size());
      EXPECT_EQ(t.counters().blocks_in_use, 0) << n << " requests, " << run->label;
      std::set<int> requests;
      for (const Event& e : run->events) requests.insert(e.seq);
      EXPECT_GE(int(requests.size()), n) << n << " requests, " << run->label;
    }
  }
}

// Each strategy schedules the requests its own way, so the two runs write different
// numbers of tokens (a preempted request's are written again). The side-by-side
// view still ends both together: at the clock's end every request of both runs has
// finished. (It once left the run with more events mid-way, showing live tokens
// and a blocks-freed figure at "end".)
TEST(VizScenarios, ServingRunsSideBySideEndTogether) {
  // The scenario as the app runs it, on the bundled model (on the tiny test
  // checkpoints both strategies happen to do the same work).
  const ModelSource bundled{std::string(KVSCOPE_SOURCE_DIR) + "/assets/model", ""};
  Session session(record(find_scenario("serve-model")->settings, bundled).runs);
  ASSERT_EQ(session.views(), 2);
  ASSERT_NE(session.view(0).logical_size(), session.view(1).logical_size())
      << "the two strategies did the same work; this test needs runs that differ";
  // On the way, both have written the same share of their tokens, and neither goes back.
  std::vector<size_t> last(2, 0);
  for (size_t c = 0; c <= session.length(); c += std::max<size_t>(1, session.length() / 50)) {
    session.seek(c);
    double share[2];
    for (int v = 0; v < 2; ++v) {
      const Timeline& t = session.view(v);
      EXPECT_GE(t.cursor(), last[size_t(v)]) << "view " << v << " went back at " << c;
      last[size_t(v)] = t.cursor();
      share[v] = double(t.counters().written) / double(t.write_total());
    }
    EXPECT_NEAR(share[0], share[1], 0.01) << "at " << c;
  }
  session.seek(session.length());
  for (int v = 0; v < 2; ++v) {
    const Timeline& t = session.view(v);
    EXPECT_EQ(t.cursor(), t.size()) << t.run().label;
    EXPECT_EQ(t.counters().live(), 0) << t.run().label;
    EXPECT_EQ(t.counters().blocks_in_use, 0) << t.run().label;
  }
  // What tutorial 8 says of this scenario: holes only, preempting more, writes about
  // twice the tokens compaction does for the same requests.
  ASSERT_EQ(session.view(0).run().header.strategy, MemoryStrategy::HolesOnly);
  ASSERT_EQ(session.view(1).run().header.strategy, MemoryStrategy::Compact);
  const double ratio = double(session.view(0).counters().written) / double(session.view(1).counters().written);
  EXPECT_GT(ratio, 1.8);
  EXPECT_LT(ratio, 2.2);
  // The headline's summary at the end (every request released, nothing held now):
  // blocks freed averaged over the tokens written. Tutorial 8: "about an eighth of
  // the blocks for holes only, about half for compaction" (12.6% and 50.4% here).
  const double holes = session.view(0).counters().mean_freed_fraction();
  const double compact = session.view(1).counters().mean_freed_fraction();
  EXPECT_GT(holes, 0.115);
  EXPECT_LT(holes, 0.145);
  EXPECT_GT(compact, 0.475);
  EXPECT_LT(compact, 0.525);
}

}  // namespace
}  // namespace kvscope::viz
