// Counters: every number the app shows about a run, and where it comes from.
//
// They are counted from the events as the timeline applies them, plus the
// replayed Occupancy (cache/occupancy.h) for what is in use now. The definitions
// are those of `kvscope simulate` and the engine's SequenceStats, so the app
// and the command line agree to the digit at the end of a run:
//
//   tokens written     SlotWritten events (= the positions used, all sequences)
//   tokens evicted     SlotEvicted events inside an eviction round (RoundBegin to
//                      RoundEnd of that sequence): the policy's choice;
//                      evicted % = evicted / written
//   tokens released    SlotEvicted events outside a round: a sequence given up whole
//                      (its request finished, or was preempted; release_sequence)
//   live tokens        written - evicted - released
//   full-cache blocks  per sequence not released, ceil(positions used / block_size),
//                      summed: what the same live sequences would hold with no eviction
//   blocks in use      Occupancy::blocks_in_use() (the pool's blocks owned by a sequence)
//   blocks freed %     1 - blocks in use / full-cache blocks (none before a token is
//                      written, or when every sequence written was released: nothing to compare)
//   freed on average   blocks freed %, taken after every SlotWritten event and averaged:
//                      a served run's summary, since at its end every request is released
//   memory in use      blocks in use x block_size x bytes per token
//   bytes reclaimed    (full-cache blocks - blocks in use) x block_size x bytes per token
//   bytes moved        SlotMoved events x bytes per token (compaction's copies)
//   rounds             RoundEnd events
//   expected freed     (evicted %)^block_size: the law for random eviction with holes, nothing protected
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "cache/events.h"
#include "cache/occupancy.h"

namespace kvscope::viz {

struct Counters {
  int block_size = 16;
  int64_t bytes_per_token = 0;

  std::vector<int64_t> next_pos;      // [seq] one past the last position written
  std::vector<uint8_t> in_round;      // [seq] between its RoundBegin and RoundEnd
  std::vector<uint8_t> released_seq;  // [seq] released: its tokens and blocks are gone
  int64_t written = 0;                // SlotWritten events
  int64_t evicted = 0;                // SlotEvicted events inside a round
  int64_t released = 0;               // SlotEvicted events outside a round
  int64_t moved = 0;                  // SlotMoved events
  int64_t full_cache_blocks = 0;      // sum over sequences not released of ceil(next_pos / block_size)
  int blocks_in_use = 0;              // from the Occupancy after the event
  int peak_blocks = 0;                // the most blocks in use so far
  int rounds = 0;                     // RoundEnd events
  double freed_sum = 0;               // blocks_freed_fraction() summed after each SlotWritten event

  Counters() = default;
  Counters(int block_size_, int64_t bytes_per_token_) : block_size(block_size_), bytes_per_token(bytes_per_token_) {}

  // Counts one event; `after` is the occupancy with the event applied.
  void count(const Event& e, const Occupancy& after);

  int64_t live() const { return written - evicted - released; }
  // NaN (shown as "-") before a token is written: no share of nothing.
  double evicted_fraction() const { return written ? double(evicted) / double(written) : NAN; }
  // Tokens were written, and every sequence that wrote them has been released.
  bool all_released() const { return written > 0 && full_cache_blocks == 0; }
  // Not below 0: between a block's allocation and its first token the cache
  // holds one block more than the tokens written so far need. NaN (shown as "-",
  // a gap in the chart) before a token is written, and once every sequence is
  // released: nothing is held to compare (it read "0.0% of 0").
  double blocks_freed_fraction() const {
    if (full_cache_blocks == 0) return NAN;
    return blocks_in_use < full_cache_blocks ? 1.0 - double(blocks_in_use) / double(full_cache_blocks) : 0.0;
  }
  // Averaged over the tokens written so far: a written token is one step of one
  // sequence's work, so each moment of the run weighs as much work as was done in it.
  double mean_freed_fraction() const { return written ? freed_sum / double(written) : NAN; }
  double expected_freed_fraction() const;  // (evicted fraction)^block_size
  int64_t bytes_per_block() const { return int64_t(block_size) * bytes_per_token; }
  int64_t memory_in_use() const { return int64_t(blocks_in_use) * bytes_per_block(); }
  int64_t bytes_reclaimed() const {
    return full_cache_blocks > blocks_in_use ? (full_cache_blocks - blocks_in_use) * bytes_per_block() : 0;
  }
  int64_t bytes_moved() const { return moved * bytes_per_token; }
  int64_t next_position(int seq) const { return seq >= 0 && seq < int(next_pos.size()) ? next_pos[size_t(seq)] : 0; }
};

}  // namespace kvscope::viz
