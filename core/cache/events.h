// Events: every change to the paged cache, as a plain record.
//
// The cache appends one Event per mutation to an EventLog when it has one. The
// visualiser, the tutorials and the invariant tests all read this one stream, and
// a recorded stream replays the cache's occupancy exactly (cache/occupancy.h);
// cache/trace.h writes and reads one on disk.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvscope {

enum class EventKind : uint8_t {
  BlockAllocated,  // `block` taken from the pool for sequence `seq`
  BlockFreed,      // `block` returned to the pool
  SlotWritten,     // the token at position `pos` written into (block, slot)
  SlotEvicted,     // the token at `pos` dropped from (block, slot): the slot is a hole
  SlotMoved,       // the token at `pos` moved from (from_block, from_slot) to (block, slot)
  RoundBegin,      // an eviction round of `seq` starts; `pos` = live tokens before it
  RoundEnd,        // the round is over (evictions and compaction done); `pos` = live tokens after
};

const char* event_name(EventKind kind);

struct Event {
  EventKind kind;
  int32_t seq = -1;
  int32_t block = -1, slot = -1;            // where (the destination of a move)
  int32_t from_block = -1, from_slot = -1;  // the source of a move
  int64_t pos = -1;                         // the token's absolute position (or a count, for rounds)
};

using EventLog = std::vector<Event>;

// One event in words, for messages and debugging: "slot_moved seq 0 block 2 slot 0 <- block 5 slot 3 pos 81".
std::string describe(const Event& e);

}  // namespace kvscope
