// The two attention paths of core/model/attention.h against attention written the
// plain way: for each query and head, every visible key's score, softmax, the
// weighted sum of the values, in double; and the eager path's sums of probabilities
// per key (what H2O and SnapKV rank by) against the same softmax. Random K/V in a
// paged cache with holes, hole reuse (keys out of position order in the table), GQA
// groups of 1 to 4, and chunks of queries that span several of the flash path's
// query and key tiles with the causal mask cutting through them.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <new>
#include <stdexcept>
#include <vector>

#include "model/attention.h"
#include "model/config.h"
#include "scoped_threads.h"
#include "test_paths.h"
#include "util/error.h"
#include "util/omp_errors.h"
#include "util/splitmix64.h"

namespace kvscope {
namespace {

struct Case {
  AttentionShape shape;
  int tokens;  // written before eviction
  MemoryStrategy strategy;
};

// A cache of `tokens` random keys and values, every third one from position 5 on
// evicted, then 7 more appended (under ReuseHoles they fill the first holes).
struct Cache {
  ModelConfig config;
  PagedKvCache cache;
  KvStorage kv;
  int seq;
  Cache(const Case& c, uint64_t seed)
      : config(shaped(c.shape)),
        cache(2 * c.tokens / 16 + 4, 16, c.strategy),
        kv(config, cache.num_blocks(), 16),
        seq(cache.add_sequence()) {
    SplitMix64 rng(seed);
    for (float& x : kv.k) x = 3 * rng.symmetric();
    for (float& x : kv.v) x = rng.symmetric();
    for (int i = 0; i < c.tokens; ++i) cache.append(seq);
    std::vector<int64_t> evict;
    for (int64_t p = 5; p < c.tokens - 3; p += 3) evict.push_back(p);
    if (!evict.empty()) cache.evict(seq, evict);
    for (int i = 0; i < 7; ++i) cache.append(seq);
  }
  static ModelConfig shaped(AttentionShape s) {
    ModelConfig c = load_config_file(test::source_path("assets/configs/qwen3-0.6b-config.json"));
    c.num_layers = 1;
    c.num_heads = s.n_heads;
    c.num_kv_heads = s.n_kv_heads;
    c.head_dim = s.head_dim;
    return c;
  }
  int64_t last_pos() const { return cache.sequence(seq).next_pos - 1; }
};

// p_j = softmax_j(q[t, h] . k_j / sqrt(d)) over the keys at positions <= q_pos[t]
// (0 for the others), in double.                                      p: [n keys]
std::vector<double> plain_probabilities(const std::vector<float>& q, const std::vector<int64_t>& q_pos,
                                        const LiveSlots& keys, const KvStorage& kv, AttentionShape s, int t, int h) {
  const int hd = s.head_dim, kv_off = (h / (s.n_heads / s.n_kv_heads)) * hd;
  const float* qh = &q[(size_t(t) * s.n_heads + h) * hd];
  std::vector<double> p(keys.slots.size(), -INFINITY);
  double max_s = -INFINITY;
  for (size_t j = 0; j < keys.slots.size(); ++j) {
    if (keys.pos[j] > q_pos[t]) continue;
    const float* k = kv.key(0, keys.slots[j]) + kv_off;
    double dot = 0;
    for (int i = 0; i < hd; ++i) dot += double(qh[i]) * k[i];
    p[j] = dot / std::sqrt(double(hd));
    max_s = std::max(max_s, p[j]);
  }
  double sum = 0;
  for (double& x : p) sum += (x = std::exp(x - max_s));
  for (double& x : p) x /= sum;
  return p;
}

// out[t, h, :] = sum_j p_j v_j, in double.                 out: [T, n_heads * head_dim]
std::vector<double> plain_attention(const std::vector<float>& q, const std::vector<int64_t>& q_pos,
                                    const LiveSlots& keys, const KvStorage& kv, AttentionShape s) {
  const int T = int(q_pos.size()), hd = s.head_dim, group = s.n_heads / s.n_kv_heads;
  std::vector<double> out(size_t(T) * s.n_heads * hd, 0.0);
  for (int t = 0; t < T; ++t) {
    for (int h = 0; h < s.n_heads; ++h) {
      const std::vector<double> p = plain_probabilities(q, q_pos, keys, kv, s, t, h);
      double* o = &out[(size_t(t) * s.n_heads + h) * hd];
      for (size_t j = 0; j < keys.slots.size(); ++j) {
        const float* v = kv.value(0, keys.slots[j]) + (h / group) * hd;
        for (int i = 0; i < hd; ++i) o[i] += p[j] * v[i];
      }
    }
  }
  return out;
}

// Queries at mixed positions, not sorted: every third at the end of the sequence,
// the others spread over it (so a tile of queries sees different keys per row).
std::vector<int64_t> query_positions(int T, int64_t last) {
  std::vector<int64_t> pos(static_cast<size_t>(T));
  for (int t = 0; t < T; ++t) pos[t] = (t % 3 == 0) ? last - t / 3 : (int64_t(t) * 37) % (last + 1);
  return pos;
}

TEST(Attention, FlashAndEagerMatchPlainSoftmax) {
  const std::vector<Case> cases = {
      {{4, 4, 32}, 40, MemoryStrategy::HolesOnly},      // no GQA, one key tile
      {{16, 8, 128}, 300, MemoryStrategy::HolesOnly},   // Qwen3-0.6B's heads
      {{8, 2, 64}, 500, MemoryStrategy::ReuseHoles},    // groups of 4, keys out of position order
      {{12, 4, 96}, 1000, MemoryStrategy::ReuseHoles},  // groups of 3
  };
  uint64_t seed = 1;
  for (const Case& c : cases) {
    const Cache cache(c, seed++);
    const LiveSlots keys = live_slots(cache.cache, cache.seq);
    if (c.strategy == MemoryStrategy::ReuseHoles) {
      ASSERT_FALSE(std::is_sorted(keys.pos.begin(), keys.pos.end())) << "no hole was reused";
    }
    for (int T : {1, 5, 33, 70}) {  // 33 and 70: two and three query tiles, the last one partial
      const std::vector<int64_t> q_pos = query_positions(T, cache.last_pos());
      std::vector<float> q(size_t(T) * c.shape.n_heads * c.shape.head_dim);
      SplitMix64 rng(seed++);
      for (float& x : q) x = 2 * rng.symmetric();
      const std::vector<double> want = plain_attention(q, q_pos, keys, cache.kv, c.shape);

      std::vector<float> flash(q.size()), eager(q.size());
      attention_flash(flash.data(), q.data(), q_pos.data(), T, keys, cache.kv, 0, c.shape);
      attention_eager(eager.data(), q.data(), q_pos.data(), T, keys, cache.kv, 0, c.shape, 0, nullptr, 0);
      auto distance = [](float got, double ref) { return std::isnan(got) ? INFINITY : std::fabs(got - ref); };
      double worst_flash = 0, worst_eager = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        worst_flash = std::max(worst_flash, distance(flash[i], want[i]));
        worst_eager = std::max(worst_eager, distance(eager[i], want[i]));
      }
      // Values are in [-1, 1): float rounding of sums over up to 1,000 keys stays near 1e-6.
      EXPECT_LE(worst_flash, 1e-5) << "heads " << c.shape.n_heads << "/" << c.shape.n_kv_heads << ", "
                                   << keys.slots.size() << " keys, " << T << " queries";
      EXPECT_LE(worst_eager, 1e-5) << "heads " << c.shape.n_heads << "/" << c.shape.n_kv_heads << ", "
                                   << keys.slots.size() << " keys, " << T << " queries";
    }
  }
}

// A prefill chunk that fills a long run of holes, in prompt order: its first queries
// come to key tiles wholly in their future (the chunk's later tokens) with their
// past after them in the table (the tokens after the holes). Such a tile is passed
// over, and the walk goes on; stopping there, as an in-order table allows, lost
// each query's older keys. The other cases' holes are single slots: no tile was
// ever wholly masked for every query of a tile. (Blocks of 256 keep the holes:
// blocks of 16 would go back to the pool when emptied.)
TEST(Attention, FlashGoesOnPastAKeyTileWhollyInTheFuture) {
  const AttentionShape shape{4, 2, 32};
  const ModelConfig config = Cache::shaped(shape);
  PagedKvCache cache(2, 256, MemoryStrategy::ReuseHoles);  // one block: no hole is a whole block
  KvStorage kv(config, cache.num_blocks(), 256);
  SplitMix64 rng(11);
  for (float& x : kv.k) x = 3 * rng.symmetric();
  for (float& x : kv.v) x = rng.symmetric();
  const int seq = cache.add_sequence();
  for (int i = 0; i < 200; ++i) cache.append(seq);
  std::vector<int64_t> evict;
  for (int64_t p = 50; p < 150; ++p) evict.push_back(p);
  cache.evict(seq, evict);  // table slots 50-149 empty
  std::vector<int64_t> q_pos;  // [T]  positions 200-299, into those slots
  for (int i = 0; i < 100; ++i) {
    q_pos.push_back(cache.sequence(seq).next_pos);
    cache.append(seq);
  }
  const LiveSlots keys = live_slots(cache, seq);
  // The first query tile (positions 200-231) and the key tile at table 96-127
  // (positions 246-277): wholly in the future, with positions 150-199 after it.
  const auto tile_in_future = [&](size_t j0) {
    for (size_t j = j0; j < j0 + kFlashTile; ++j)
      if (keys.pos[j] <= q_pos[kFlashQueryTile - 1]) return false;
    return true;
  };
  ASSERT_TRUE(tile_in_future(96));
  ASSERT_EQ(keys.pos.back(), 199);

  const int T = int(q_pos.size());
  std::vector<float> q(size_t(T) * shape.n_heads * shape.head_dim);
  for (float& x : q) x = 2 * rng.symmetric();
  const std::vector<double> want = plain_attention(q, q_pos, keys, kv, shape);
  std::vector<float> flash(q.size());
  attention_flash(flash.data(), q.data(), q_pos.data(), T, keys, kv, 0, shape);
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i)
    worst = std::max(worst, std::isnan(flash[i]) ? INFINITY : std::fabs(flash[i] - want[i]));
  EXPECT_LE(worst, 1e-5);
}

// Scores in the hundreds (queries x 60): exp(score) overflows a float past 88, so
// both paths must subtract the row's largest score first, as the plain softmax
// does. The other tests' scores stay far below that, where leaving it out passes.
TEST(Attention, LargeScoresDoNotOverflowTheSoftmax) {
  const Case c{{4, 4, 32}, 40, MemoryStrategy::HolesOnly};
  const Cache cache(c, 3);
  const LiveSlots keys = live_slots(cache.cache, cache.seq);
  const std::vector<int64_t> q_pos = query_positions(5, cache.last_pos());
  std::vector<float> q(size_t(5) * 4 * 32);
  SplitMix64 rng(4);
  for (float& x : q) x = 60 * rng.symmetric();
  const std::vector<double> want = plain_attention(q, q_pos, keys, cache.kv, c.shape);
  std::vector<float> flash(q.size()), eager(q.size());
  attention_flash(flash.data(), q.data(), q_pos.data(), 5, keys, cache.kv, 0, c.shape);
  attention_eager(eager.data(), q.data(), q_pos.data(), 5, keys, cache.kv, 0, c.shape, 0, nullptr, 0);
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_TRUE(std::isfinite(flash[i]) && std::isfinite(eager[i])) << i;
    EXPECT_NEAR(flash[i], want[i], 1e-4) << i;
    EXPECT_NEAR(eager[i], want[i], 1e-4) << i;
  }
}

TEST(Attention, EagerAddsEachKeysProbabilitySummedOverTheLaterQueries) {
  // What H2O and SnapKV rank keys by: prob_sums[h, table_index[j]] += sum over the
  // queries t >= sum_from of p_j(t, h). The sums start at 0.25, so "adds" is checked
  // too; a table slot that holds no live key (a hole) must stay 0.25.
  const std::vector<Case> cases = {
      {{16, 8, 128}, 300, MemoryStrategy::HolesOnly},
      {{8, 2, 64}, 500, MemoryStrategy::ReuseHoles},
  };
  uint64_t seed = 50;
  for (const Case& c : cases) {
    const Cache cache(c, seed++);
    const LiveSlots keys = live_slots(cache.cache, cache.seq);
    const int table_slots = int(cache.cache.sequence(cache.seq).blocks.size()) * 16;
    for (int T : {5, 70}) {
      const int sum_from = T / 2;
      const std::vector<int64_t> q_pos = query_positions(T, cache.last_pos());
      std::vector<float> q(size_t(T) * c.shape.n_heads * c.shape.head_dim);
      SplitMix64 rng(seed++);
      for (float& x : q) x = 2 * rng.symmetric();
      std::vector<double> want(size_t(c.shape.n_heads) * table_slots, 0.25);
      for (int t = sum_from; t < T; ++t)
        for (int h = 0; h < c.shape.n_heads; ++h) {
          const std::vector<double> p = plain_probabilities(q, q_pos, keys, cache.kv, c.shape, t, h);
          for (size_t j = 0; j < p.size(); ++j) want[size_t(h) * table_slots + keys.table_index[j]] += p[j];
        }

      std::vector<float> out(q.size()), sums(want.size(), 0.25f);
      attention_eager(out.data(), q.data(), q_pos.data(), T, keys, cache.kv, 0, c.shape, sum_from, sums.data(),
                      table_slots);
      double worst = 0;
      for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, double(std::fabs(sums[i] - want[i])));
      // Sums of up to 35 probabilities, each rounded in float: ~1e-6.
      EXPECT_LE(worst, 1e-5) << keys.slots.size() << " keys, " << T << " queries from " << sum_from;
    }
  }
}

TEST(Attention, FlashGivesTheSameBitsOnOneOrTwoThreads) {
  // Each (query tile, KV head) is one thread's work, whichever thread, so the output
  // does not depend on the thread count. The shapes include small ones, where the
  // loop runs on one thread and the matrix products alone could be split.
  const std::vector<Case> cases = {
      {{16, 8, 128}, 30, MemoryStrategy::HolesOnly},
      {{16, 8, 128}, 700, MemoryStrategy::HolesOnly},
      {{4, 2, 32}, 300, MemoryStrategy::ReuseHoles},
  };
  uint64_t seed = 100;
  for (const Case& c : cases) {
    const Cache cache(c, seed++);
    const LiveSlots keys = live_slots(cache.cache, cache.seq);
    for (int T : {1, 16, 70}) {
      const std::vector<int64_t> q_pos = query_positions(T, cache.last_pos());
      std::vector<float> q(size_t(T) * c.shape.n_heads * c.shape.head_dim);
      SplitMix64 rng(seed++);
      for (float& x : q) x = 2 * rng.symmetric();
      std::vector<float> out[2];
      for (int threads : {1, 2}) {
        const test::ScopedThreads scoped(threads);
        out[threads - 1].resize(q.size());
        attention_flash(out[threads - 1].data(), q.data(), q_pos.data(), T, keys, cache.kv, 0, c.shape);
      }
      for (size_t i = 0; i < q.size(); ++i)
        ASSERT_EQ(std::bit_cast<uint32_t>(out[0][i]), std::bit_cast<uint32_t>(out[1][i]))
            << keys.slots.size() << " keys, " << T << " queries, element " << i;
    }
  }
}

// An exception cannot leave an OpenMP region (std::terminate): OmpErrors keeps the
// first one thrown inside and throws it after the region.
TEST(OmpErrors, AnExceptionInARegionReachesTheCaller) {
  for (int threads : {1, 2}) {
    const test::ScopedThreads scoped(threads);
    OmpErrors errors;
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < 8; ++i) errors.run([&] {
      if (i == 5) throw std::runtime_error("item 5");
    });
    try {
      errors.rethrow();
      ADD_FAILURE() << "nothing was rethrown on " << threads << " thread(s)";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "item 5");
    }
  }
  OmpErrors none;
  none.run([] {});
  EXPECT_NO_THROW(none.rethrow());
}

// Eager attention's scratch is asked for before the forward pass changes anything: a
// million queries over a million keys (4 TB of P) is refused by name and size.
TEST(Attention, EagerScratchTooLargeForTheMachineIsRefusedByName) {
  const test::ScopedThreads scoped(1);
  try {
    check_eager_attention_fits(1 << 20, 1 << 20, 128);
    ADD_FAILURE() << "4 TB of eager scratch was accepted";
  } catch (const Error& e) {
    const std::string want = "not enough memory for eager attention's probabilities (1,048,576 queries x 1,048,576 "
                             "keys, on each of 1 thread; H2O and SnapKV need them): 4400.19 GB needed";
    EXPECT_EQ(std::string(e.what()).rfind(want, 0), 0u) << e.what();
  }
  EXPECT_NO_THROW(check_eager_attention_fits(512, 512, 128));    // 1 MB: not looked up
  EXPECT_NO_THROW(check_eager_attention_fits(4096, 4096, 128));  // 76 MB: checked, and fits
}

// Eager attention's P is [queries x keys] floats per thread; one that cannot be
// allocated (here 4 TB) is std::bad_alloc to the caller, which main prints as
// "kvscope: error: out of memory". Inside the parallel region it once ended the
// program: "terminate called without an active exception".
TEST(Attention, EagerOutOfMemoryReachesTheCaller) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer stops the program at an allocation it cannot make";
#else
  std::string overcommit;
  std::ifstream("/proc/sys/vm/overcommit_memory") >> overcommit;
  if (overcommit != "0" && overcommit != "2")
    GTEST_SKIP() << "vm.overcommit_memory is " << overcommit << ": a 4 TB allocation might succeed here";
  const AttentionShape shape{1, 1, 2};
  const Cache cache({shape, 1, MemoryStrategy::HolesOnly}, 1);
  const int n = 1 << 20;  // keys, all the same slot: K and V take 8 MB each, P 4 TB
  LiveSlots keys;
  keys.slots.assign(n, SlotRef{cache.cache.sequence(cache.seq).blocks[0], 0});
  keys.pos.assign(n, 0);
  keys.table_index.assign(n, 0);
  const int T = n;
  std::vector<float> q(size_t(T) * shape.head_dim, 1.0f), out(q.size());
  const std::vector<int64_t> q_pos(size_t(T), 0);
  EXPECT_THROW(attention_eager(out.data(), q.data(), q_pos.data(), T, keys, cache.kv, 0, shape, 0, nullptr, 0),
               std::bad_alloc);
#endif
}

}  // namespace
}  // namespace kvscope
