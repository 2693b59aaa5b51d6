// Small helpers shared by the `kvscope bench ...` commands: the CPU's name for the
// table header, the attention rows' query counts, a median, a percentage cell,
// the process's peak memory (Linux), and a sequence with a fraction evicted at random.
#pragma once

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "evict/policy.h"
#include "evict/random.h"
#include "util/clock.h"

namespace kvscope::cli {

inline std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

// The query counts of the attention benchmarks' rows at a context of n tokens: 1 (a
// decode step), then min(queries, n) (a chunk of prefill) when that is more than 1.
inline std::vector<int> query_rows(int queries, int n) {
  const int chunk = std::min(queries, n);
  return chunk > 1 ? std::vector<int>{1, chunk} : std::vector<int>{1};
}

// The middle of the values, or the mean of the two middle ones when their count is
// even (serve-bench's timings over --repeat runs). v must not be empty.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// 100 * part / whole as "42%", or "n/a" when the whole is not known (0: e.g. a peak
// bandwidth the driver did not report), never "inf%".
inline std::string percent_of(double part, double whole) {
  if (!(whole > 0)) return "n/a";
  char s[32];
  std::snprintf(s, sizeof s, "%.0f%%", 100 * part / whole);
  return s;
}

// Peak resident memory (VmHWM) since the last reset_peak_memory(), in bytes.
inline void reset_peak_memory() { std::ofstream("/proc/self/clear_refs") << "5"; }
inline double peak_memory_bytes() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) * 1024;
  return 0;
}
inline double current_memory_bytes() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) * 1024;
  return 0;
}

// The tokens a row keeps of n when it evicts the fraction f: all at 0, none at 1
// (nor at 0.99 of 64 tokens), the same rule in the CPU and the GPU benchmarks.
inline int kept_tokens(int n, double f) { return int(double(n) * (1 - f)); }

// A sequence of n tokens in a fresh cache, then all but kept_tokens(n, f) of them evicted
// at random (the seed picks which; no protected tokens), leaving holes in its table.
inline void fill_sequence(PagedKvCache& cache, int seq, int n, double f, uint64_t seed) {
  for (int i = 0; i < n; ++i) cache.append(seq);
  if (f <= 0) return;
  const std::vector<int64_t> pos = cache.live_positions(seq);
  RandomPolicy random(seed);
  const EvictionSchedule keep{kept_tokens(n, f), 1, 0, 0};
  cache.evict(seq, complement(pos, select_keep(pos, random.scores({pos, n}), keep)));
}

}  // namespace kvscope::cli
