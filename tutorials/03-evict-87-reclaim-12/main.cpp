// Chapter 3: evict 87.5%, reclaim 12%.
//
// A paged cache gives a block back only when every slot in it is empty. Evict a
// fraction f of the tokens at random and a block of block_size slots is empty
// with probability f^block_size. This program measures that with the simulator
// (core/sim/synthetic.h: the real PagedKvCache, no model) over 20 seeds and four
// block sizes, then asks what correlated importance changes.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "sim/synthetic.h"
#include "tutorial.h"

using namespace kvscope;
using namespace kvscope::tutorial;

constexpr int64_t kTokens = 16000;
constexpr double kEvict = 0.875;
constexpr int kSeeds = 20;

// Small fractions keep two significant digits: 0.875^64 = 0.019%, not 0.0%.
std::string law_percent(double fraction) {
  return fraction >= 0.01 ? percent(fraction) : format("%.2g%%", 100 * fraction);
}

// Blocks freed over seeds 1..kSeeds: mean, min and max.
struct Spread {
  double mean = 0, min = 1, max = 0;
  void add(double x) {
    mean += x / kSeeds;
    min = std::min(min, x);
    max = std::max(max, x);
  }
  std::string str() const { return percent(mean) + " [" + percent(min) + ", " + percent(max) + "]"; }
};

SimulationConfig one_shot(int block_size, const std::string& policy, const std::string& workload, uint64_t seed) {
  SimulationConfig c;
  c.tokens = kTokens;
  c.block_size = block_size;
  c.strategy = MemoryStrategy::HolesOnly;
  c.policy = policy;
  c.workload = workload;
  c.seed = seed;
  c.evict_fraction = kEvict;  // one round, no protected tokens: the pure law
  return c;
}

static void chapter() {
  std::printf("%s tokens, %s of them evicted in one round, no tokens protected; %d seeds per row\n",
              commas(kTokens).c_str(), percent(kEvict).c_str(), kSeeds);
  std::printf("(blocks freed: mean [min, max] over seeds 1..%d)\n\n", kSeeds);

  // 1. Random eviction: the law, against the measurement.
  std::printf("Random eviction, holes only:\n");
  std::printf("  %10s  %13s  %21s  %25s\n", "block size", "full cache", "expected f^block_size", "measured blocks freed");
  double freed_at_16 = 0;
  for (int block_size : {1, 4, 16, 64}) {
    Spread freed;
    int blocks = 0;
    for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
      const SimulationResult r = simulate(one_shot(block_size, "random", "uniform", seed));
      freed.add(r.blocks_freed_fraction());
      blocks = r.blocks_full_cache;
    }
    const double expected = expected_blocks_freed(kEvict, block_size);  // pow(kEvict, block_size)
    std::printf("  %10d  %6s blocks  %21s  %25s\n", block_size, commas(blocks).c_str(),
                format("%.3f^%d = %s", kEvict, block_size, law_percent(expected).c_str()).c_str(), freed.str().c_str());
    if (block_size == 16) freed_at_16 = freed.mean;
  }

  // 2. Compaction frees every block past the survivors, whatever the pattern.
  SimulationConfig compact = one_shot(16, "random", "uniform", 1);
  compact.strategy = MemoryStrategy::Compact;
  const SimulationResult c = simulate(compact);
  std::printf("\nThe same eviction with compaction (block size 16, seed 1): %s live tokens fill ceil(%s / 16) = %s blocks:\n",
              commas(c.live).c_str(), commas(c.live).c_str(), commas(c.blocks_in_use).c_str());
  std::printf("  1 - %s / %s = %s of the blocks freed.\n", commas(c.blocks_in_use).c_str(),
              commas(c.blocks_full_cache).c_str(), percent(c.blocks_freed_fraction()).c_str());

  // 3. Real importance is not independent from token to token. Keep the 12.5%
  //    most important tokens of each synthetic workload (block size 16, holes only).
  std::printf("\nKeeping the %s most important tokens instead (block size 16, holes only):\n", percent(1 - kEvict).c_str());
  std::printf("  %-14s  %25s  %16s\n", "workload", "blocks freed", "importance kept");
  for (const std::string workload : {"uniform", "heavy-tailed", "clustered", "sinks-recency"}) {
    Spread freed, kept;
    for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
      const SimulationResult r = simulate(one_shot(16, "importance", workload, seed));
      freed.add(r.blocks_freed_fraction());
      kept.add(r.importance_kept);
    }
    std::printf("  %-14s  %25s  %16s\n", workload.c_str(), freed.str().c_str(), percent(kept.mean).c_str());
  }

  // The headline, and whether the law held: within half a percentage point of f^16.
  const double law = expected_blocks_freed(kEvict, 16);
  std::printf("\nEvicted %s, reclaimed %.0f%% (%s; f^16 = %s): at block size 16, random eviction %s what f^16 "
              "predicts.\n",
              percent(kEvict).c_str(), 100 * freed_at_16, percent(freed_at_16).c_str(), percent(law).c_str(),
              std::fabs(freed_at_16 - law) < 0.005 ? "gives back" : "does NOT give back");
}

int main(int argc, char** argv) { return run_chapter(argc, argv, chapter); }
