// The trace a command writes when the pool refuses a step (generate --trace,
// serve-bench --trace): what the app is given to show the pool that stopped the run.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "cache/occupancy.h"
#include "cache/trace.h"

namespace kvscope::test {

// The trace at `path` replays; its pool of `num_blocks` is full of holes under
// --strategy holes (every block held, some of their slots emptied); and sequence 0's
// tokens are every one written and the one the refused step would have fed.
inline void expect_the_trace_of_a_refused_run(const std::string& path, int num_blocks) {
  const Trace t = read_trace(path);
  EXPECT_EQ(t.header.strategy, MemoryStrategy::HolesOnly);
  const Occupancy end = replay(t.header, t.events);
  EXPECT_EQ(end.blocks_in_use(), num_blocks);
  int live = 0;
  for (int b = 0; b < num_blocks; ++b) live += end.live_in_block(b);
  EXPECT_LT(live, num_blocks * t.header.block_size);
  int64_t last = -1;  // the last position written
  for (const Event& e : t.events)
    if (e.kind == EventKind::SlotWritten) last = std::max(last, e.pos);
  EXPECT_EQ(int64_t(trace_token_ids(t.header, path).at(0).size()), last + 2);
}

}  // namespace kvscope::test
