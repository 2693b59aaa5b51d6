// SnapKV's score, by hand (evict/snapkv.h): the votes of the observation window's
// queries for the keys before it, average-pooled over positions (width 5, zero
// padding), and the window itself always kept.
#include "evict/snapkv.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "util/error.h"

namespace kvscope {
namespace {

std::vector<int64_t> positions(int64_t from, int64_t to) {  // [from, to)
  std::vector<int64_t> p(size_t(to - from));
  std::iota(p.begin(), p.end(), from);
  return p;
}

TEST(SnapKV, PoolsThePrefixVotesAndKeepsTheWindow) {
  SnapKVPolicy snap;
  // A prefill of 10 tokens whose last 3 queries voted (the window: positions 7, 8, 9).
  const std::vector<int64_t> pos = positions(0, 10);
  snap.observe(pos, {1, 2, 3, 4, 5, 6, 7, 100, 100, 100}, 3);
  const std::vector<float> s = snap.scores({pos, 10});
  ASSERT_EQ(s.size(), 10u);
  // F.avg_pool1d(kernel 5, padding 2) over the prefix votes 1..7 alone: the window's
  // own votes (100) are not a neighbour's, as in SnapKV's attn[..., -w:, :-w].
  const std::vector<float> want = {6 / 5.f, 10 / 5.f, 15 / 5.f, 20 / 5.f, 25 / 5.f, 22 / 5.f, 18 / 5.f};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(s[i], want[i]) << "position " << i;
  for (size_t i = 7; i < 10; ++i) EXPECT_TRUE(std::isinf(s[i]) && s[i] > 0) << "window position " << i;
}

TEST(SnapKV, NeighboursAreNearbyPositionsNotNearbyListEntries) {
  SnapKVPolicy snap;
  // Positions 3 and 4 were evicted in an earlier round: they count as zero padding,
  // so 2 and 5, next to each other in the live list, do not share votes.
  const std::vector<int64_t> pos = {0, 1, 2, 5, 6, 7, 8};
  snap.observe(pos, {10, 20, 30, 40, 50, 60, 0}, 1);  // one decode query, at position 8
  const std::vector<float> s = snap.scores({pos, 9});
  EXPECT_FLOAT_EQ(s[2], (10 + 20 + 30) / 5.f);  // positions 0..4: 3 and 4 are gone
  EXPECT_FLOAT_EQ(s[3], (40 + 50 + 60) / 5.f);  // positions 3..7
  EXPECT_FLOAT_EQ(s[5], (40 + 50 + 60) / 5.f);  // positions 5..9: 8 is the window, 9 not yet written
  EXPECT_TRUE(std::isinf(s[6]));
}

TEST(SnapKV, TheWindowIsTheNewestStepsHoldingAtLeast32Queries) {
  SnapKVPolicy snap;
  // A prefill of 40 (its last 32 queries vote), giving position 0 a vote of 1000.
  std::vector<float> prefill(40, 0.0f);
  prefill[0] = 1000;
  snap.observe(positions(0, 40), prefill, 32);
  // Decode steps of one query each, voting 1 for position 0. The prefill's step
  // stays while the decode steps hold fewer than 32 queries (up to 63 voters in all).
  int64_t now = 40;
  for (int step = 1; step <= 32; ++step) {
    std::vector<float> votes(size_t(now + 1), 0.0f);
    votes[0] = 1;
    snap.observe(positions(0, now + 1), votes, 1);
    ++now;
    const std::vector<int64_t> pos = positions(0, now);
    const float want = step < 32 ? (1000.f + float(step)) / 5 : 32.f / 5;  // the prefill's dropped at 32
    EXPECT_FLOAT_EQ(snap.scores({pos, now})[0], want) << "after decode step " << step;
    // The window kept whole is the newest 32 positions, however many queries voted:
    // the positions before it are the votes' to choose (with 32 + step kept whole, a
    // budget of sinks + 63 left them nothing).
    const std::vector<float> s = snap.scores({pos, now});
    EXPECT_FALSE(std::isinf(s[size_t(now - 33)])) << "after decode step " << step;
    EXPECT_TRUE(std::isinf(s[size_t(now - 32)])) << "after decode step " << step;
  }
}

// The window is kept whole, as the sinks are: a budget no larger than the two leaves
// the votes nothing to choose (a budget of 20 kept the newest 20, votes or not; one of
// exactly sinks + 32 ran as StreamingLLM, event for event). Refused by name, the way
// validate() refuses a budget below the sinks and recent tokens.
TEST(SnapKV, ABudgetBelowItsWindowAndTheSinksIsRefused) {
  try {
    check_budget_holds_the_window("snapkv", {/*budget=*/20, /*slack=*/1, /*sinks=*/0, /*recent=*/0});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "eviction budget 20 leaves nothing beyond the tokens snapkv protects (0 sinks + its "
                           "observation window, the newest 32): its votes would never choose a token");
  }
  EXPECT_THROW(check_budget_holds_the_window("snapkv", {36, 1, 4, 8}), Error);
  EXPECT_NO_THROW(check_budget_holds_the_window("snapkv", {37, 1, 4, 8}));
  EXPECT_NO_THROW(check_budget_holds_the_window("snapkv", {0, 128, 4, 0}));  // no eviction
  EXPECT_NO_THROW(check_budget_holds_the_window("h2o", {20, 1, 0, 0}));
}

}  // namespace
}  // namespace kvscope
