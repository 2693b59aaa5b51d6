// Timeline: moving through one recorded run. No drawing here.
//
// A Timeline holds one recorded Run and a cursor: the number of its events
// applied so far. The state at the cursor is an Occupancy (cache/occupancy.h)
// replayed from the events, and the Counters (counters.h) counted from them.
// Moving forward applies events; moving back restores the nearest snapshot
// before the target and replays from there, so any cursor shows exactly what
// a replay from the start would.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "cache/occupancy.h"
#include "counters.h"
#include "run.h"

namespace kvscope::viz {

// What one step moves over.
enum class Unit {
  Event,  // one event
  Token,  // to just after the next token written
  Round,  // to just after the next round's end
  Move,   // to just after the next compaction move
};

// What a token of the sequence is at the cursor: not written yet, live in the cache,
// evicted by a round of its policy, or released: gone with its sequence when a served
// request finished or was preempted (not the policy's choice). The sequence strip's colours.
enum class TokenState { Future, Live, Evicted, Released };

// What a slot of the pool is at the cursor: its block free in the pool, a live token,
// a hole (written since its block was allocated, now empty) or room (not written yet:
// the tail of a sequence's last block). The pool's colours, and what --verify expects.
enum class SlotState { Free, Live, Hole, Room };

class Timeline {
 public:
  explicit Timeline(std::shared_ptr<const Run> run);  // replays once (checks the events; throws kvscope::Error)

  const Run& run() const { return *run_; }
  size_t size() const { return run_->events.size(); }
  size_t cursor() const { return cursor_; }  // events applied, 0 .. size()
  const Occupancy& occupancy() const { return occ_; }
  const Counters& counters() const { return counters_; }
  const Event& event(size_t i) const { return run_->events[i]; }

  // Puts the cursor at `to` (clamped to size()).
  void seek(size_t to);

  // The cursor one step of `unit` forward from `from` (just after the next such
  // event), or back (just after the previous such event before the one at
  // from - 1; 0 when none; by move, from just after a move, just before it).
  size_t next(Unit unit, size_t from) const;
  size_t prev(Unit unit, size_t from) const;

  // Logical events (written, evicted, round begin/end): the same list under every
  // memory strategy of one schedule, for keeping two runs in step.
  size_t logical_count(size_t cursor) const;   // logical events among the first `cursor`
  size_t cursor_for_logical(size_t n) const;   // just before the (n+1)-th logical event
  size_t logical_size() const { return logical_.size(); }
  // Whether `other` has the same logical events: kind, sequence and position, one
  // by one, except that the tokens of one run of evictions may come in any order.
  bool same_logical_events(const Timeline& other) const;
  // Tokens written (SlotWritten events): among the first `cursor`, in the whole run,
  // and the cursor just before the (n+1)-th of them (size() when there is none).
  size_t write_count(size_t cursor) const;
  size_t write_total() const { return writes_.size(); }
  size_t cursor_for_write(size_t n) const;
  size_t moves() const { return moves_.size(); }  // SlotMoved events in the run
  size_t rounds() const { return round_ends_.size(); }
  const std::vector<size_t>& round_end_events() const { return round_ends_; }
  // Per sequence, the positions it has used by the end of the run.
  const std::vector<int64_t>& final_lengths() const { return final_lengths_; }

  // Compaction batches: the runs of consecutive SlotMoved events.
  // The batch that starts at or after `from`: [begin, end); {size, size} if none.
  std::pair<size_t, size_t> next_batch(size_t from) const;
  // The next event at or after `from` where playback stops to teach: a round's
  // begin or end, or the first move of a batch. size() if none.
  size_t next_stop(size_t from) const;

  // The round the cursor is in (1-based), 0 before the first; and what it is doing.
  int round_number() const { return counters_.rounds + (in_round_ ? 1 : 0); }
  bool in_round() const { return in_round_; }
  std::string phase() const;  // "writing tokens", "round 3: evicting", "round 3: evicted", "round 3: compacting", ...

  // Whether the slot has held a token since its block was allocated: an empty
  // slot that has is a hole (evicted, or moved away); one that has not is room
  // the sequence has not written yet (the tail of its last block).
  bool used(int block, int slot) const { return used_[size_t(block) * size_t(occ_.block_size()) + size_t(slot)] != 0; }

  // Whether a round of its sequence (the policy) had evicted (seq, pos) by the cursor;
  // a token gone without one went with its sequence (a request done or preempted).
  bool evicted_by_policy(int seq, int64_t pos) const;

  TokenState token_state(int seq, int64_t pos) const;
  SlotState slot_state(int block, int slot) const;

  // Where each live token sits: the slot of (seq, pos), or {-1, -1} when not live.
  // Built from the occupancy on first use after the cursor moves.   O(slots + positions written)
  SlotRef locate(int seq, int64_t pos) const;

 private:
  struct Snapshot {
    size_t cursor;
    Occupancy occ;
    Counters counters;
    std::vector<uint8_t> used;
    bool in_round;
    bool moved_in_round;
  };
  void apply(const Event& e);
  void build_index();
  void note_policy_eviction(size_t i);
  std::vector<std::tuple<EventKind, int32_t, int64_t>> logical_keys() const;

  std::shared_ptr<const Run> run_;
  Occupancy occ_;
  Counters counters_;
  std::vector<uint8_t> used_;  // [num_blocks * block_size] see used()
  size_t cursor_ = 0;
  bool in_round_ = false;
  bool moved_in_round_ = false;
  std::vector<Snapshot> snapshots_;  // ascending cursors, the first at 0
  std::vector<int64_t> final_lengths_;
  std::vector<std::vector<size_t>> evicted_in_round_;  // [seq][pos] the event that did, SIZE_MAX: none

  // Event indices by kind, ascending.
  std::vector<size_t> writes_, round_begins_, round_ends_, moves_, batch_starts_, logical_;

  mutable size_t located_at_ = SIZE_MAX;          // the cursor `where_` was built for
  mutable std::vector<std::vector<SlotRef>> where_;  // [seq][pos]
};

// The run's scores at the timeline's cursor, fitted to one sample of its live tokens
// (the slots of the pool at an even stride, up to 8,192): the pool and the sequence strip
// shade a token alike.
ScoresAt scores_for_shading(const Timeline& t);

}  // namespace kvscope::viz
