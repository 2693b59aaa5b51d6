#include "counters.h"

#include "sim/synthetic.h"

namespace kvscope::viz {

void Counters::count(const Event& e, const Occupancy& after) {
  switch (e.kind) {
    case EventKind::SlotWritten: {
      if (e.seq >= int(next_pos.size())) next_pos.resize(size_t(e.seq) + 1, 0);
      int64_t& next = next_pos[size_t(e.seq)];
      const int64_t blocks_before = (next + block_size - 1) / block_size;
      next = e.pos + 1;
      full_cache_blocks += (next + block_size - 1) / block_size - blocks_before;
      ++written;
      break;
    }
    case EventKind::SlotEvicted: ++evicted; break;
    case EventKind::SlotMoved: ++moved; break;
    case EventKind::RoundEnd: ++rounds; break;
    case EventKind::BlockAllocated:
    case EventKind::BlockFreed:
    case EventKind::RoundBegin: break;
  }
  blocks_in_use = after.blocks_in_use();
  if (blocks_in_use > peak_blocks) peak_blocks = blocks_in_use;
}

double Counters::expected_freed_fraction() const { return expected_blocks_freed(evicted_fraction(), block_size); }

}  // namespace kvscope::viz
