// The attention, scoring and compaction kernels against the CPU on random
// paged caches with holes and hole reuse (positions out of table order), GQA,
// and several queries at scattered positions (causal masking by position).
// Tolerances:
//   paged (decode), flash, eager outputs   1e-5 absolute (V in [-1, 1); f32 sums in another order)
//   eager prob_sums                        1e-5 absolute
//   TriAttention key scores                1e-9 relative (double on both sides)
//   compaction                             exact: the whole storage, bit for bit, as KvStorage::apply
#include "gpu_test.h"

#include <algorithm>
#include <functional>
#include <iomanip>
#include <numeric>

#ifdef KVSCOPE_HAVE_CUDA
#include "model/attention.h"
#include "model/key_scores.h"

namespace kvscope {
namespace {

using test::DeviceArray;
using test::RandomPagedCache;

struct Queries {
  int T;
  std::vector<float> q;       // [T, q_dim]
  std::vector<int64_t> pos;   // [T]
  DeviceArray<float> d_q;
  DeviceArray<int> d_pos;
  Queries(const ModelConfig& c, const std::vector<int64_t>& positions, uint64_t seed)
      : T(int(positions.size())), q(test::random_floats(positions.size() * c.q_dim(), seed, 2.0f)), pos(positions) {
    d_q.upload(q);
    std::vector<int> p32(pos.begin(), pos.end());
    d_pos.upload(p32);
  }
};

// Queries at scattered positions of the cache's range (each sees position 0 at least).
std::vector<int64_t> scattered(const RandomPagedCache& rc, int T) {
  const int64_t last = rc.cache.sequence(rc.seq).next_pos - 1;
  std::vector<int64_t> p;
  for (int t = 0; t < T; ++t) p.push_back(last - (int64_t(t) * 37) % (last + 1));
  return p;
}

// Queries in token order, one at each of the positions 0 to T - 1: a whole prompt's prefill.
std::vector<int64_t> in_order(int T) {
  std::vector<int64_t> p(size_t(T), 0);
  for (int t = 0; t < T; ++t) p[t] = t;
  return p;
}

// One kernel (paged for one query, flash for more, or eager) against the CPU's
// attention on the same cache and queries, layer by layer.
void check_attention(RandomPagedCache& rc, const std::vector<int64_t>& positions, bool eager) {
  const ModelConfig& c = rc.c;
  const int T = int(positions.size()), block_size = rc.cache.block_size();
  Queries qs(c, positions, 12);
  const LiveSlots keys = live_slots(rc.cache, rc.seq);
  const AttentionShape shape{c.num_heads, c.num_kv_heads, c.head_dim};
  const cuda::Heads heads{c.num_heads, c.num_kv_heads, c.head_dim};
  const int table_slots = int(rc.slot_pos.size());
  const std::string what = std::to_string(c.num_heads) + "/" + std::to_string(c.num_kv_heads) + " heads, d " +
                           std::to_string(c.head_dim) + ", " + std::to_string(keys.slots.size()) + " live keys, T " +
                           std::to_string(T) + ", block " + std::to_string(block_size);

  for (int layer = 0; layer < c.num_layers; ++layer) {
    std::vector<float> want(qs.q.size()), want_sums(size_t(c.num_heads) * table_slots, 0.0f);
    const int sum_from = T / 2;
    if (eager)
      attention_eager(want.data(), qs.q.data(), qs.pos.data(), T, keys, rc.kv, layer, shape, sum_from,
                      want_sums.data(), table_slots);
    else
      attention_flash(want.data(), qs.q.data(), qs.pos.data(), T, keys, rc.kv, layer, shape);

    DeviceArray<float> out(want.size());
    if (eager) {
      DeviceArray<float> probs(size_t(c.num_heads) * T * table_slots), sums(want_sums.size());
      sums.zero(want_sums.size());
      cuda::eager_attention(out.get(), probs.get(), sums.get(), sum_from, qs.d_q.get(), qs.d_pos.get(), T,
                            rc.layer(layer), heads);
      EXPECT_LE(max_abs_diff(sums.to_host(want_sums.size()), want_sums), 1e-5f) << "eager prob_sums, " << what;
    } else if (T == 1) {
      DeviceArray<float> ws(cuda::paged_attention_workspace(T, heads, table_slots));
      cuda::paged_attention(out.get(), qs.d_q.get(), qs.d_pos.get(), T, rc.layer(layer), heads, ws.get());
    } else {
      cuda::flash_attention(out.get(), qs.d_q.get(), qs.d_pos.get(), T, rc.layer(layer), heads);
    }
    EXPECT_LE(max_abs_diff(out.to_host(want.size()), want), 1e-5f)
        << (eager ? "eager, " : T == 1 ? "paged decode, " : "flash, ") << what << ", layer " << layer;
  }
}

void check_attention(const ModelConfig& c, int n, int refill, int block_size, int T, bool eager,
                     bool prompt_order = false) {
  RandomPagedCache rc(c, n, refill, block_size, 11);
  check_attention(rc, prompt_order ? in_order(T) : scattered(rc, T), eager);
}

TEST(GpuAttention, PagedDecodeMatchesCpu) {
  KVSCOPE_REQUIRE_GPU();
  check_attention(test::attention_config(2, 4, 2, 32), 300, 40, 16, 1, false);     // the tiny models' shape
  check_attention(test::attention_config(1, 16, 8, 128), 1500, 100, 16, 1, false); // Qwen3-0.6B's heads, 6 slices
  check_attention(test::attention_config(1, 8, 1, 64), 200, 10, 5, 1, false);      // MQA, odd block size
  check_attention(test::attention_config(1, 4, 2, 64), 3, 0, 16, 1, false);        // 3 keys: a slice's 4th warp sees none
}

TEST(GpuAttention, PagedDecodeKernelTakesSeveralQueries) {
  KVSCOPE_REQUIRE_GPU();
  // The decode kernel is written for any T (grid.z); the engine uses it for T = 1.
  const ModelConfig c = test::attention_config(1, 4, 2, 64);
  RandomPagedCache rc(c, 600, 30, 16, 13);
  Queries qs(c, scattered(rc, 5), 14);
  std::vector<float> want(qs.q.size());
  attention_flash(want.data(), qs.q.data(), qs.pos.data(), 5, live_slots(rc.cache, rc.seq), rc.kv, 0,
                  {c.num_heads, c.num_kv_heads, c.head_dim});
  const cuda::Heads heads{c.num_heads, c.num_kv_heads, c.head_dim};
  DeviceArray<float> out(want.size()), ws(cuda::paged_attention_workspace(5, heads, int(rc.slot_pos.size())));
  cuda::paged_attention(out.get(), qs.d_q.get(), qs.d_pos.get(), 5, rc.layer(0), heads, ws.get());
  EXPECT_LE(max_abs_diff(out.to_host(want.size()), want), 1e-5f);
}

// A batch of decoding sequences for one launch: query row r reads its own table,
// here a run of blocks [first, last) of one random cache's table, laid one after
// another as the CUDA backend lays them, with the live keys each row sees.
struct RowBatch {
  std::vector<std::pair<int, int>> runs;  // [rows] the blocks of rc's table each row reads
  std::vector<LiveSlots> keys;            // [rows] the live keys of its run, table_index from the run's start
  std::vector<int64_t> pos;               // [rows] its query's position: sees most of its keys
  std::vector<int> row_start, row_slots;  // as in PagedKv
  int longest = 0;
  DeviceArray<int> d_tables, d_slot_pos, d_start, d_slots;

  RowBatch(const RandomPagedCache& rc, std::vector<std::pair<int, int>> blocks) : runs(std::move(blocks)), keys(runs.size()) {
    const int bs = rc.cache.block_size();
    const LiveSlots all = live_slots(rc.cache, rc.seq);
    std::vector<int> tables, slot_pos;
    for (size_t r = 0; r < runs.size(); ++r) {
      const auto [first, last] = runs[r];
      row_start.push_back(int(slot_pos.size()));
      row_slots.push_back((last - first) * bs);
      tables.insert(tables.end(), rc.blocks.begin() + first, rc.blocks.begin() + last);
      slot_pos.insert(slot_pos.end(), rc.slot_pos.begin() + first * bs, rc.slot_pos.begin() + last * bs);
      for (size_t i = 0; i < all.slots.size(); ++i)
        if (all.table_index[i] >= first * bs && all.table_index[i] < last * bs) {
          keys[r].slots.push_back(all.slots[i]);
          keys[r].pos.push_back(all.pos[i]);
          keys[r].table_index.push_back(all.table_index[i] - first * bs);
        }
      pos.push_back(keys[r].pos.empty() ? 0 : *std::max_element(keys[r].pos.begin(), keys[r].pos.end()) - int64_t(r));
    }
    longest = *std::max_element(row_slots.begin(), row_slots.end());
    d_tables.upload(tables);
    d_slot_pos.upload(slot_pos);
    d_start.upload(row_start);
    d_slots.upload(row_slots);
  }
  int rows() const { return int(runs.size()); }
  // Every row's query sees at least one of its keys (else its softmax has nothing to normalise).
  bool every_row_sees_a_key() const {
    for (size_t r = 0; r < runs.size(); ++r)
      if (keys[r].pos.empty() || *std::min_element(keys[r].pos.begin(), keys[r].pos.end()) > pos[r]) return false;
    return true;
  }
  cuda::PagedKv layer(RandomPagedCache& rc, int l) const {
    const cuda::PagedKv one = rc.layer(l);
    return {one.k, one.v, d_tables.get(), d_slot_pos.get(), longest, one.block_size, d_start.get(), d_slots.get()};
  }
  std::string row(int r) const {
    return "row " + std::to_string(r) + ": blocks [" + std::to_string(runs[r].first) + ", " + std::to_string(runs[r].second) + ")";
  }
};

// Elements [r * n, (r + 1) * n) of v.
std::vector<float> part(const std::vector<float>& v, size_t r, size_t n) {
  return std::vector<float>(v.begin() + r * n, v.begin() + (r + 1) * n);
}

TEST(GpuAttention, PagedDecodeRowsReadTheirOwnTables) {
  KVSCOPE_REQUIRE_GPU();
  // Row 3's single block leaves 6 of the 7 slices empty; row 1 starts mid-table.
  // Each row against the CPU on its own keys.
  const ModelConfig c = test::attention_config(1, 16, 8, 128);
  RandomPagedCache rc(c, 1600, 60, 16, 21);
  const int n_blocks = int(rc.blocks.size());
  const RowBatch b(rc, {{0, 3}, {2, n_blocks}, {0, n_blocks}, {5, 6}, {0, n_blocks / 2}});
  ASSERT_TRUE(b.every_row_sees_a_key());
  Queries qs(c, b.pos, 22);
  const AttentionShape shape{c.num_heads, c.num_kv_heads, c.head_dim};
  std::vector<float> want(qs.q.size());
  for (int r = 0; r < b.rows(); ++r)
    attention_flash(want.data() + r * c.q_dim(), qs.q.data() + r * c.q_dim(), &qs.pos[r], 1, b.keys[r], rc.kv, 0, shape);

  const cuda::Heads heads{c.num_heads, c.num_kv_heads, c.head_dim};
  DeviceArray<float> out(want.size()), ws(cuda::paged_attention_workspace(b.rows(), heads, b.longest));
  cuda::paged_attention(out.get(), qs.d_q.get(), qs.d_pos.get(), b.rows(), b.layer(rc, 0), heads, ws.get());
  const std::vector<float> got = out.to_host(want.size());
  for (int r = 0; r < b.rows(); ++r) EXPECT_LE(max_abs_diff(part(got, r, c.q_dim()), part(want, r, c.q_dim())), 1e-5f) << b.row(r);
}

TEST(GpuAttention, EagerDecodeRowsReadTheirOwnTablesAndSums) {
  KVSCOPE_REQUIRE_GPU();
  // Several sequences decoding under H2O in one run of the eager kernels: row r reads
  // its own table (of different lengths, so the shorter rows' P is padded) and adds its
  // probabilities to its own sums. Row 2 is not summed (row_sums -1): its sums stay 0.
  const ModelConfig c = test::attention_config(2, 8, 2, 64);
  RandomPagedCache rc(c, 700, 40, 16, 23);
  const int n_blocks = int(rc.blocks.size());
  const RowBatch b(rc, {{1, 4}, {0, n_blocks}, {3, 5}, {6, 7}, {0, n_blocks - 2}});
  ASSERT_TRUE(b.every_row_sees_a_key());
  const AttentionShape shape{c.num_heads, c.num_kv_heads, c.head_dim};
  const cuda::Heads heads{c.num_heads, c.num_kv_heads, c.head_dim};
  Queries qs(c, b.pos, 24);
  std::vector<int64_t> row_sums;  // row r's sums: [n_heads, row_slots[r]] one after another
  int64_t total = 0;
  for (int r = 0; r < b.rows(); ++r) {
    row_sums.push_back(r == 2 ? -1 : total);
    total += int64_t(c.num_heads) * b.row_slots[r];
  }
  DeviceArray<int64_t> d_row_sums;
  d_row_sums.upload(row_sums);

  for (int layer = 0; layer < c.num_layers; ++layer) {
    SCOPED_TRACE("layer " + std::to_string(layer));
    std::vector<float> want(qs.q.size()), want_sums(size_t(total), 0.0f);
    int64_t at = 0;
    for (int r = 0; r < b.rows(); ++r) {
      float* sums = r == 2 ? nullptr : want_sums.data() + at;
      attention_eager(want.data() + r * c.q_dim(), qs.q.data() + r * c.q_dim(), &qs.pos[r], 1, b.keys[r], rc.kv, layer,
                      shape, 0, sums, b.row_slots[r]);
      at += int64_t(c.num_heads) * b.row_slots[r];
    }
    DeviceArray<float> out(want.size()), probs(size_t(c.num_heads) * b.rows() * b.longest), sums(want_sums.size());
    sums.zero(want_sums.size());
    cuda::eager_attention(out.get(), probs.get(), sums.get(), 0, qs.d_q.get(), qs.d_pos.get(), b.rows(),
                          b.layer(rc, layer), heads, d_row_sums.get());
    const std::vector<float> got = out.to_host(want.size()), got_sums = sums.to_host(want_sums.size());
    at = 0;
    for (int r = 0; r < b.rows(); ++r) {
      const size_t n = size_t(c.num_heads) * b.row_slots[r];
      EXPECT_LE(max_abs_diff(part(got, r, c.q_dim()), part(want, r, c.q_dim())), 1e-5f) << "output, " << b.row(r);
      const std::vector<float> g(got_sums.begin() + at, got_sums.begin() + at + n), w(want_sums.begin() + at, want_sums.begin() + at + n);
      EXPECT_LE(max_abs_diff(g, w), 1e-5f) << "prob_sums, " << b.row(r);
      if (r == 2) EXPECT_EQ(g, std::vector<float>(n, 0.0f)) << "a row with row_sums -1 adds nothing";
      else EXPECT_GT(*std::max_element(g.begin(), g.end()), 0.0f) << b.row(r);
      at += int64_t(n);
    }
  }
}

TEST(GpuAttention, FlashPrefillMatchesCpu) {
  KVSCOPE_REQUIRE_GPU();
  check_attention(test::attention_config(2, 4, 2, 32), 300, 40, 16, 37, false);    // 3 query tiles, the last partial
  check_attention(test::attention_config(1, 16, 8, 128), 700, 50, 16, 20, false);  // head_dim 128: > 48 KiB shared
  check_attention(test::attention_config(1, 6, 3, 64), 90, 0, 7, 90, false);       // every token a query
  // A prompt's queries in order over its own keys (with holes): the early query
  // tiles skip the key tiles that lie wholly in their future.
  check_attention(test::attention_config(1, 4, 2, 32), 200, 0, 16, 200, false, true);
}

// A chunk of 100 queries in prompt order filling a run of 100 holes (blocks of 256
// keep them): the first query tile meets key tiles wholly in its future, with its
// past after them in the table. The kernel must pass over them, not stop.
TEST(GpuAttention, FlashGoesOnPastAKeyTileWhollyInTheFuture) {
  KVSCOPE_REQUIRE_GPU();
  std::vector<int64_t> run(100), chunk(100);
  std::iota(run.begin(), run.end(), 50);      // positions 50-149 evicted
  std::iota(chunk.begin(), chunk.end(), 200);  // 200-299 into their slots
  RandomPagedCache rc(test::attention_config(2, 4, 2, 32), 200, 100, 256, 11, run);
  ASSERT_EQ(rc.slot_pos[96], 246);  // the key tile at 96-127 holds 246-277: after query 231
  ASSERT_EQ(rc.slot_pos.size(), 256u);  // one block: the 200 tokens of the table, then empty slots
  ASSERT_EQ(rc.slot_pos[199], 199);
  check_attention(rc, chunk, false);
}

// T = 32m + 1 in prompt order: the last query tile holds one query, at the first
// slot of a key tile, the only key of that tile it may see.
TEST(GpuAttention, FlashLastQueryAtTheStartOfAKeyTile) {
  KVSCOPE_REQUIRE_GPU();
  check_attention(test::attention_config(1, 4, 2, 32), 33, 0, 16, 33, false, true);
  check_attention(test::attention_config(1, 4, 2, 32), 65, 0, 16, 65, false, true);
}

TEST(GpuAttention, EagerMatchesCpuWithProbabilitySums) {
  KVSCOPE_REQUIRE_GPU();
  check_attention(test::attention_config(2, 4, 2, 32), 300, 40, 16, 12, true);
  check_attention(test::attention_config(1, 16, 8, 128), 500, 20, 16, 1, true);
  check_attention(test::attention_config(1, 6, 3, 64), 90, 0, 7, 90, true);
}

// TriAttention's key scores on the GPU against key_scores on the CPU, for the keys of
// a RandomPagedCache(c, tokens, refill, 16, seed); returns how many keys it scored.
int check_key_scores(const ModelConfig& c, int tokens, int refill, uint64_t seed) {
  RandomPagedCache rc(c, tokens, refill, 16, seed);
  const LiveSlots keys = live_slots(rc.cache, rc.seq);
  const size_t rows = size_t(c.num_layers) * c.num_heads;
  const std::vector<float> w = test::random_floats(rows * c.head_dim, seed + 1),
                           gap = test::random_floats(rows * c.head_dim / 2, seed + 2);
  const int n = int(keys.slots.size());
  std::vector<double> want(rows * n);
  key_scores(want.data(), w.data(), gap.data(), keys.slots, rc.kv, {c.num_heads, c.num_kv_heads, c.head_dim});

  std::vector<int> flat;
  for (const SlotRef& s : keys.slots) flat.push_back(s.block * rc.cache.block_size() + s.slot);
  DeviceArray<float> d_w, d_gap;
  DeviceArray<int> d_slots;
  DeviceArray<double> raw(want.size());
  d_w.upload(w);
  d_gap.upload(gap);
  d_slots.upload(flat);
  cuda::key_scores(raw.get(), d_w.get(), d_gap.get(), d_slots.get(), n, rc.k.get(), c.num_layers, rc.layer_floats(),
                   {c.num_heads, c.num_kv_heads, c.head_dim});
  const std::vector<double> got = raw.to_host(want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::abs(got[i] - want[i]) <= 1e-9 * (1 + std::abs(want[i]))) continue;
    // One line, not thousands, when the kernel is wrong.
    ADD_FAILURE() << std::setprecision(17) << "score " << i << " of " << got.size() << ", the first to differ: GPU "
                  << got[i] << ", CPU " << want[i];
    break;
  }
  return n;
}

TEST(GpuAttention, EagerAndPagedRefuseMoreQueriesThanTheirGridsHold) {
  KVSCOPE_REQUIRE_GPU();
  // One thread block per query on a grid's y (and z) axis, which holds 65,535: one query
  // more is refused by name before any launch (the launch would fail "invalid
  // configuration argument"), so nothing is read or written and the buffers may be null.
  // The decode kernel's queries are a batch's sequences, one each.
  const ModelConfig c = test::attention_config(1, 2, 1, 64);
  RandomPagedCache rc(c, 20, 0, 16, 5);
  const cuda::Heads heads{c.num_heads, c.num_kv_heads, c.head_dim};
  const auto expect_refused = [](const std::function<void()>& launch, const std::string& kernel) {
    try {
      launch();
      ADD_FAILURE() << kernel << ": 65,536 queries were not refused";
    } catch (const Error& e) {
      EXPECT_EQ(e.what(), kernel + ": at most 65535 queries at once (a grid's y and z axes), got 65536");
    }
  };
  expect_refused([&] { cuda::eager_attention(nullptr, nullptr, nullptr, 0, nullptr, nullptr,
                                             cuda::kMaxEagerQueries + 1, rc.layer(0), heads); },
                 "eager_attention");
  expect_refused([&] { cuda::paged_attention(nullptr, nullptr, nullptr, cuda::kMaxPagedQueries + 1, rc.layer(0),
                                             heads, nullptr); },
                 "paged_attention");
}

// The kernel scores 8 keys per thread block: 280 keys fill 35 blocks, and 102 leave
// the last block part-full, whose spare warps must score nothing.
TEST(GpuAttention, TriAttentionKeyScoresMatchCpu) {
  KVSCOPE_REQUIRE_GPU();
  const ModelConfig c = test::attention_config(3, 8, 2, 64);
  EXPECT_EQ(check_key_scores(c, 400, 20, 15), 280);
  EXPECT_EQ(check_key_scores(c, 150, 0, 3), 102);
}

// Compaction on the GPU against KvStorage::apply on the CPU, bit for bit, for plans
// of dense and sparse survivors in a model shaped like c.
void check_compaction(const ModelConfig& c, const std::vector<int>& block_sizes) {
  // Not block size 1: there every evicted token's block goes back to the pool at once,
  // so the table never has a hole and the plan is empty.
  for (int block_size : block_sizes) {
    for (int evict_every : {2, 3, 8}) {  // dense and sparse survivors: short and long chains of moves
      PagedKvCache cache(600 / block_size + 1, block_size, MemoryStrategy::Compact);
      const int seq = cache.add_sequence();
      for (int i = 0; i < 600; ++i) cache.append(seq);
      std::vector<int64_t> drop;
      for (int64_t p = 0; p < 600; ++p)
        if (p % evict_every == 1 || (p > 100 && p < 140)) drop.push_back(p);  // a run of whole blocks too
      cache.evict(seq, drop);
      const std::vector<Move> plan = cache.plan_compaction(seq);
      ASSERT_FALSE(plan.empty());

      KvStorage kv(c, cache.num_blocks(), block_size);
      kv.k = test::random_floats(kv.k.size(), 19);
      kv.v = test::random_floats(kv.v.size(), 20);
      DeviceArray<float> k, v;
      k.upload(kv.k);
      v.upload(kv.v);
      std::vector<int> from, to;
      for (const Move& m : plan) {
        from.push_back(m.from.block * block_size + m.from.slot);
        to.push_back(m.to.block * block_size + m.to.slot);
      }
      DeviceArray<int> d_from, d_to;
      d_from.upload(from);
      d_to.upload(to);
      kv.apply(plan);
      cuda::compact(k.get(), v.get(), d_from.get(), d_to.get(), int(plan.size()), c.num_layers,
                    size_t(cache.num_blocks()) * block_size * c.kv_dim(), c.kv_dim());
      EXPECT_EQ(k.to_host(kv.k.size()), kv.k) << "block size " << block_size << ", every " << evict_every;
      EXPECT_EQ(v.to_host(kv.v.size()), kv.v) << "block size " << block_size << ", every " << evict_every;
    }
  }
}

TEST(GpuCompaction, ExecutesThePlanBitForBitLikeTheCpu) {
  KVSCOPE_REQUIRE_GPU();
  check_compaction(test::attention_config(3, 4, 2, 32), {2, 4, 16});
}

// kv_dim 1024: 3 layers x K,V x 256 columns = 1536 threads, six blocks of 256
// (the tiny shape above fits in one block, so the grid's size is never tested).
TEST(GpuCompaction, ManyColumnsSpanSeveralThreadBlocks) {
  KVSCOPE_REQUIRE_GPU();
  check_compaction(test::attention_config(3, 16, 8, 128), {4});
}

}  // namespace
}  // namespace kvscope

#else  // built without CUDA: the suites are here, and say why they do not run
TEST(GpuAttention, BuiltWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
TEST(GpuCompaction, BuiltWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#endif
