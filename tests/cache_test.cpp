// The paged cache: BlockPool, PagedKvCache under each memory strategy, the
// invariant checker, select_keep, a randomized property test against a shadow
// model, and the trace format with its replay (Occupancy).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "cache/block_pool.h"
#include "cache/invariants.h"
#include "cache/kv_cache.h"
#include "cache/kv_storage.h"
#include "cache/occupancy.h"
#include "cache/trace.h"
#include "evict/policy.h"
#include "model/config.h"
#include "sim/synthetic.h"
#include "test_paths.h"
#include "util/error.h"

namespace kvscope {
namespace {

// EXPECT that `f` throws kvscope::Error whose one-line message contains `part`.
template <typename F>
void expect_error(F f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing \"" << part << "\"";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(part), std::string::npos) << "message: " << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << "message is not one line: " << m;
  }
}

std::vector<int64_t> sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

std::vector<int64_t> appended(PagedKvCache& cache, int seq, int n) {
  std::vector<int64_t> pos;
  for (int i = 0; i < n; ++i) {
    pos.push_back(cache.sequence(seq).next_pos);
    cache.append(seq);
  }
  return pos;
}

// ---- BlockPool -----------------------------------------------------------------

TEST(BlockPool, HandsOutBlocksInFifoOrder) {
  BlockPool pool(4);
  EXPECT_EQ(pool.allocate(), 0);
  EXPECT_EQ(pool.allocate(), 1);
  pool.free(0);  // to the back of the queue: 2, 3, 0
  EXPECT_EQ(pool.allocate(), 2);
  EXPECT_EQ(pool.allocate(), 3);
  EXPECT_EQ(pool.allocate(), 0);
  pool.free(3);
  pool.free(1);  // the ring wraps: 3, 1
  EXPECT_EQ(pool.allocate(), 3);
  EXPECT_EQ(pool.allocate(), 1);
  EXPECT_EQ(pool.num_free(), 0);
}

// A million allocate/free pairs on a half-used pool (the free queue wraps round many
// times): no block is ever handed out twice, and the counts add up. (That each call is
// O(1) is a matter for a benchmark, not a test: a linear scan here took 7.5 s.)
TEST(BlockPool, AMillionCyclesNeverHandOutAHeldBlock) {
  BlockPool pool(100000);
  std::vector<int> held;
  std::vector<char> is_held(100000, 0);
  for (int i = 0; i < 50000; ++i) {
    held.push_back(pool.allocate());
    is_held[size_t(held.back())] = 1;
  }
  for (int i = 0; i < 1000000; ++i) {
    int& b = held[i % held.size()];
    pool.free(b);
    is_held[size_t(b)] = 0;
    b = pool.allocate();
    ASSERT_FALSE(is_held[size_t(b)]) << "block " << b << " handed out while held, cycle " << i;
    is_held[size_t(b)] = 1;
  }
  EXPECT_EQ(pool.num_used(), 50000);
  EXPECT_EQ(pool.num_free(), 50000);
}

TEST(BlockPool, DoubleFreeIsAnError) {
  BlockPool pool(2);
  const int b = pool.allocate();
  pool.free(b);
  expect_error([&] { pool.free(b); }, "freed twice");
  expect_error([&] { pool.free(7); }, "no block 7");
  EXPECT_EQ(pool.num_free(), 2);
}

TEST(BlockPool, ExhaustedSaysSo) {
  BlockPool pool(3);
  for (int i = 0; i < 3; ++i) pool.allocate();
  expect_error([&] { pool.allocate(); }, "block pool exhausted: all 3 blocks are in use");
  BlockPool one(1);
  one.allocate();
  expect_error([&] { one.allocate(); }, "block pool exhausted: its one block is in use");
  expect_error([] { BlockPool none(0); }, "at least one block");
}

TEST(Cache, ATableLargerThanTheMemoryIsRefusedBeforeAnyIsMade) {
  // 2^30 blocks of 256 slots: 2.2 TB of positions. Once the pool's two arrays (8 GB)
  // were made before the slot table was checked.
  expect_error([] { PagedKvCache cache(1 << 30, 256, MemoryStrategy::Compact); },
               "not enough memory for the cache's slot table (1073741824 blocks of 256 slots, a position each): ");
  EXPECT_EQ(PagedKvCache::table_bytes(10, 16), size_t(10) * (16 * 8 + 3 * 4));
}

TEST(BlockPool, RetainCountsReferences) {
  BlockPool pool(2);
  const int b = pool.allocate();
  pool.retain(b);
  EXPECT_EQ(pool.ref_count(b), 2);
  pool.free(b);
  EXPECT_FALSE(pool.is_free(b));  // one reference left: not back in the free queue
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_NE(pool.allocate(), b);
  pool.free(b);
  EXPECT_TRUE(pool.is_free(b));
  expect_error([&] { pool.retain(b); }, "not allocated");
  expect_error([&] { pool.retain(2); }, "no block 2");
}

TEST(BlockPool, AskingAboutABlockOutsideThePoolIsAnError) {
  BlockPool pool(2);
  expect_error([&] { pool.ref_count(2); }, "block pool: no block 2");
  expect_error([&] { pool.is_free(-1); }, "block pool: no block -1");
}

// ---- PagedKvCache: the basics, under every strategy ------------------------------

class CacheBasics : public ::testing::TestWithParam<MemoryStrategy> {};

TEST_P(CacheBasics, AppendAllocatesAtBlockBoundaries) {
  EventLog log;
  PagedKvCache cache(8, 4, GetParam(), &log);
  const int seq = cache.add_sequence();
  std::vector<int> allocated_at;  // the token index at which each block was taken
  for (int t = 0; t < 9; ++t) {
    const size_t before = log.size();
    const SlotRef at = cache.append(seq);
    EXPECT_EQ(at.slot, t % 4);
    EXPECT_EQ(cache.position(at), t);
    if (log[before].kind == EventKind::BlockAllocated) allocated_at.push_back(t);
  }
  EXPECT_EQ(allocated_at, (std::vector<int>{0, 4, 8}));
  EXPECT_EQ(cache.sequence(seq).blocks, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(cache.sequence(seq).tail_used, 1);
  EXPECT_EQ(cache.slots_in_table(seq), 9);
  EXPECT_EQ(cache.pool().num_used(), 3);
  check_invariants(cache);
}

TEST_P(CacheBasics, EvictMakesHolesAndAnEmptyBlockGoesBack) {
  EventLog log;
  PagedKvCache cache(8, 4, GetParam(), &log);
  const int seq = cache.add_sequence();
  appended(cache, seq, 12);  // blocks 0 [0..3], 1 [4..7], 2 [8..11]

  cache.evict(seq, {1, 2});  // holes in block 0; nothing comes back
  EXPECT_EQ(cache.position({0, 1}), kEmpty);
  EXPECT_EQ(cache.position({0, 2}), kEmpty);
  EXPECT_EQ(cache.sequence(seq).live, 10);
  EXPECT_EQ(cache.pool().num_used(), 3);
  check_invariants(cache);

  log.clear();
  cache.evict(seq, {4, 5, 6, 7});  // block 1 is now empty: back to the pool
  EXPECT_EQ(cache.pool().num_used(), 2);
  EXPECT_EQ(cache.owner(1), -1);
  EXPECT_EQ(cache.sequence(seq).blocks, (std::vector<int>{0, 2}));
  ASSERT_FALSE(log.empty());
  EXPECT_EQ(log.back().kind, EventKind::BlockFreed);
  EXPECT_EQ(log.back().block, 1);
  EXPECT_EQ(cache.live_positions(seq), (std::vector<int64_t>{0, 3, 8, 9, 10, 11}));
  check_invariants(cache);
}

TEST_P(CacheBasics, EvictingTheWholeTailBlockStartsAFreshOne) {
  PagedKvCache cache(8, 4, GetParam());
  const int seq = cache.add_sequence();
  appended(cache, seq, 6);  // block 0 full, block 1 half
  cache.evict(seq, {4, 5});
  EXPECT_EQ(cache.sequence(seq).blocks.size(), 1u);
  check_invariants(cache);
  const SlotRef at = cache.append(seq);  // block 0 is full: a new block, slot 0
  EXPECT_EQ(at.slot, 0);
  EXPECT_EQ(cache.position(at), 6);
  check_invariants(cache);
}

TEST_P(CacheBasics, BadEvictionChangesNothing) {
  PagedKvCache cache(8, 4, GetParam());
  const int seq = cache.add_sequence();
  appended(cache, seq, 6);
  expect_error([&] { cache.evict(seq, {1, 99}); }, "not live");
  expect_error([&] { cache.evict(seq, {2, 2}); }, "twice");
  // -1 is what an empty slot holds: asking to evict it must not empty a hole again.
  expect_error([&] { cache.evict(seq, {kEmpty}); }, "positions are >= 0");
  EXPECT_EQ(cache.live_positions(seq), (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  check_invariants(cache);
}

// A block in the middle of the table that empties goes back, and the tail keeps its
// unwritten slots: the next token goes there, not into a new block. (A cache that
// counted the tail as full whenever any block went back passed every other test, and
// held 23 blocks for 19 in a streaming simulation.)
TEST_P(CacheBasics, FreeingAMiddleBlockLeavesTheTailItsRoom) {
  PagedKvCache cache(8, 4, GetParam());
  const int seq = cache.add_sequence();
  appended(cache, seq, 10);  // blocks 0, 1, 2; the tail holds 8 and 9
  cache.evict(seq, {4, 5, 6, 7});
  EXPECT_EQ(cache.sequence(seq).blocks, (std::vector<int>{0, 2}));
  EXPECT_EQ(cache.blocks_needed(seq, 2), 0);
  EXPECT_EQ(cache.blocks_needed(seq, 3), 1);
  const SlotRef at = cache.append(seq);
  EXPECT_EQ(at.block, 2);
  EXPECT_EQ(at.slot, 2);
  EXPECT_EQ(cache.pool().num_used(), 2);
  check_invariants(cache);
}

// A sequence with no block yet needs one for its first token and one more every
// block_size tokens.
TEST_P(CacheBasics, AFreshSequenceNeedsABlockForItsFirstToken) {
  PagedKvCache cache(8, 4, GetParam());
  const int seq = cache.add_sequence();
  EXPECT_EQ(cache.blocks_needed(seq, 0), 0);
  EXPECT_EQ(cache.blocks_needed(seq, 1), 1);
  EXPECT_EQ(cache.blocks_needed(seq, 4), 1);
  EXPECT_EQ(cache.blocks_needed(seq, 5), 2);
  EXPECT_EQ(cache.room(seq), 32);
}

INSTANTIATE_TEST_SUITE_P(Strategies, CacheBasics,
                         ::testing::Values(MemoryStrategy::HolesOnly, MemoryStrategy::ReuseHoles,
                                           MemoryStrategy::Compact),
                         [](const auto& p) { return std::string(strategy_name(p.param)); });

TEST(Cache, BlockSizeOutOfRange) {
  expect_error([] { PagedKvCache c(4, 0, MemoryStrategy::HolesOnly); }, "block size must be between 1 and 256, got 0");
  expect_error([] { PagedKvCache c(4, 257, MemoryStrategy::HolesOnly); }, "got 257");
  PagedKvCache ok(4, 256, MemoryStrategy::HolesOnly);
  EXPECT_EQ(ok.block_size(), 256);
}

TEST(Cache, ReuseHolesFillsTheFirstHoleInTableOrder) {
  PagedKvCache cache(8, 4, MemoryStrategy::ReuseHoles);
  const int seq = cache.add_sequence();
  appended(cache, seq, 12);
  cache.evict(seq, {9, 2, 5});            // holes: block 0 slot 2, block 1 slot 1, block 2 slot 1
  EXPECT_EQ(cache.room(seq), 3 + 5 * 4);  // 3 holes, a full tail, 5 free blocks

  EXPECT_EQ(cache.append(seq).block, 0);  // position 12 into the first hole...
  EXPECT_EQ(cache.position({0, 2}), 12);
  EXPECT_EQ(cache.position({1, 1}), kEmpty);
  cache.append(seq);  // 13 into block 1 slot 1
  cache.append(seq);  // 14 into block 2 slot 1
  EXPECT_EQ(cache.position({1, 1}), 13);
  EXPECT_EQ(cache.position({2, 1}), 14);
  const SlotRef at = cache.append(seq);  // no hole left: a new block
  EXPECT_EQ(at.block, 3);
  EXPECT_EQ(at.slot, 0);
  // The table is no longer in token order; every slot still knows its position.
  EXPECT_EQ(cache.live_positions(seq), (std::vector<int64_t>{0, 1, 12, 3, 4, 13, 6, 7, 8, 14, 10, 11, 15}));
  check_invariants(cache);
}

// Under hole reuse a step's tokens go into the holes first: blocks_needed counts only
// those left over (the scheduler admits and the engine checks room by it).
TEST(Cache, BlocksNeededCountsTheHolesUnderHoleReuse) {
  PagedKvCache cache(8, 4, MemoryStrategy::ReuseHoles);
  const int seq = cache.add_sequence();
  appended(cache, seq, 8);  // two full blocks
  cache.evict(seq, {1, 5});
  EXPECT_EQ(cache.blocks_needed(seq, 2), 0);  // the two holes
  EXPECT_EQ(cache.blocks_needed(seq, 3), 1);
  EXPECT_EQ(cache.blocks_needed(seq, 6), 1);
  EXPECT_EQ(cache.blocks_needed(seq, 7), 2);
  PagedKvCache holes(8, 4, MemoryStrategy::HolesOnly);  // without reuse the holes stay empty
  const int h = holes.add_sequence();
  appended(holes, h, 8);
  holes.evict(h, {1, 5});
  EXPECT_EQ(holes.blocks_needed(h, 2), 1);
}

// A compaction plan's bytes: K and V of every layer, per move, as the README's and
// tutorial 7's "bytes moved" count them (the CPU tests elsewhere only see them > 0).
TEST(KvStorage, ApplyReturnsTheBytesItMoved) {
  ModelConfig c = load_config_file(test::source_path("assets/configs/qwen3-0.6b-config.json"));
  c.num_layers = 3;
  KvStorage kv(c, 2, 4);
  for (size_t i = 0; i < kv.k.size(); ++i) kv.k[i] = float(i), kv.v[i] = -float(i);
  const std::vector<Move> plan = {{{1, 0}, {0, 1}}, {{1, 2}, {0, 3}}};
  EXPECT_EQ(kv.apply(plan), 2u * 2 * 3 * size_t(c.kv_dim()) * sizeof(float));  // 2 moves x (K, V) x 3 layers
  EXPECT_EQ(KvStorage::bytes_per_slot(c), 2u * 3 * 1024 * 4);                    // kv_dim 8 x 128
  // Whole rows, every layer: each destination now holds its source's K and V (the
  // values i and -i say which slot they came from), and the slots no move touched
  // are as they were.
  const auto row_is = [&](const float* row, float first, float sign) {
    for (int d = 0; d < kv.kv_dim; ++d)
      if (row[d] != sign * (first + float(d))) return false;
    return true;
  };
  const auto start = [&](int l, SlotRef s) { return float(kv.key(l, s) - kv.k.data()); };  // i at its first element
  for (int l = 0; l < 3; ++l) {
    EXPECT_TRUE(row_is(kv.key(l, {0, 1}), start(l, {1, 0}), 1)) << "layer " << l;
    EXPECT_TRUE(row_is(kv.value(l, {0, 1}), start(l, {1, 0}), -1)) << "layer " << l;
    EXPECT_TRUE(row_is(kv.key(l, {0, 3}), start(l, {1, 2}), 1)) << "layer " << l;
    EXPECT_TRUE(row_is(kv.value(l, {0, 3}), start(l, {1, 2}), -1)) << "layer " << l;
    for (SlotRef s : {SlotRef{0, 0}, SlotRef{0, 2}, SlotRef{1, 0}, SlotRef{1, 3}})
      EXPECT_TRUE(row_is(kv.key(l, s), start(l, s), 1) && row_is(kv.value(l, s), start(l, s), -1)) << "layer " << l;
  }
}

// Executes a plan on a copy of the sequence's slots, checking the order property
// the plan promises: each destination is before its source in logical order, and
// is empty when its move runs (a hole, or a source already read).
void expect_plan_is_safe(const PagedKvCache& cache, int seq, const std::vector<Move>& plan) {
  const Sequence& s = cache.sequence(seq);
  const int bs = cache.block_size();
  std::map<int, int> table_index;  // physical block -> logical block
  for (size_t i = 0; i < s.blocks.size(); ++i) table_index[s.blocks[i]] = int(i);
  std::map<std::pair<int, int>, int64_t> slots;  // (block, slot) -> position
  for (int b : s.blocks)
    for (int j = 0; j < bs; ++j) slots[{b, j}] = cache.position({b, j});
  for (const Move& m : plan) {
    const int from = table_index.at(m.from.block) * bs + m.from.slot, to = table_index.at(m.to.block) * bs + m.to.slot;
    EXPECT_LT(to, from) << "a move goes backwards in the table";
    int64_t& dest = slots[std::make_pair(m.to.block, m.to.slot)];
    int64_t& source = slots[std::make_pair(m.from.block, m.from.slot)];
    EXPECT_EQ(dest, kEmpty) << "a move overwrites position " << dest;
    EXPECT_EQ(source, m.pos);
    dest = m.pos;
    source = kEmpty;
  }
  // Afterwards the survivors fill logical slots [0, live) in their old order.
  std::vector<int64_t> after;
  for (int b : s.blocks)
    for (int j = 0; j < bs; ++j)
      if (const int64_t p = slots[std::make_pair(b, j)]; p != kEmpty) after.push_back(p);
  EXPECT_EQ(after, cache.live_positions(seq));
  for (int k = 0; k < s.live; ++k) EXPECT_NE(slots[std::make_pair(s.blocks[size_t(k / bs)], k % bs)], kEmpty);
}

TEST(Cache, CompactionSlidesSurvivorsForwardAndFreesTheTail) {
  EventLog log;
  PagedKvCache cache(8, 4, MemoryStrategy::Compact, &log);
  const int seq = cache.add_sequence();
  appended(cache, seq, 12);
  cache.evict(seq, {1, 2, 5, 6, 7, 9});  // live: 0 3 4 | 8 10 11 in blocks 0, 1, 2
  EXPECT_EQ(cache.pool().num_used(), 3);

  const std::vector<Move> plan = cache.plan_compaction(seq);
  ASSERT_EQ(plan.size(), 5u);  // 3, 4, 8, 10, 11 move; 0 stays
  EXPECT_EQ(plan[0].pos, 3);
  EXPECT_EQ(plan[0].to.block, 0);
  EXPECT_EQ(plan[0].to.slot, 1);
  expect_plan_is_safe(cache, seq, plan);

  cache.commit_compaction(seq, plan);
  EXPECT_EQ(cache.live_positions(seq), (std::vector<int64_t>{0, 3, 4, 8, 10, 11}));
  EXPECT_EQ(cache.sequence(seq).blocks, (std::vector<int>{0, 1}));  // block 2 went back
  EXPECT_EQ(cache.pool().num_used(), 2);
  EXPECT_EQ(cache.sequence(seq).tail_used, 2);
  check_invariants(cache);

  const SlotRef at = cache.append(seq);  // the next token continues the compacted tail
  EXPECT_EQ(at.block, 1);
  EXPECT_EQ(at.slot, 2);
  EXPECT_EQ(cache.position(at), 12);
  check_invariants(cache);
  EXPECT_NO_THROW(replay({4, 8, MemoryStrategy::Compact, {}}, log));
}

TEST(Cache, StaleCompactionPlanIsRefused) {
  PagedKvCache cache(8, 4, MemoryStrategy::Compact);
  const int seq = cache.add_sequence();
  appended(cache, seq, 8);
  cache.evict(seq, {1});
  const std::vector<Move> plan = cache.plan_compaction(seq);
  cache.evict(seq, {5});
  expect_error([&] { cache.commit_compaction(seq, plan); }, "stale plan");
}

TEST(Cache, APlanMadeBeforeAnAppendOrCutShortIsRefusedAndChangesNothing) {
  // Each of these was once accepted and lost a token: the check looked only at the
  // moves' sources, not at what their destinations held or what the plan left out.
  for (MemoryStrategy strategy : {MemoryStrategy::Compact, MemoryStrategy::ReuseHoles}) {
    PagedKvCache cache(8, 4, strategy);
    const int seq = cache.add_sequence();
    appended(cache, seq, 12);
    cache.evict(seq, {0, 1, 2, 4, 5, 6});
    const std::vector<Move> plan = cache.plan_compaction(seq);
    ASSERT_FALSE(plan.empty());
    const std::vector<int64_t> kept = cache.live_positions(seq);
    // Cut short: nothing moves, yet the blocks past ceil(live / 4) would be freed.
    expect_error([&] { cache.commit_compaction(seq, {}); }, "stale plan");
    expect_error([&] { cache.commit_compaction(seq, {plan.begin(), plan.end() - 1}); }, "stale plan");
    // An append after the plan (under ReuseHoles it fills a hole a move writes to).
    cache.append(seq);
    expect_error([&] { cache.commit_compaction(seq, plan); }, "stale plan");
    std::vector<int64_t> now = kept;
    now.push_back(12);
    std::sort(now.begin(), now.end());
    std::vector<int64_t> live = cache.live_positions(seq);
    std::sort(live.begin(), live.end());
    EXPECT_EQ(live, now) << strategy_name(strategy);
    check_invariants(cache);
    const std::vector<int64_t> table_order = cache.live_positions(seq);  // what compaction keeps
    cache.commit_compaction(seq, cache.plan_compaction(seq));            // a fresh plan still does
    check_invariants(cache);
    EXPECT_EQ(cache.live_positions(seq), table_order) << strategy_name(strategy);
  }
}

TEST(Cache, ExhaustedPoolLeavesEverySequenceIntact) {
  EventLog log;
  PagedKvCache cache(4, 4, MemoryStrategy::HolesOnly, &log);
  const int a = cache.add_sequence(), b = cache.add_sequence();
  appended(cache, a, 8);
  appended(cache, b, 8);
  const size_t events = log.size();
  expect_error([&] { cache.append(b); }, "block pool exhausted");
  EXPECT_EQ(log.size(), events);  // nothing happened
  EXPECT_EQ(cache.sequence(b).next_pos, 8);
  EXPECT_EQ(cache.live_positions(a), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(cache.live_positions(b), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  check_invariants(cache);

  cache.evict(a, {0, 1, 2, 3});  // a gives a block back; b can grow again
  EXPECT_EQ(cache.room(b), 4);
  EXPECT_EQ(cache.position(cache.append(b)), 8);
  check_invariants(cache);
}

TEST(Cache, ReleaseReturnsEveryBlock) {
  EventLog log;
  PagedKvCache cache(6, 4, MemoryStrategy::HolesOnly, &log);
  const int a = cache.add_sequence(), b = cache.add_sequence();
  appended(cache, a, 10);
  appended(cache, b, 3);
  cache.release_sequence(a);
  EXPECT_EQ(cache.pool().num_used(), 1);
  expect_error([&] { cache.sequence(a); }, "no sequence 0");
  check_invariants(cache);
  EXPECT_NO_THROW(replay({4, 6, MemoryStrategy::HolesOnly, {}}, log));
}

TEST(Schedule, BudgetMustHoldTheProtectedTokens) {
  EvictionSchedule s{/*budget=*/30, /*slack=*/8, /*sinks=*/4, /*recent=*/32};
  expect_error([&] { s.validate(); }, "--budget 30 is smaller than the protected tokens (--sinks 4 + --recent 32)");
  s.budget = 36;
  EXPECT_NO_THROW(s.validate());
  s.budget = 0;  // no eviction at all: nothing to hold
  EXPECT_NO_THROW(s.validate());
}

// ---- select_keep -----------------------------------------------------------------

TEST(SelectKeep, ProtectsSinksAndRecentThenTakesTheBestScores) {
  const std::vector<int64_t> pos = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  const std::vector<float> score = {0, 0, 9, 1, 8, 2, 0, 0, 0, 0};
  const EvictionSchedule s{/*budget=*/5, 1, /*sinks=*/1, /*recent=*/2};
  // 0 (sink), 8 and 9 (recent), then the two best of the rest: 2 (9) and 4 (8).
  EXPECT_EQ(select_keep(pos, score, s), (std::vector<int64_t>{0, 2, 4, 8, 9}));
}

TEST(SelectKeep, TiesGoToTheNewerToken) {
  const std::vector<int64_t> pos = {10, 11, 12, 13, 14};
  const EvictionSchedule s{/*budget=*/2, 1, 0, 0};
  EXPECT_EQ(select_keep(pos, std::vector<float>(5, 1.0f), s), (std::vector<int64_t>{13, 14}));
}

TEST(SelectKeep, BudgetAtLeastTheTokensKeepsThemAll) {
  const std::vector<int64_t> pos = {3, 7, 9};
  EXPECT_EQ(select_keep(pos, {0, 0, 0}, EvictionSchedule{3, 1, 0, 0}), pos);
  EXPECT_EQ(select_keep(pos, {0, 0, 0}, EvictionSchedule{50, 1, 4, 32}), pos);
  EXPECT_EQ(complement(pos, {7}), (std::vector<int64_t>{3, 9}));
  expect_error([&] { select_keep(pos, {0, 0}, EvictionSchedule{1, 1, 0, 0}); }, "one score per position");
}

// NaN has no order, and ordering by it is undefined behaviour: a model with NaN
// weights (loaded with a warning) reached nth_element with NaN attention sums.
TEST(SelectKeep, ANaNScoreIsAnErrorAndInfinityAScore) {
  const std::vector<int64_t> pos = {3, 7, 9, 12};
  expect_error([&] { select_keep(pos, {1, NAN, 2, 0}, EvictionSchedule{2, 1, 0, 0}); },
               "eviction: position 7 scored NaN: the model's attention is not finite");
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(select_keep(pos, {inf, 0, 1, -inf}, EvictionSchedule{2, 1, 0, 0}), (std::vector<int64_t>{3, 9}));
}

// ---- the invariant checker catches what it should ---------------------------------

// The tests below break a healthy cache on purpose. sequence() returns a const
// reference into the cache's own (non-const) vector, so casting the const away
// and writing is legal C++; no test outside this file should ever do it.
Sequence& tamper(PagedKvCache& cache, int seq) { return const_cast<Sequence&>(cache.sequence(seq)); }

TEST(Invariants, CatchAWrongLiveCount) {
  PagedKvCache cache(4, 4, MemoryStrategy::HolesOnly);
  const int seq = cache.add_sequence();
  appended(cache, seq, 5);
  check_invariants(cache);
  tamper(cache, seq).live = 4;
  expect_error([&] { check_invariants(cache); }, "sequence 0: 5 live slots, but live = 4");
}

TEST(Invariants, CatchABlockInTwoTables) {
  PagedKvCache cache(4, 4, MemoryStrategy::HolesOnly);
  const int a = cache.add_sequence(), b = cache.add_sequence();
  appended(cache, a, 2);
  appended(cache, b, 2);
  tamper(cache, b).blocks.push_back(0);
  expect_error([&] { check_invariants(cache); }, "block 0 is also in the table of sequence 0");
}

TEST(Invariants, CatchALeakedBlockAndABadTail) {
  PagedKvCache cache(4, 4, MemoryStrategy::Compact);
  const int seq = cache.add_sequence();
  appended(cache, seq, 6);
  tamper(cache, seq).tail_used = 0;
  expect_error([&] { check_invariants(cache); }, "tail_used 0 out of [1, 4]");
  tamper(cache, seq).tail_used = 1;  // slot 1 of the tail holds position 5: past the tail
  expect_error([&] { check_invariants(cache); }, "past the tail");
  tamper(cache, seq).tail_used = 4;
  tamper(cache, seq).blocks.pop_back();  // block 1 drops out of the table but stays allocated
  expect_error([&] { check_invariants(cache); }, "sequence 0: 4 live slots, but live = 6");
  tamper(cache, seq).live = 4;
  expect_error([&] { check_invariants(cache); }, "block 1 is allocated but in no block table (a leak)");
}

TEST(Invariants, CatchAWrongHolesList) {
  PagedKvCache cache(4, 4, MemoryStrategy::ReuseHoles);
  const int seq = cache.add_sequence();
  appended(cache, seq, 8);
  cache.evict(seq, {1, 6});
  check_invariants(cache);
  std::swap(tamper(cache, seq).holes[0], tamper(cache, seq).holes[1]);  // the next hole is no longer the first
  expect_error([&] { check_invariants(cache); }, "holes[0] is block 0 slot 1, expected the empty slot block 1 slot 2");
  tamper(cache, seq).holes.pop_back();
  expect_error([&] { check_invariants(cache); }, "1 holes listed, 2 empty written slots");
}

TEST(Invariants, CatchTokenOrderBrokenAcrossBlocks) {
  PagedKvCache cache(4, 4, MemoryStrategy::HolesOnly);
  const int seq = cache.add_sequence();
  appended(cache, seq, 8);  // block 0 holds 0-3, block 1 holds 4-7
  std::swap(tamper(cache, seq).blocks[0], tamper(cache, seq).blocks[1]);
  expect_error([&] { check_invariants(cache); },
               "sequence 0: block 0 slot 0: position 0 follows 7 (holes keeps token order)");
}

TEST(Invariants, CatchAPositionNotYetReached) {
  PagedKvCache cache(4, 4, MemoryStrategy::Compact);
  const int seq = cache.add_sequence();
  appended(cache, seq, 6);
  tamper(cache, seq).next_pos = 5;  // position 5 is live, yet the next token would be 5 again
  expect_error([&] { check_invariants(cache); }, "block 1 slot 1 holds position 5, outside [0, next_pos 5)");
}

TEST(Invariants, CatchAHolesListOutsideReuseHoles) {
  PagedKvCache cache(4, 4, MemoryStrategy::HolesOnly);
  const int seq = cache.add_sequence();
  appended(cache, seq, 4);
  cache.evict(seq, {1});
  check_invariants(cache);
  tamper(cache, seq).holes.push_back({0, 1});  // holes only never fills a hole, so it lists none
  expect_error([&] { check_invariants(cache); }, "sequence 0: 1 holes listed under holes");
}

// check_kept, which the engine runs after every eviction round, names a position
// the caller lists twice, else the first one lost, else the first one left over.
TEST(Invariants, CheckKeptNamesWhatWasLostOrFound) {
  PagedKvCache cache(4, 4, MemoryStrategy::Compact);
  const int seq = cache.add_sequence();
  appended(cache, seq, 6);
  cache.evict(seq, {2, 4});
  check_kept(cache, seq, {5, 3, 1, 0});  // any order
  expect_error([&] { check_kept(cache, seq, {0, 1, 2, 3, 5}); },
               "sequence 0: position 2 was kept but is no longer live");
  expect_error([&] { check_kept(cache, seq, {0, 1, 5}); }, "sequence 0: position 3 is live but was not kept");
  expect_error([&] { check_kept(cache, seq, {0, 1, 3, 3, 5}); },
               "sequence 0: position 3 is listed twice among the kept");
}

// ---- the property test --------------------------------------------------------------

// A few thousand random operations on several sequences sharing one pool. After
// every one: the invariants hold, the cache holds exactly the positions a shadow
// model says are live (none lost, none resurrected), and an Occupancy fed the new
// events agrees with the cache on every slot and every owner.
class CacheProperty : public ::testing::TestWithParam<std::tuple<MemoryStrategy, int>> {
 protected:
  void SetUp() override {
    strategy_ = std::get<0>(GetParam());
    bs_ = std::get<1>(GetParam());
    const int num_blocks = std::max(6, 384 / bs_);  // tight enough that the pool runs out now and then
    cache_ = std::make_unique<PagedKvCache>(num_blocks, bs_, strategy_, &log_);
    occ_ = std::make_unique<Occupancy>(num_blocks, bs_);
  }

  int random_active() {
    const std::vector<int> ids = active();
    return ids.empty() ? -1 : ids[rng_.next() % ids.size()];
  }

  void add() {
    if (shadow_.size() < 4) shadow_[cache_->add_sequence()] = {};
  }

  void append(int seq) {
    const int n = 1 + int(rng_.next() % uint64_t(std::max(64, 3 * bs_)));  // on average more than evictions take
    for (int i = 0; i < n; ++i) {
      const int64_t pos = cache_->sequence(seq).next_pos;
      if (cache_->room(seq) == 0) {
        const size_t events = log_.size();
        expect_error([&] { cache_->append(seq); }, "block pool exhausted");
        ASSERT_EQ(log_.size(), events);
        ++exhausted_;
        return;
      }
      cache_->append(seq);
      shadow_[seq].insert(pos);
    }
  }

  void evict(int seq) {
    const double p = std::array<double, 3>{0.1, 0.5, 0.95}[rng_.next() % 3];
    std::vector<int64_t> drop;
    for (int64_t pos : shadow_[seq])
      if (rng_.uniform() < p) drop.push_back(pos);
    std::shuffle(drop.begin(), drop.end(), std::mt19937(unsigned(rng_.next())));  // any order is fine
    cache_->evict(seq, drop);
    for (int64_t pos : drop) shadow_[seq].erase(pos);
  }

  void compact(int seq) {
    const std::vector<Move> plan = cache_->plan_compaction(seq);
    expect_plan_is_safe(*cache_, seq, plan);
    cache_->commit_compaction(seq, plan);
  }

  void release(int seq) {
    cache_->release_sequence(seq);
    shadow_.erase(seq);
  }

  void bad_eviction(int seq) {
    const int64_t ghost = cache_->sequence(seq).next_pos + 5;  // never written
    expect_error([&] { cache_->evict(seq, {ghost}); }, "not live");
  }

  void step() {
    const int seq = random_active();
    const uint64_t op = rng_.next() % 100;
    if (seq < 0 || op < 3) return add();
    if (op < 50) return append(seq);
    if (op < 75) return evict(seq);
    if (op < 90) return compact(seq);
    if (op < 93) return release(seq);
    bad_eviction(seq);
  }

  void check() {
    check_invariants(*cache_);
    for (const auto& [seq, live] : shadow_)  // room and blocks_needed tell the same story (kv_cache.h)
      for (const int64_t T : {int64_t(1), int64_t(bs_), int64_t(bs_) + 1, 3 * int64_t(bs_) + 1})
        ASSERT_EQ(cache_->blocks_needed(seq, T) <= cache_->pool().num_free(), T <= cache_->room(seq))
            << "sequence " << seq << ", " << T << " tokens";
    for (const auto& [seq, live] : shadow_) {
      const std::vector<int64_t> want(live.begin(), live.end());
      const std::vector<int64_t> got = cache_->live_positions(seq);
      ASSERT_EQ(sorted(got), want) << "sequence " << seq;
      if (strategy_ != MemoryStrategy::ReuseHoles) {
        ASSERT_EQ(got, want) << "token order, sequence " << seq;
      }
    }
    for (; replayed_ < log_.size(); ++replayed_) occ_->apply(log_[replayed_]);
    expect_same(*occ_, *cache_, active());
  }

  std::vector<int> active() const {
    std::vector<int> ids;
    for (const auto& [seq, live] : shadow_) ids.push_back(seq);
    return ids;
  }

  // Every slot and owner; the tables and live counts of the active sequences
  // (a released one owns no block, which the owners already show).
  static void expect_same(const Occupancy& occ, const PagedKvCache& cache, const std::vector<int>& active) {
    ASSERT_EQ(occ.blocks_in_use(), cache.pool().num_used());
    for (int b = 0; b < cache.num_blocks(); ++b) {
      ASSERT_EQ(occ.owner(b), cache.owner(b)) << "block " << b;
      for (int j = 0; j < cache.block_size(); ++j)
        if (occ.position(b, j) != cache.position({b, j}))
          FAIL() << "block " << b << " slot " << j << ": replay " << occ.position(b, j) << ", cache "
                 << cache.position({b, j});
    }
    for (int seq : active) {
      ASSERT_EQ(occ.table(seq), cache.sequence(seq).blocks) << "sequence " << seq;
      ASSERT_EQ(occ.live(seq), cache.sequence(seq).live) << "sequence " << seq;
    }
  }

  MemoryStrategy strategy_;
  int bs_ = 0;
  EventLog log_;
  std::unique_ptr<PagedKvCache> cache_;
  std::unique_ptr<Occupancy> occ_;
  size_t replayed_ = 0;
  std::map<int, std::set<int64_t>> shadow_;  // active sequence -> positions that must be live
  SplitMix64 rng_{20240611};
  int exhausted_ = 0;
};

TEST_P(CacheProperty, RandomOperationsKeepEveryInvariant) {
  const int ops = 2500;
  for (int i = 0; i < ops; ++i) {
    step();
    check();
    if (HasFatalFailure()) FAIL() << "after operation " << i;
  }
  EXPECT_GT(exhausted_, 0) << "the pool never ran out: the test does not reach that path";
  // The whole stream once more, from the start, through the file format.
  const std::string path = test::binary_path("cache_property_" + std::string(strategy_name(strategy_)) + "_" +
                                             std::to_string(bs_) + ".trace");
  write_trace(path, {bs_, cache_->num_blocks(), strategy_, {{"source", "cache_test"}}}, log_);
  const Trace t = read_trace(path);
  ASSERT_EQ(t.events.size(), log_.size());
  expect_same(replay(t.header, t.events), *cache_, active());
  std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(StrategiesAndBlockSizes, CacheProperty,
                         ::testing::Combine(::testing::Values(MemoryStrategy::HolesOnly, MemoryStrategy::ReuseHoles,
                                                              MemoryStrategy::Compact),
                                            ::testing::Values(1, 4, 16, 64)),
                         [](const auto& p) {
                           return std::string(strategy_name(std::get<0>(p.param))) + "_bs" +
                                  std::to_string(std::get<1>(p.param));
                         });

// ---- traces: the file format ------------------------------------------------------------

// A small recorded run: two sequences, evictions, a compaction, a release.
Trace small_run() {
  Trace t{{4, 6, MemoryStrategy::Compact, {{"policy", "random"}, {"source", "a file with spaces % and\nnewline"}}}, {}};
  PagedKvCache cache(6, 4, MemoryStrategy::Compact, &t.events);
  const int a = cache.add_sequence(), b = cache.add_sequence();
  appended(cache, a, 10);
  appended(cache, b, 5);
  cache.begin_round(a);
  cache.evict(a, {1, 2, 3, 6});
  cache.commit_compaction(a, cache.plan_compaction(a));
  cache.end_round(a);
  cache.release_sequence(b);
  return t;
}

// One file per test process and test: ctest runs tests in parallel processes.
std::string trace_path(const std::string& name) {
  return test::binary_path("cache_test_" + name + "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name() +
                           "_" + std::to_string(::getpid()) + ".trace");
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

bool same(const Event& x, const Event& y) {
  return x.kind == y.kind && x.seq == y.seq && x.block == y.block && x.slot == y.slot && x.from_block == y.from_block &&
         x.from_slot == y.from_slot && x.pos == y.pos;
}

TEST(Trace, RoundTripsHeaderAndEvents) {
  const Trace t = small_run();
  const std::string path = trace_path("roundtrip");
  write_trace(path, t.header, t.events);
  const std::string bytes = read_bytes(path);
  const std::string first_line = bytes.substr(0, bytes.find('\n'));
  EXPECT_EQ(first_line.rfind("kvscope-trace 1 block_size=4 num_blocks=6 strategy=compact events=", 0), 0u)
      << first_line;
  EXPECT_NE(first_line.find("source=a%20file%20with%20spaces%20%25%20and%0Anewline"), std::string::npos) << first_line;
  EXPECT_EQ(bytes.size(), first_line.size() + 1 + t.events.size() * kTraceRecordBytes);

  const Trace back = read_trace(path);
  EXPECT_EQ(back.header.block_size, 4);
  EXPECT_EQ(back.header.num_blocks, 6);
  EXPECT_EQ(back.header.strategy, MemoryStrategy::Compact);
  EXPECT_EQ(back.header.meta, t.header.meta);
  ASSERT_EQ(back.events.size(), t.events.size());
  for (size_t i = 0; i < t.events.size(); ++i) EXPECT_TRUE(same(back.events[i], t.events[i])) << "event " << i;
  std::remove(path.c_str());
}

// The record layout is the documented one, byte for byte (little-endian).
TEST(Trace, RecordLayoutIsLittleEndian) {
  const std::string path = trace_path("layout");
  write_trace(path, {4, 8, MemoryStrategy::HolesOnly, {}},
              {Event{EventKind::SlotMoved, 2, 7, 3, 5, 1, 0x0102030405LL}});
  const std::string bytes = read_bytes(path);
  const std::string r = bytes.substr(bytes.find('\n') + 1);
  ASSERT_EQ(r.size(), 26u);
  const unsigned char want[26] = {4, 0, 3, 0, 1, 0, 2, 0, 0, 0, 7, 0, 0, 0, 5, 0, 0, 0, 5, 4, 3, 2, 1, 0, 0, 0};
  for (int i = 0; i < 26; ++i) EXPECT_EQ((unsigned char)r[i], want[i]) << "byte " << i;
  std::remove(path.c_str());
}

// "tokens.S" metadata: a sequence's token ids, written as one comma-separated word
// and read back by sequence id.
TEST(Trace, TokenIdsRoundTripThroughTheHeader) {
  const Trace t = small_run();
  TraceHeader header = t.header;
  header.meta["tokens.0"] = token_ids_value({785, 0, 151643});
  header.meta["tokens.2"] = token_ids_value({});
  const std::string path = trace_path("tokens");
  write_trace(path, header, t.events);
  const std::string bytes = read_bytes(path);
  EXPECT_NE(bytes.substr(0, bytes.find('\n')).find(" tokens.0=785,0,151643 "), std::string::npos);
  const auto ids = trace_token_ids(read_trace(path).header, path);
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids.at(0), (std::vector<int>{785, 0, 151643}));
  EXPECT_TRUE(ids.at(2).empty());
  std::remove(path.c_str());
}

TEST(Trace, BadTokenIdsNameTheKeyAndTheItem) {
  const auto read = [](const std::string& key, const std::string& value) {
    trace_token_ids({4, 6, MemoryStrategy::HolesOnly, {{key, value}}}, "t.trace");
  };
  expect_error([&] { read("tokens.0", "785,x,3"); }, "t.trace: header tokens.0=: \"x\" (item 2) is not a token id");
  expect_error([&] { read("tokens.0", "785,"); }, "\"\" (item 2) is not a token id");
  expect_error([&] { read("tokens.0", "-1"); }, "\"-1\" (item 1) is not a token id");
  expect_error([&] { read("tokens.0", "99999999999"); }, "is not a token id");
  expect_error([&] { read("tokens.a", "1"); }, "t.trace: header tokens.a=: \"a\" is not a sequence id");
  expect_error([&] { read("tokens.", "1"); }, "is not a sequence id");
  EXPECT_NO_THROW(read("token_count", "x"));  // other keys are not token lists
}

class TraceErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    const Trace t = small_run();
    write_trace(path_, t.header, t.events);
    bytes_ = read_bytes(path_);
    body_ = bytes_.find('\n') + 1;
    events_ = t.events.size();
  }
  void TearDown() override { std::remove(path_.c_str()); }
  // Writes the file with `edit` applied to it and expects read_trace to fail with `part`.
  void expect_read_error(std::string bytes, const std::string& part) {
    write_bytes(path_, bytes);
    expect_error([&] { read_trace(path_); }, part);
    expect_error([&] { read_trace(path_); }, path_ + ": ");  // the message names the file
  }
  std::string path_ = trace_path("errors");
  std::string bytes_;
  size_t body_ = 0, events_ = 0;
};

TEST_F(TraceErrors, BadMagic) {
  std::string b = bytes_;
  b[0] = 'K';
  expect_read_error(b, "not a kvscope trace (bad magic");
  expect_read_error("hello", "bad magic");
  expect_read_error("", "bad magic");
}

TEST_F(TraceErrors, UnsupportedVersionAndBadHeader) {
  std::string b = bytes_;
  b.replace(b.find(" 1 "), 3, " 2 ");
  expect_read_error(b, "version \"2\" is not supported");
  b = bytes_;
  b.replace(b.find("block_size=4"), 12, "block_size=0");
  expect_read_error(b, "block_size=0 is out of range");
  b = bytes_;
  b.replace(b.find("strategy=compact"), 16, "strategy=squash!");
  expect_read_error(b, "unknown memory strategy");
  b = bytes_;
  b.replace(b.find("events="), 7, "evxnts=");
  expect_read_error(b, "header has no events=");
  expect_read_error("kvscope-trace 1 block_size=4", "no end");
  b = bytes_;
  b.insert(b.find(' '), "s");  // the first word starts like the magic but is longer
  expect_read_error(b, "not a kvscope trace (bad magic");
  b = bytes_;
  b.insert(b.find('\n'), " loose");
  expect_read_error(b, "header item \"loose\" is not key=value");
  b = bytes_;
  b.insert(b.find('\n'), " a/b=1");  // a key is a plain word, as write_trace requires
  expect_read_error(b, "header item \"a/b=1\" is not key=value");
  b = bytes_;
  b.insert(b.find('\n'), " note=50%");  // a value's '%' is written %25
  expect_read_error(b, "bad %-escape in header value \"50%\"");
}

// Metadata keys share the header with the reader's own: a key that would be read
// as one of them, or would not read back as one word, is refused before writing.
TEST(Trace, MetadataKeysMustBePlainWordsOfTheirOwn) {
  const std::string path = trace_path("meta");
  Trace t = small_run();
  for (const char* key : {"events", "strategy", "two words", "", "a=b"}) {
    t.header.meta = {{key, "1"}};
    expect_error([&] { write_trace(path, t.header, t.events); },
                 path + ": trace metadata key \"" + std::string(key) +
                     "\" must be a plain word other than block_size, num_blocks, strategy, events");
  }
  t.header.meta = {{"note", "50% = 1/2"}};  // any value: escaped
  write_trace(path, t.header, t.events);
  EXPECT_EQ(read_trace(path).header.meta.at("note"), "50% = 1/2");
  std::remove(path.c_str());
}

// A few bytes must not make the reader or the replay ask for gigabytes (found by
// tests/fuzz/trace_fuzz.cpp: num_blocks=10^9 asked for 2 TB, a sequence id near
// 2^24 for 400 MB).
TEST_F(TraceErrors, HeaderOrIdsTooLargeToReplay) {
  std::string b = bytes_;
  b.replace(b.find("num_blocks=6"), 12, "num_blocks=1000000000");
  expect_read_error(b, "header num_blocks=1000000000 is out of range [1, 16777216] for block_size=4");
  b = bytes_;
  b[body_ + 6 + 2] = 0x10;  // event 0's sequence id: 0x100000 = 2^20
  expect_read_error(b, "event 0 (block_allocated): sequence id 1048576 out of range [0, 1048576)");
  // And the writer refuses what the reader would: once serve-bench wrote a trace of
  // 2^20 sequences that kvscope-viz could not open.
  Trace t = small_run();
  t.events[0].seq = 1 << 20;
  expect_error([&] { write_trace(path_, t.header, t.events); },
               path_ + ": event 0 (block_allocated): sequence id 1048576 out of range [0, 1048576)");
  // The header too: a pool of more than 2^26 slots (kvscope simulate --tokens
  // 67108880 --trace once would have written one).
  t = small_run();
  t.header.num_blocks = (1 << 24) + 1;
  expect_error([&] { write_trace(path_, t.header, t.events); },
               path_ + ": header num_blocks=16777217 is out of range [1, 16777216] for block_size=4");
}

// An event count whose 26 bytes a record wrap around 2^64 to the 2 bytes that follow
// the header (26 x 5675921253449092805 = 2 mod 2^64): the size check once passed,
// and reserving the events threw std::length_error instead of a file error.
TEST_F(TraceErrors, AnEventCountThatWrapsAroundIsAFileCutShort) {
  std::string header = bytes_.substr(0, body_);
  const size_t at = header.find("events=");
  header.replace(at, header.find_first_of(" \n", at) - at, "events=5675921253449092805");
  expect_read_error(header + std::string(2, '\0'),
                    "file cut short: the header promises 5675921253449092805 events (26 bytes each) but 2 bytes");
}

TEST_F(TraceErrors, FileCutShort) {
  expect_read_error(bytes_.substr(0, bytes_.size() - 5), "file cut short");
  expect_read_error(bytes_.substr(0, bytes_.size() - 5), "and a partial one");
  expect_read_error(bytes_.substr(0, bytes_.size() - kTraceRecordBytes), "whole records)");  // cut at a record boundary
  expect_read_error(bytes_ + "xy", "2 unexpected bytes after the");
}

TEST_F(TraceErrors, UnknownKindAndOutOfRange) {
  const auto with = [&](size_t event, size_t offset, unsigned char value) {
    std::string b = bytes_;
    b[body_ + event * kTraceRecordBytes + offset] = char(value);
    return b;
  };
  expect_read_error(with(3, 0, 9), "event 3: unknown event kind 9");
  expect_read_error(with(0, 10, 6), "event 0 (block_allocated): block 6 out of range [0, 6)");  // block field
  expect_read_error(with(1, 2, 4), "event 1 (slot_written): slot 4 out of range [0, 4)");       // slot field
  expect_read_error(with(1, 4, 0), "source slot -256 out of range");  // 0xFF00: a from_slot on a write
  expect_read_error(with(1, 14, 0), "event 1 (slot_written): source block -256 out of range");  // from_block
  expect_read_error(with(2, 1, 1), "reserved byte is not 0");
  // pos (offset 18, 8 bytes): a position on a token event, -1 on a block event.
  expect_read_error(with(1, 25, 0x80), "event 1 (slot_written): position -92");  // top byte: negative
  expect_read_error(with(0, 18, 0x05), "event 0 (block_allocated): position -251 on a block event (must be -1)");
}

// ---- replay: Occupancy --------------------------------------------------------------

TEST(Replay, ScrubbingToEventIGivesTheStateAtI) {
  // Snapshots of the live cache at several points; replaying up to the event
  // count at each point must give the same slots.
  EventLog log;
  PagedKvCache cache(16, 4, MemoryStrategy::ReuseHoles, &log);
  const int seq = cache.add_sequence();
  SplitMix64 rng(7);
  std::vector<std::pair<size_t, std::vector<int64_t>>> snapshots;
  for (int round = 0; round < 30; ++round) {
    appended(cache, seq, 1 + int(rng.next() % 9));
    std::vector<int64_t> drop;
    for (int64_t p : cache.live_positions(seq))
      if (rng.uniform() < 0.4) drop.push_back(p);
    cache.evict(seq, drop);
    std::vector<int64_t> slots;
    for (int b = 0; b < 16; ++b)
      for (int j = 0; j < 4; ++j) slots.push_back(cache.position({b, j}));
    snapshots.push_back({log.size(), slots});
  }
  const TraceHeader h{4, 16, MemoryStrategy::ReuseHoles, {}};
  for (const auto& [at, slots] : snapshots) {
    const Occupancy occ = replay(h, log, at);
    EXPECT_EQ(occ.events_applied(), at);
    for (int b = 0; b < 16; ++b)
      for (int j = 0; j < 4; ++j) ASSERT_EQ(occ.position(b, j), slots[size_t(b) * 4 + j]) << "at event " << at;
  }
}

// Hand-made streams that break a rule: the replayer is an invariant checker.
class ReplayErrors : public ::testing::Test {
 protected:
  Event alloc(int seq, int block) { return {EventKind::BlockAllocated, seq, block}; }
  Event write(int seq, int block, int slot, int64_t pos) {
    return {EventKind::SlotWritten, seq, block, slot, -1, -1, pos};
  }
  Event evict(int seq, int block, int slot, int64_t pos) {
    return {EventKind::SlotEvicted, seq, block, slot, -1, -1, pos};
  }
  Event move(int seq, int to_b, int to_s, int from_b, int from_s, int64_t pos) {
    return {EventKind::SlotMoved, seq, to_b, to_s, from_b, from_s, pos};
  }
  Event free(int seq, int block) { return {EventKind::BlockFreed, seq, block}; }
  Event round(EventKind k, int seq, int64_t live) { return {k, seq, -1, -1, -1, -1, live}; }
  void expect_replay_error(const EventLog& log, const std::string& part) {
    expect_error([&] { replay(header_, log); }, part);
  }
  TraceHeader header_{4, 4, MemoryStrategy::HolesOnly, {}};
};

TEST_F(ReplayErrors, WritingIntoAFullSlot) {
  expect_replay_error({alloc(0, 0), write(0, 0, 0, 0), write(0, 0, 0, 1)},
                      "event 2: slot_written seq 0 block 0 slot 0 pos 1: the slot already holds position 0");
}

TEST_F(ReplayErrors, WritingWhereTheSequenceOwnsNothing) {
  expect_replay_error({alloc(0, 0), write(1, 0, 0, 0)}, "block 0 belongs to sequence 0");
  expect_replay_error({write(0, 2, 0, 0)}, "block 2 is free");
}

// A trace of positions 0 and 10^9 replayed into tables 10^9 long (8 GB, 100 s) in the app.
TEST_F(ReplayErrors, PositionsAreWrittenOneAfterAnother) {
  expect_replay_error({alloc(0, 0), write(0, 0, 0, 0), write(0, 0, 1, 0)},
                      "position written after position 0 (a sequence's positions are written 0, 1, 2, ... one after "
                      "another)");
  expect_replay_error({alloc(0, 0), write(0, 0, 0, 0), write(0, 0, 1, 1000000000)}, "after position 0");
  expect_replay_error({alloc(0, 0), write(0, 0, 0, 5)}, "position written after none");
  expect_replay_error({alloc(0, 0), write(0, 0, 0, 0), write(0, 0, 1, 1), alloc(1, 1), write(1, 1, 0, 0),
                       write(0, 0, 2, 3)},
                      "after position 1");
}

// A move or an eviction in a block the sequence does not own: another's, or a free one.
TEST_F(ReplayErrors, MovingOrEvictingInABlockOfAnotherSequence) {
  expect_replay_error({alloc(0, 0), alloc(1, 1), write(1, 1, 0, 0), write(0, 0, 0, 0), move(0, 1, 1, 0, 0, 0)},
                      "block 1 belongs to sequence 1");
  expect_replay_error({alloc(0, 0), alloc(1, 1), write(1, 1, 0, 0), move(0, 0, 0, 1, 0, 0)},
                      "block 1 belongs to sequence 1");
  expect_replay_error({alloc(0, 0), write(0, 0, 0, 0), move(0, 2, 0, 0, 0, 0)}, "block 2 is free");
  expect_replay_error({alloc(0, 0), alloc(1, 1), write(1, 1, 0, 0), evict(0, 1, 0, 0)},
                      "block 1 belongs to sequence 1");
}

TEST_F(ReplayErrors, EvictingTheWrongToken) {
  expect_replay_error({alloc(0, 0), write(0, 0, 0, 0), evict(0, 0, 0, 3)}, "the slot holds position 0");
  expect_replay_error({alloc(0, 0), write(0, 0, 0, 0), write(0, 0, 1, 1), evict(0, 0, 1, 1), evict(0, 0, 1, 1)},
                      "already empty");
}

// An empty slot holds -1: an eviction or a move that names position -1 matched it, and
// the replay counted a token gone that was never there (then gave the block to another
// sequence with a token still in it). The cache refuses -1; the checker must too.
TEST_F(ReplayErrors, AnEmptySlotHasNoPositionToEvictOrMove) {
  expect_replay_error({alloc(0, 0), write(0, 0, 0, 0), evict(0, 0, 1, -1)}, "the slot is already empty");
  expect_replay_error({alloc(0, 0), write(0, 0, 0, 0), move(0, 0, 2, 0, 1, -1)}, "the source slot is empty");
}

TEST_F(ReplayErrors, MovingFromAnEmptySlotOrOntoAToken) {
  expect_replay_error({alloc(0, 0), write(0, 0, 0, 0), move(0, 0, 1, 0, 2, 7)}, "the source slot is empty");
  expect_replay_error({alloc(0, 0), write(0, 0, 0, 0), write(0, 0, 1, 1), move(0, 0, 0, 0, 1, 1)},
                      "the destination still holds position 0");
}

TEST_F(ReplayErrors, FreeingABlockThatStillHoldsTokens) {
  // Inside a round or out of it, only empty blocks go back (a release evicts first).
  expect_replay_error({alloc(0, 0), write(0, 0, 0, 0), round(EventKind::RoundBegin, 0, 1), free(0, 0)},
                      "the block still holds 1 live slot(s)");
  expect_replay_error({alloc(0, 0), write(0, 0, 0, 0), free(0, 0)}, "the block still holds 1 live slot(s)");
}

TEST_F(ReplayErrors, BlocksAndRoundsPairUp) {
  expect_replay_error({alloc(0, 1), alloc(1, 1)}, "already owned by sequence 0");
  expect_replay_error({alloc(0, 1), free(1, 1)}, "block 1 belongs to sequence 0");
  expect_replay_error({round(EventKind::RoundEnd, 0, 0)}, "a round ends that never began");
  expect_replay_error({alloc(0, 0), write(0, 0, 0, 0), round(EventKind::RoundBegin, 0, 2)},
                      "the marker says 2 live tokens, the sequence has 1");
  expect_replay_error({round(EventKind::RoundBegin, 0, 0)}, "ends inside a round");
  // Cut short on purpose (scrubbing): no complaint.
  EXPECT_NO_THROW(replay(header_, {round(EventKind::RoundBegin, 0, 0), round(EventKind::RoundEnd, 0, 0)}, 1));
}

}  // namespace
}  // namespace kvscope
