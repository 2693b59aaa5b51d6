// The app's serving scenario: several requests of a model through one pool.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

#include "scenarios.h"
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

}  // namespace
}  // namespace kvscope::viz
