#include "eval/heads.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "cache/kv_cache.h"
#include "cache/kv_storage.h"
#include "model/qwen3.h"
#include "util/error.h"

namespace kvscope {

namespace {

// The top 10% of n middle keys, at least one.
size_t top_decile(size_t n) { return std::max<size_t>(1, n / 10); }

// Share of the middle keys' attention held by their top 10%.   received: [n] column sums
double top_decile_share(std::vector<double> received) {
  if (received.empty()) return 0;
  const double total = std::accumulate(received.begin(), received.end(), 0.0);
  const size_t top = top_decile(received.size());
  std::partial_sort(received.begin(), received.begin() + top, received.end(), std::greater<>());
  return total > 0 ? std::accumulate(received.begin(), received.begin() + top, 0.0) / total : 0;
}

}  // namespace

namespace {

// sinks, recent >= 0 and fewer than the window's tokens. Returns the lowest first
// query: with at least kMinMiddleKeys middle keys, [sinks, from - recent), their top
// 10% is one key of ten or more (with none, or one, heavy would read 0% or 100%).
int64_t lowest_first_query(const HeadSettings& s, int length) {
  if (s.sinks < 0 || s.recent < 0) throw Error("heads: sinks and recent must be >= 0");
  const int64_t protected_tokens = int64_t(s.sinks) + s.recent;  // in 64 bits: each may be near INT_MAX
  if (length <= protected_tokens)  // no query then has keys that are neither sinks nor recent
    throw Error("heads: sinks + recent (" + std::to_string(s.sinks) + " + " + std::to_string(s.recent) +
                ") must be fewer than the window's tokens (--length " + std::to_string(length) + ")");
  return protected_tokens + kMinMiddleKeys;
}

}  // namespace

int default_first_query(const HeadSettings& s, int length) {
  const int64_t lowest = lowest_first_query(s, length);
  if (lowest >= length)
    throw Error("heads: --length " + std::to_string(length) + " leaves no query to measure: the first is at " +
                "--sinks + --recent + " + std::to_string(kMinMiddleKeys) + " = " + std::to_string(lowest) +
                " or later (so that " + std::to_string(kMinMiddleKeys) + " middle keys or more are measured)");
  return int(std::max<int64_t>(length / 2, lowest));
}

void check_head_settings(const HeadSettings& s, int length) {
  const int64_t lowest = lowest_first_query(s, length);
  if (s.from < lowest || s.from >= length)
    throw Error("heads: the first measured query (--from " + std::to_string(s.from) +
                ") must be in [sinks + recent + " + std::to_string(kMinMiddleKeys) + ", window length) = [" +
                std::to_string(lowest) + ", " + std::to_string(length) + "), so that " +
                std::to_string(kMinMiddleKeys) + " middle keys or more are measured");
}

// Attention that is not finite (activations that overflowed, or NaN or inf weights) is
// refused, as the engine refuses such logits: the table printed "-nan%" rows, exit 0.
static void check_attention_finite(const float* a, int keys, int head, int heads_per_layer, int query) {  // a: [keys]
  for (int p = 0; p < keys; ++p)
    if (!std::isfinite(a[p]))
      throw Error("heads: the attention of layer " + std::to_string(head / heads_per_layer) + " head " +
                  std::to_string(head % heads_per_layer) + " at position " + std::to_string(query) +
                  " is not finite: the model's activations overflowed, or its weights hold NaN or inf");
}

std::vector<HeadStats> head_stats(const Model& model, const std::vector<std::vector<int>>& windows,
                                  const HeadSettings& s) {
  const ModelConfig& c = model.config;
  const int heads = c.num_layers * c.num_heads;
  if (windows.empty()) throw Error("heads: no windows");
  const int length = int(windows[0].size());
  check_head_settings(s, length);

  std::vector<HeadStats> out(static_cast<size_t>(heads));
  int queries = 0;
  for (const std::vector<int>& w : windows) {
    if (int(w.size()) != length) throw Error("heads: windows of different lengths");
    PagedKvCache cache((length + 15) / 16, 16, MemoryStrategy::HolesOnly);
    KvStorage kv(c, cache.num_blocks(), 16);
    const int seq = cache.add_sequence();
    RunState state;
    forward(model, cache, kv, seq, state, w.data(), s.from);

    std::vector<float> row;   // [layer, head, table slots]: one query's probabilities (slot j = position j)
    ForwardOptions eager;
    eager.attention = AttentionPath::Eager;
    eager.prob_sums = &row;
    // Middle keys are those no query treats as sink or local: [sinks, from - recent).
    const int mid_end = s.from - s.recent;
    std::vector<std::vector<double>> received(size_t(heads), std::vector<double>(size_t(mid_end - s.sinks), 0.0));
    for (int q = s.from; q < length; ++q) {
      forward(model, cache, kv, seq, state, &w[q], 1, eager);
      const size_t table = row.size() / size_t(heads);
      for (int h = 0; h < heads; ++h) {
        const float* a = row.data() + size_t(h) * table;
        check_attention_finite(a, q + 1, h, c.num_heads, q);
        for (int p = 0; p < s.sinks; ++p) out[h].sink += a[p];
        for (int p = q - s.recent + 1; p <= q; ++p) out[h].local += a[p];
        for (int p = s.sinks; p < mid_end; ++p) received[h][p - s.sinks] += a[p];
      }
      ++queries;
    }
    for (int h = 0; h < heads; ++h) out[h].heavy += top_decile_share(received[h]);
  }
  for (HeadStats& h : out) {
    h.sink /= queries;
    h.local /= queries;
    h.heavy /= double(windows.size());
  }
  return out;
}

HeadStats uniform_head_stats(int length, const HeadSettings& s) {
  HeadStats u;
  for (int q = s.from; q < length; ++q) {
    u.sink += double(s.sinks) / (q + 1);
    u.local += double(s.recent) / (q + 1);
  }
  u.sink /= length - s.from;
  u.local /= length - s.from;
  // Every middle key gets the same from each query, so their top 10% hold exactly their
  // count's share: 10% of 220 keys, but 1 of 14 (7.1%) when --from leaves 14.
  const size_t middle = size_t(s.from - s.recent - s.sinks);
  u.heavy = double(top_decile(middle)) / double(middle);
  return u;
}

}  // namespace kvscope
