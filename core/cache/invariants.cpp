#include "cache/invariants.h"

#include <algorithm>
#include <iterator>
#include <string>
#include <unordered_set>
#include <vector>

#include "util/error.h"

namespace kvscope {

namespace {

[[noreturn]] void fail(const std::string& what) { throw Error("invariant: " + what); }

std::string seq_name(int seq) { return "sequence " + std::to_string(seq); }
std::string slot_name(SlotRef s) { return "block " + std::to_string(s.block) + " slot " + std::to_string(s.slot); }

bool is_active(const PagedKvCache& cache, int seq) { return cache.has_sequence(seq); }

// Ownership of every block of one table; marks them in `in_table` [num_blocks].
void check_table_blocks(const PagedKvCache& cache, int seq, std::vector<int>& in_table) {
  const Sequence& s = cache.sequence(seq);
  for (int b : s.blocks) {
    const auto where = [&] { return seq_name(seq) + ": block " + std::to_string(b); };
    if (b < 0 || b >= cache.num_blocks()) fail(where() + " is out of range");
    if (in_table[b] >= 0) fail(where() + " is also in the table of " + seq_name(in_table[b]));
    in_table[b] = seq;
    if (cache.pool().is_free(b)) fail(where() + " is in the table but free in the pool");
    if (cache.pool().ref_count(b) != 1)
      fail(where() + " has ref count " + std::to_string(cache.pool().ref_count(b)) + ", expected 1");
    if (cache.owner(b) != seq) fail(where() + " is in the table but owned by " + std::to_string(cache.owner(b)));
  }
  if (!s.blocks.empty() && (s.tail_used < 1 || s.tail_used > cache.block_size()))
    fail(seq_name(seq) + ": tail_used " + std::to_string(s.tail_used) + " out of [1, " +
         std::to_string(cache.block_size()) + "]");
}

// Live slots, positions and fullness of one table.
void check_table_slots(const PagedKvCache& cache, int seq) {
  const Sequence& s = cache.sequence(seq);
  const bool token_order = cache.strategy() != MemoryStrategy::ReuseHoles;
  std::unordered_set<int64_t> seen;
  int64_t last = -1;
  int live = 0;
  for (size_t i = 0; i < s.blocks.size(); ++i) {
    int live_here = 0;
    for (int j = 0; j < cache.block_size(); ++j) {
      const SlotRef at{s.blocks[i], j};
      const int64_t p = cache.position(at);
      if (p == kEmpty) continue;
      const auto where = [&] { return seq_name(seq) + ": " + slot_name(at); };  // built only for a message
      if (j >= cache.slots_written(s, i))
        fail(where() + " is past the tail (tail_used " + std::to_string(s.tail_used) + ") but holds position " +
             std::to_string(p));
      if (p < 0 || p >= s.next_pos)
        fail(where() + " holds position " + std::to_string(p) + ", outside [0, next_pos " + std::to_string(s.next_pos) +
             ")");
      if (!seen.insert(p).second) fail(where() + ": position " + std::to_string(p) + " is held twice");
      if (token_order && p <= last)
        fail(where() + ": position " + std::to_string(p) + " follows " + std::to_string(last) + " (" +
             strategy_name(cache.strategy()) + " keeps token order)");
      last = p;
      ++live_here;
    }
    if (live_here == 0)
      fail(seq_name(seq) + ": block " + std::to_string(s.blocks[i]) + " holds no live token but is still in the table");
    live += live_here;
  }
  if (live != s.live)
    fail(seq_name(seq) + ": " + std::to_string(live) + " live slots, but live = " + std::to_string(s.live));
}

// ReuseHoles: the holes list is every empty written slot, in reverse table order.
void check_holes(const PagedKvCache& cache, int seq) {
  const Sequence& s = cache.sequence(seq);
  if (cache.strategy() != MemoryStrategy::ReuseHoles) {
    if (!s.holes.empty())
      fail(seq_name(seq) + ": " + std::to_string(s.holes.size()) + " holes listed under " +
           strategy_name(cache.strategy()));
    return;
  }
  std::vector<SlotRef> expected;  // the empty written slots, in table order
  for (size_t i = 0; i < s.blocks.size(); ++i)
    for (int j = 0; j < cache.slots_written(s, i); ++j)
      if (cache.position({s.blocks[i], j}) == kEmpty) expected.push_back({s.blocks[i], j});
  std::reverse(expected.begin(), expected.end());  // the next one to fill at the back
  if (expected.size() != s.holes.size())
    fail(seq_name(seq) + ": " + std::to_string(s.holes.size()) + " holes listed, " + std::to_string(expected.size()) +
         " empty written slots");
  for (size_t k = 0; k < expected.size(); ++k) {
    const SlotRef h = s.holes[k], want = expected[k];
    if (h.block != want.block || h.slot != want.slot)
      fail(seq_name(seq) + ": holes[" + std::to_string(k) + "] is " + slot_name(h) + ", expected the empty slot " +
           slot_name(want));
  }
}

// Blocks in no table: free, unowned, empty. Allocated ones would be leaks.
void check_other_blocks(const PagedKvCache& cache, const std::vector<int>& in_table) {
  int in_tables = 0;
  for (int b = 0; b < cache.num_blocks(); ++b) {
    if (in_table[b] >= 0) {
      ++in_tables;
      continue;
    }
    const auto where = [&] { return "block " + std::to_string(b); };
    if (!cache.pool().is_free(b)) fail(where() + " is allocated but in no block table (a leak)");
    if (cache.owner(b) != -1) fail(where() + " is free but owned by sequence " + std::to_string(cache.owner(b)));
    for (int j = 0; j < cache.block_size(); ++j)
      if (cache.position({b, j}) != kEmpty)
        fail(where() + " is free but slot " + std::to_string(j) + " holds position " +
             std::to_string(cache.position({b, j})));
  }
  if (cache.pool().num_used() != in_tables)
    fail("pool has " + std::to_string(cache.pool().num_used()) + " blocks in use, the tables hold " +
         std::to_string(in_tables));
}

}  // namespace

void check_invariants(const PagedKvCache& cache) {
  std::vector<int> in_table(size_t(cache.num_blocks()), -1);  // [num_blocks] the sequence whose table holds it
  for (int seq = 0; seq < cache.num_sequences(); ++seq) {
    if (!is_active(cache, seq)) continue;
    check_table_blocks(cache, seq, in_table);
    check_table_slots(cache, seq);
    check_holes(cache, seq);
  }
  check_other_blocks(cache, in_table);
}

void check_kept(const PagedKvCache& cache, int seq, std::vector<int64_t> expected) {
  std::vector<int64_t> live = cache.live_positions(seq);
  std::sort(live.begin(), live.end());
  std::sort(expected.begin(), expected.end());
  if (const auto twice = std::adjacent_find(expected.begin(), expected.end()); twice != expected.end())
    fail(seq_name(seq) + ": position " + std::to_string(*twice) + " is listed twice among the kept");
  if (live == expected) return;
  std::vector<int64_t> lost, extra;
  std::set_difference(expected.begin(), expected.end(), live.begin(), live.end(), std::back_inserter(lost));
  if (!lost.empty()) fail(seq_name(seq) + ": position " + std::to_string(lost[0]) + " was kept but is no longer live");
  // Nothing lost, each expected once, and still not equal: the cache holds more.
  std::set_difference(live.begin(), live.end(), expected.begin(), expected.end(), std::back_inserter(extra));
  fail(seq_name(seq) + ": position " + std::to_string(extra.at(0)) + " is live but was not kept");
}

}  // namespace kvscope
