// Shared by the tests/gpu_*_test.cpp files: skip unless a GPU is usable, and
// build random paged caches on the CPU to copy to the GPU.
//
// Every GPU test starts with KVSCOPE_REQUIRE_GPU(): on a machine without a GPU
// (or a driver) it is skipped with the runtime's reason, never passed (and fails
// where KVSCOPE_EXPECT_GPU is set). A build
// without CUDA has one test per suite, skipped as "built without CUDA".
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#ifdef KVSCOPE_HAVE_CUDA
#include "cache/kv_cache.h"
#include "cache/kv_storage.h"
#include "cli/bench_gpu_util.h"  // table_of: the block table and slot positions the kernels read
#include "device_array.h"
#include "gpu_devices.h"
#include "kernels.h"
#include "model/config.h"
#include "util/max_abs_diff.h"
#include "util/splitmix64.h"

// Where a GPU must be (kernels/gpu_check.sh sets KVSCOPE_EXPECT_GPU=1), its absence
// fails the test instead: a run whose every test skipped would read as passed.
#define KVSCOPE_REQUIRE_GPU()                                                                  \
  do {                                                                                         \
    std::string why_no_gpu;                                                                    \
    if (!::kvscope::cuda::gpu_available(why_no_gpu)) {                                         \
      if (const char* expect = std::getenv("KVSCOPE_EXPECT_GPU"); expect && *expect)           \
        FAIL() << "no CUDA GPU, where KVSCOPE_EXPECT_GPU says there is one: " << why_no_gpu; \
      GTEST_SKIP() << "no CUDA GPU: " << why_no_gpu;                                           \
    }                                                                                          \
  } while (0)

namespace kvscope::test {

using cuda::DeviceArray;

inline std::vector<float> random_floats(size_t n, uint64_t seed, float scale = 1.0f) {
  SplitMix64 rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = scale * rng.symmetric();
  return v;
}

// A shape with just what attention and the K/V storage read.
inline ModelConfig attention_config(int layers, int heads, int kv_heads, int head_dim) {
  ModelConfig c;
  c.num_layers = layers;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.hidden_size = heads * head_dim;
  return c;
}

// A new sequence of a cache whose pool hands out its blocks in a shuffled order:
// its table is not 0, 1, 2, ..., so a kernel that read the table's i-th block from
// physical block i would fail (with an identity table, every kernel test passed it).
inline int sequence_with_shuffled_blocks(PagedKvCache& cache, uint64_t seed) {
  std::vector<int> holders;  // one sequence per block of the pool, each holding one token
  for (int b = 0; b < cache.num_blocks(); ++b) {
    holders.push_back(cache.add_sequence());
    cache.append(holders.back());
  }
  SplitMix64 rng(seed);
  for (size_t i = holders.size(); i > 1; --i) std::swap(holders[i - 1], holders[rng.next() % i]);  // Fisher-Yates
  for (int h : holders) cache.release_sequence(h);  // the free queue now holds the blocks in that order
  return cache.add_sequence();
}

// A sequence with holes and out-of-order slots: n tokens, a third evicted at
// random, then `refill` more tokens that reuse holes (positions no longer follow
// the table order), in blocks taken from the pool in a shuffled order. Random K/V
// in a CPU KvStorage, copied to the GPU.
struct RandomPagedCache {
  ModelConfig c;
  PagedKvCache cache;
  KvStorage kv;
  int seq;
  std::vector<int> blocks, slot_pos;  // the table as the kernels read it
  DeviceArray<float> k, v;
  DeviceArray<int> d_blocks, d_slot_pos;

  // n tokens, about a third of them (never position 0) evicted at random, or those
  // in `drop` where given; then `refill` more, into the first holes.
  RandomPagedCache(const ModelConfig& config, int n, int refill, int block_size, uint64_t seed,
                   const std::vector<int64_t>& drop_these = {})
      : c(config),
        cache((n + refill) / block_size + 2, block_size, MemoryStrategy::ReuseHoles),
        kv(config, cache.num_blocks(), block_size),
        seq(sequence_with_shuffled_blocks(cache, seed + 3)) {
    for (int i = 0; i < n; ++i) cache.append(seq);
    std::vector<int64_t> drop = drop_these;
    SplitMix64 rng(seed);
    for (int64_t p = 1; p < n && drop_these.empty(); ++p)  // position 0 stays: every query sees at least one key
      if (rng.next() % 3 == 0) drop.push_back(p);
    cache.evict(seq, drop);
    for (int i = 0; i < refill; ++i) cache.append(seq);
    kv.k = random_floats(kv.k.size(), seed + 1);
    kv.v = random_floats(kv.v.size(), seed + 2);
    refresh_table();
    if (blocks.size() > 2 && std::is_sorted(blocks.begin(), blocks.end()))
      ADD_FAILURE() << "RandomPagedCache: the blocks came in order; the table should be shuffled";
    poison_empty_slots();
    k.upload(kv.k);
    v.upload(kv.v);
  }

  // NaN in every slot of the table that holds no token (holes, the tail's unwritten
  // slots), every layer: a kernel must never read them. Once the flash kernel loaded
  // them and multiplied by P = 0, and 0 * NaN is NaN.
  void poison_empty_slots() {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (size_t j = 0; j < slot_pos.size(); ++j) {
      if (slot_pos[j] >= 0) continue;
      const size_t slot = size_t(blocks[j / size_t(kv.block_size)]) * kv.block_size + j % size_t(kv.block_size);
      for (int l = 0; l < c.num_layers; ++l)
        for (int d = 0; d < kv.kv_dim; ++d) {
          kv.k[l * layer_floats() + slot * kv.kv_dim + d] = nan;
          kv.v[l * layer_floats() + slot * kv.kv_dim + d] = nan;
        }
    }
  }

  void refresh_table() {
    cli::table_of(cache, seq, blocks, slot_pos);
    d_blocks.upload(blocks);
    d_slot_pos.upload(slot_pos);
  }
  size_t layer_floats() const { return size_t(kv.num_blocks) * kv.block_size * kv.kv_dim; }
  cuda::PagedKv layer(int l) {
    return {k.get() + l * layer_floats(), v.get() + l * layer_floats(), d_blocks.get(), d_slot_pos.get(),
            int(slot_pos.size()), cache.block_size()};
  }
};

}  // namespace kvscope::test
#endif
