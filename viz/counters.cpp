#include "counters.h"

#include <algorithm>

#include "sim/synthetic.h"

namespace kvscope::viz {

void Counters::count(const Event& e, const Occupancy& after) {
  const size_t seq = size_t(std::max(e.seq, 0));
  if (seq >= next_pos.size()) {
    next_pos.resize(seq + 1, 0);
    in_round.resize(seq + 1, 0);
    released_seq.resize(seq + 1, 0);
  }
  auto blocks_of = [&](int64_t positions) { return blocks_for_tokens(positions, block_size); };
  switch (e.kind) {
    case EventKind::SlotWritten: {
      int64_t& next = next_pos[seq];
      const int64_t blocks_before = blocks_of(next);
      next = e.pos + 1;
      full_cache_blocks += blocks_of(next) - blocks_before;
      ++written;
      break;
    }
    case EventKind::SlotEvicted:
      if (in_round[seq]) {
        ++evicted;
        break;
      }
      ++released;
      if (!released_seq[seq]) {  // the sequence's first token to go: a full cache lets go of it too
        released_seq[seq] = 1;
        full_cache_blocks -= blocks_of(next_pos[seq]);
      }
      break;
    case EventKind::SlotMoved: ++moved; break;
    case EventKind::RoundBegin: in_round[seq] = 1; break;
    case EventKind::RoundEnd:
      in_round[seq] = 0;
      ++rounds;
      break;
    case EventKind::BlockAllocated:
    case EventKind::BlockFreed: break;
  }
  blocks_in_use = after.blocks_in_use();
  if (blocks_in_use > peak_blocks) peak_blocks = blocks_in_use;
  // Never NaN here: the writing sequence holds its token (a replay refuses a
  // released sequence that appears again).
  if (e.kind == EventKind::SlotWritten) freed_sum += blocks_freed_fraction();
}

double Counters::expected_freed_fraction() const { return expected_blocks_freed(evicted_fraction(), block_size); }

}  // namespace kvscope::viz
