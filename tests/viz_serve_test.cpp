// The app's serving scenario: several requests of a model through one pool.
#include <gtest/gtest.h>

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
    EXPECT_EQ(t.counters().blocks_in_use, 0) << run->label;  // every request finished, every block back
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
