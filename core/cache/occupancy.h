// Occupancy: a trace replayed, the paged cache's state at any event.
//
// Replaying the events from the start rebuilds which token sits in which slot and
// which sequence owns which block: the visualiser's grid and counters read it, and
// scrubbing is "replay up to event i". Each event is checked as it is applied, so
// a replay is also the invariant checker of every recorded run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cache/events.h"
#include "cache/trace.h"

namespace kvscope {

// Sequence ids are handed out 0, 1, 2, ...: a larger one in a trace is a corrupt
// stream, refused before a replay allocates per-sequence state for it.
constexpr int kMaxSequenceId = 1 << 20;

// The replayed state of a paged cache: per physical slot the position it holds
// (kEmpty when none), per block its owning sequence (-1 when free), per sequence
// its live count and block table. It mirrors PagedKvCache exactly, and checks
// every event as it goes, so a replay doubles as an invariant checker:
//
//   - a block is allocated only when free
//   - a slot is written only when empty, in a block its sequence owns, and each
//     sequence writes strictly increasing positions (next_pos only grows)
//   - an eviction or a move names the position the slot really holds, and a
//     move's destination is empty
//   - a block is freed only by its owner and only once every slot in it is
//     empty: even a released sequence's tokens are evicted (events) first
//   - round markers pair up and carry the sequence's live count
//
// What depends on the memory strategy is not checked here (the header's strategy is
// not read): token order across a table, writes into holes under holes only, no
// empty block left in a table after a round. check_invariants (invariants.h) checks
// those on a live cache.
class Occupancy {
 public:
  Occupancy(int num_blocks, int block_size);
  explicit Occupancy(const TraceHeader& header) : Occupancy(header.num_blocks, header.block_size) {}

  // Applies one event; throws kvscope::Error saying what is wrong with it.
  void apply(const Event& e);
  // Throws if the stream stopped half-way through a round (a begin with no end).
  void check_finished() const;

  int num_blocks() const { return int(owner_.size()); }
  int block_size() const { return block_size_; }
  int64_t position(int block, int slot) const { return slot_pos_[size_t(block) * block_size_ + slot]; }
  int owner(int block) const { return owner_[block]; }  // sequence id, or -1 when free
  int live_in_block(int block) const { return block_live_[block]; }
  int blocks_in_use() const { return blocks_in_use_; }
  int num_sequences() const { return int(seqs_.size()); }  // ids seen so far
  int live(int seq) const;                                 // 0 for an id never seen
  // The sequence's block table: its blocks in allocation order, the order the
  // cache keeps them in (it appends on allocation and never reorders).
  // O(num_blocks + k log k) for a sequence of k blocks.
  std::vector<int> table(int seq) const;
  size_t events_applied() const { return applied_; }

 private:
  struct SeqInfo {
    int live = 0;           // slots holding a token
    int blocks = 0;         // blocks owned
    int64_t last_pos = -1;  // the last position written
    bool in_round = false;
  };

  SeqInfo& seq_info(int seq);
  size_t index(int block, int slot) const { return size_t(block) * block_size_ + slot; }
  void check_owned(const Event& e, int block) const;
  void allocate(const Event& e);
  void write(const Event& e);
  void evict(const Event& e);
  void move(const Event& e);
  void free(const Event& e);
  void round(const Event& e, bool begin);

  int block_size_;
  std::vector<int64_t> slot_pos_;      // [num_blocks * block_size]  position held, or kEmpty
  std::vector<int> owner_;             // [num_blocks]  owning sequence, -1 when free
  std::vector<int> block_live_;        // [num_blocks]  live slots in the block
  std::vector<uint64_t> alloc_order_;  // [num_blocks]  when the block was allocated (table order)
  std::vector<SeqInfo> seqs_;          // [sequence ids seen]
  uint64_t allocations_ = 0;
  int blocks_in_use_ = 0;
  size_t applied_ = 0;
};

// Replays the first `upto` events (all by default) from an empty cache. An error
// names the event: "event 812: slot_written seq 0 block 3 slot 5 pos 77: ...".
// With upto < size, a round cut in half is not an error (scrubbing).
Occupancy replay(const TraceHeader& header, const EventLog& events, size_t upto = SIZE_MAX);

}  // namespace kvscope
