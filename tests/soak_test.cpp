// Soak: a million random cache operations with a fixed seed, a third under each
// memory strategy, several sequences sharing one small pool so that it runs out
// again and again. Checked as it goes:
//
//   every event      an Occupancy replays it (a block is allocated only when
//                    free, a slot written only when empty, ... see cache/occupancy.h)
//   every operation  the positions each sequence holds are the ones a shadow
//                    model says it kept (check_kept: no token lost, none revived)
//   every 64th       check_invariants (ownership, counts, token order, holes),
//                    and every live slot's K/V row still carries its own token
//   at the end       all of that once more, then every sequence is released
//                    and the pool must be whole again
//
// The sanitizer build (KVSCOPE_SANITIZE) runs a tenth of the operations:
// tests/CMakeLists.txt sets KVSCOPE_SOAK_OPS there.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cache/invariants.h"
#include "cache/kv_cache.h"
#include "cache/kv_storage.h"
#include "cache/occupancy.h"
#include "util/error.h"
#include "util/splitmix64.h"

#ifndef KVSCOPE_SOAK_OPS
#define KVSCOPE_SOAK_OPS 1000000
#endif

namespace kvscope {
namespace {

constexpr int kNumBlocks = 32;
constexpr int kBlockSize = 8;
constexpr int kMaxSequences = 4;
constexpr int kFullCheckEvery = 64;

// One layer, one KV head of two numbers: K = (pos, seq - pos), V = (-pos, seq + pos).
// Enough to tell, after any number of moves, whether a slot still holds its own
// token, and all of its row: every number differs from one token to the next of a
// sequence (a second number of seq alone survived a move that copied half a row).
ModelConfig tag_config() {
  ModelConfig c;
  c.num_layers = 1;
  c.num_heads = c.num_kv_heads = 1;
  c.head_dim = 2;
  return c;
}

class Soak {
 public:
  Soak(MemoryStrategy strategy, uint64_t seed)
      : strategy_(strategy),
        cache_(kNumBlocks, kBlockSize, strategy, &log_),
        kv_(tag_config(), kNumBlocks, kBlockSize),
        occ_(kNumBlocks, kBlockSize),
        rng_(seed) {}

  void run(int ops) {
    for (int i = 0; i < ops; ++i) {
      const int seq = step();
      replay_new_events();
      if (seq >= 0 && kept_.count(seq)) check_kept(cache_, seq, kept_[seq]);
      if (i % kFullCheckEvery == 0) full_check();
      if (::testing::Test::HasFailure()) return ADD_FAILURE() << "stopped after operation " << i;
    }
    full_check();
    release_all();
  }

  int exhausted() const { return exhausted_; }
  int rounds() const { return rounds_; }
  int released() const { return released_; }

 private:
  // One random operation; returns the sequence it worked on (-1 for none).
  int step() {
    const int seq = random_sequence();
    const uint64_t op = rng_.next() % 100;
    if (seq < 0 || op < 4) return add();
    if (op < 64) append(seq, 1 + int(rng_.next() % (2 * kBlockSize)));
    else if (op < 84) eviction_round(seq);
    else if (op < 89) compact(seq);
    else if (op < 92) release(seq);
    else bad_request(seq);
    return seq;
  }

  int random_sequence() {
    if (kept_.empty()) return -1;
    auto it = kept_.begin();
    std::advance(it, rng_.next() % kept_.size());
    return it->first;
  }

  int add() {
    if (kept_.size() >= kMaxSequences) return -1;
    const int seq = cache_.add_sequence();
    kept_[seq] = {};
    return seq;
  }

  // Appends up to n tokens; a full pool refuses the next one and changes nothing.
  void append(int seq, int n) {
    for (int i = 0; i < n; ++i) {
      if (cache_.room(seq) == 0) {
        const size_t events = log_.size();
        const int64_t next = cache_.sequence(seq).next_pos;
        EXPECT_THROW(cache_.append(seq), Error);
        ASSERT_EQ(log_.size(), events) << "a refused append wrote an event";
        ASSERT_EQ(cache_.sequence(seq).next_pos, next);
        ++exhausted_;
        return;
      }
      const int64_t pos = cache_.sequence(seq).next_pos;
      const SlotRef at = cache_.append(seq);
      kv_.key(0, at)[0] = float(pos);
      kv_.key(0, at)[1] = float(seq - pos);
      kv_.value(0, at)[0] = -float(pos);
      kv_.value(0, at)[1] = float(seq + pos);
      kept_[seq].push_back(pos);
    }
  }

  // What the engine does: a round drops a random share of the tokens (a
  // stand-in policy) and, under Compact, slides the survivors forward.
  void eviction_round(int seq) {
    std::vector<int64_t>& kept = kept_[seq];
    const double share = std::array<double, 4>{0.05, 0.2, 0.5, 1.0}[rng_.next() % 4];
    std::vector<int64_t> evict, keep;
    for (int64_t p : kept) (rng_.uniform() < share ? evict : keep).push_back(p);
    cache_.begin_round(seq);
    cache_.evict(seq, evict);
    kept = keep;
    if (strategy_ == MemoryStrategy::Compact) compact(seq);
    cache_.end_round(seq);
    ++rounds_;
  }

  void compact(int seq) {
    const std::vector<Move> plan = cache_.plan_compaction(seq);
    kv_.apply(plan);
    cache_.commit_compaction(seq, plan);
  }

  void release(int seq) {
    cache_.release_sequence(seq);
    kept_.erase(seq);
    ++released_;
  }

  // Requests a correct caller never makes; each must be refused and change nothing.
  void bad_request(int seq) {
    const size_t events = log_.size();
    const int64_t ghost = cache_.sequence(seq).next_pos + 1;  // never written
    EXPECT_THROW(cache_.evict(seq, {ghost}), Error);
    if (!kept_[seq].empty()) {
      EXPECT_THROW(cache_.evict(seq, {kept_[seq][0], kept_[seq][0]}), Error);  // listed twice
    }
    EXPECT_THROW(cache_.sequence(1 << 20), Error);
    ASSERT_EQ(log_.size(), events);
  }

  void replay_new_events() {
    for (const Event& e : log_) occ_.apply(e);
    log_.clear();
  }

  void full_check() {
    check_invariants(cache_);
    ASSERT_EQ(occ_.blocks_in_use(), cache_.pool().num_used());
    for (const auto& [seq, kept] : kept_) {
      check_kept(cache_, seq, kept);
      ASSERT_EQ(occ_.live(seq), cache_.sequence(seq).live);
      check_tags(seq);
    }
  }

  // Every live slot's K and V rows still belong to the token the slot records.
  void check_tags(int seq) {
    for (int b : cache_.sequence(seq).blocks)
      for (int j = 0; j < kBlockSize; ++j) {
        const SlotRef at{b, j};
        const int64_t pos = cache_.position(at);
        if (pos == kEmpty) continue;
        const float* k = kv_.key(0, at);
        const float* v = kv_.value(0, at);
        ASSERT_TRUE(k[0] == float(pos) && v[0] == -float(pos) && k[1] == float(seq - pos) && v[1] == float(seq + pos))
            << "sequence " << seq << " block " << b << " slot " << j << " holds position " << pos
            << " but its K/V rows are (" << k[0] << ", " << k[1] << ") and (" << v[0] << ", " << v[1] << ")";
      }
  }

  void release_all() {
    while (!kept_.empty()) release(kept_.begin()->first);
    replay_new_events();
    check_invariants(cache_);
    ASSERT_EQ(cache_.pool().num_free(), kNumBlocks);
    ASSERT_EQ(occ_.blocks_in_use(), 0);
    occ_.check_finished();
  }

  MemoryStrategy strategy_;
  EventLog log_;
  PagedKvCache cache_;
  KvStorage kv_;
  Occupancy occ_;
  SplitMix64 rng_;
  std::map<int, std::vector<int64_t>> kept_;  // active sequence -> the positions it must hold
  int exhausted_ = 0, rounds_ = 0, released_ = 0;
};

class SoakTest : public ::testing::TestWithParam<MemoryStrategy> {};

TEST_P(SoakTest, AThirdOfAMillionRandomOperations) {
  Soak soak(GetParam(), /*seed=*/0x50a4);
  soak.run((KVSCOPE_SOAK_OPS + 2) / 3);
  // The run reached the paths it is meant to stress.
  EXPECT_GT(soak.exhausted(), 100);
  EXPECT_GT(soak.rounds(), 1000);
  EXPECT_GT(soak.released(), 100);
  std::printf("%d refused appends, %d eviction rounds, %d releases\n", soak.exhausted(), soak.rounds(), soak.released());
}

INSTANTIATE_TEST_SUITE_P(Strategies, SoakTest,
                         ::testing::Values(MemoryStrategy::HolesOnly, MemoryStrategy::ReuseHoles,
                                           MemoryStrategy::Compact),
                         [](const auto& p) { return std::string(strategy_name(p.param)); });

}  // namespace
}  // namespace kvscope
