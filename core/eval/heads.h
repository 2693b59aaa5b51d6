// What each attention head does: the structure that eviction relies on.
//
// For every query at positions [from, length) of each window (full cache, eager
// attention, one query at a time), per layer and query head:
//
//   sink   = sum of a(q, p) over the first `sinks` positions p      (attention sinks)
//   local  = sum of a(q, p) over the newest `recent` positions       (local heads)
//   heavy  = of the attention to the middle keys, [sinks, from - recent), which
//            no query measured counts as sink or local, the share that the top
//            10% of them by total received attention get             (heavy hitters)
//
// sink and local averaged over queries; heavy from each window's totals (the
// attention every middle key received from all its queries), averaged over
// windows. A head that spread its attention evenly would have
// sink = sinks/q, local = recent/q and heavy = 10%. That baseline ignores distance:
// a head that only favoured nearer keys would score above 10% on heavy too.
#pragma once

#include <vector>

#include "model/weights.h"

namespace kvscope {

struct HeadStats {
  double sink = 0, local = 0, heavy = 0;
};

struct HeadSettings {
  int from = 256;    // first query position measured
  int sinks = 4;
  int recent = 32;
};

// kvscope::Error unless sinks, recent >= 0 and sinks + recent + kMinMiddleKeys <= from
// < length (the window length): the queries measured must see every sink, a full
// recent window and at least kMinMiddleKeys middle keys.
constexpr int kMinMiddleKeys = 10;
void check_head_settings(const HeadSettings& settings, int length);
// The first query measured when none is asked for: half of the window, but no
// lower than that. kvscope::Error, as above, when the window leaves no query.
int default_first_query(const HeadSettings& settings, int length);

// [layer * num_heads + head]. windows: token ids, all of one length > from.
std::vector<HeadStats> head_stats(const Model& model, const std::vector<std::vector<int>>& windows,
                                  const HeadSettings& settings);

// What the statistics would be for a head attending evenly to every earlier token.
HeadStats uniform_head_stats(int length, const HeadSettings& settings);

}  // namespace kvscope
