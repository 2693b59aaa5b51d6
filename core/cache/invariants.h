// The invariants of a paged KV cache, checked from the outside.
//
// PagedKvCache keeps three structures that must agree: the pool (which blocks
// are free), the block tables (which blocks each sequence reads, in order) and
// the slot map (which position each slot holds). A bug in eviction or compaction
// shows up as a disagreement between them long before it shows up as a wrong
// token, so tests call check_invariants after every operation.
//
//   ownership  every block in a table is allocated (ref count 1: no sharing),
//              owned by that sequence, and in no other table; a free block has
//              no owner and no live slot; no allocated block is missing from
//              every table (a leak); pool used == sum of table sizes
//   fullness   a block in a table holds at least one live token: a block whose
//              slots are all empty goes back to the pool at once
//   tail       tail_used in [1, block_size] when the table is not empty; the
//              slots past it are empty: never written, or emptied by compaction's
//              moves (the next appends go there)
//   counts     the live slots of a sequence == its `live`
//   positions  unique within a sequence, each in [0, next_pos); under HolesOnly
//              and Compact strictly increasing along the table (token order);
//              under ReuseHoles a new token may sit in an old hole, so not
//   holes      ReuseHoles: exactly the empty written slots of the sequence's own
//              blocks, the first in table order at the back (filled next);
//              the other strategies keep no holes list
//
// One rule needs to know what happened, not just the state: no token a policy
// kept is ever lost. check_kept compares the live positions with the ones the
// caller expects (what the policy kept, plus what was appended since); the
// engine runs it after every eviction round, the tests after every operation.
#pragma once

#include <cstdint>
#include <vector>

#include "cache/kv_cache.h"

namespace kvscope {

// Throws kvscope::Error with a one-line message naming the sequence, block or
// slot and the broken rule, e.g.
// "invariant: sequence 2: block 7 holds no live token but is still in the table".
void check_invariants(const PagedKvCache& cache);

// Throws unless the live positions of `seq` are exactly `expected` (any order,
// each once): "invariant: sequence 2: position 77 was kept but is no longer live",
// "... position 80 is live but was not kept", or "... position 5 is listed twice
// among the kept" (the caller's list is wrong).
void check_kept(const PagedKvCache& cache, int seq, std::vector<int64_t> expected);

}  // namespace kvscope
