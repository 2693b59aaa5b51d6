// Traces: the cache's event stream on disk, and its replay.
//
// A trace is what the visualiser draws and what a test replays: every change the
// paged cache made (cache/events.h), in order. Replaying the events from the
// start rebuilds the occupancy (which token sits in which slot, which sequence
// owns which block) at any event: scrubbing is "replay up to event i".
//
// File format, version 1:
//
//   kvscope-trace 1 block_size=16 num_blocks=1000 strategy=holes events=123456 policy=random ...\n
//   events x 26 bytes, little-endian, no padding:
//
//     offset  type  field
//      0      u8    kind        EventKind: 0 block_allocated ... 6 round_end
//      1      u8    reserved    0
//      2      i16   slot        -1 when the event has none
//      4      i16   from_slot   the source of a move, else -1
//      6      i32   seq
//     10      i32   block       -1 for round markers
//     14      i32   from_block  the source of a move, else -1
//     18      i64   pos         the token's position (a live count for rounds)
//
// The header is one line of text so `head -1 trace.bin` tells what a file holds;
// metadata values are percent-escaped (space -> %20, % -> %25, newline -> %0A).
// Records are fixed-size so event i sits at a known offset, and 26 bytes is small
// enough: a 1M-token streaming run (budget 2048, slack 512, random, compact) makes
// 6.1M events, a 159 MB file, read in 0.6 s and replayed in 0.1 s (15 ns an event).
// Text would take 30-40 bytes an event and a parser; a varint stream would be
// smaller but gives up the fixed offsets.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cache/events.h"
#include "cache/kv_cache.h"

namespace kvscope {

constexpr int kTraceRecordBytes = 26;

struct TraceHeader {
  int block_size = 16;
  int num_blocks = 0;
  MemoryStrategy strategy = MemoryStrategy::HolesOnly;
  std::map<std::string, std::string> meta;  // free-form: policy, budget, source, seed, ...
};

struct Trace {
  TraceHeader header;
  EventLog events;
};

// Writes the header line and the events. Throws kvscope::Error naming the file
// when it cannot be written, or when a metadata key is not a plain word.
void write_trace(const std::string& path, const TraceHeader& header, const EventLog& events);

// Optional metadata: the tokens a sequence holds, so a viewer can show its text.
// "tokens.S" (S a sequence id) lists sequence S's token ids in position order,
// comma-separated: "tokens.0=785,2038,4688". kvscope generate and serve-bench write
// it; the ids become text with the tokenizer of the model the header names ("model").
std::string token_ids_value(const std::vector<int>& ids);  // {785, 2038} -> "785,2038"
// The header's "tokens.S" entries, by sequence id. Throws kvscope::Error naming
// `path` when a key's S is not a sequence id or a value is not a list of ids.
std::map<int, std::vector<int>> trace_token_ids(const TraceHeader& header, const std::string& path);

// Reads and checks a trace: the magic and version, the header fields, the event
// count against the file size (a file cut short), every record's kind and ranges
// (block in [0, num_blocks), slot in [0, block_size), -1 where a field is unused).
// Any problem is a one-line kvscope::Error "FILE: what". The events are not
// replayed here: Occupancy checks that they make sense together.
Trace read_trace(const std::string& path);

// The replayed state of a paged cache: per physical slot the position it holds
// (kEmpty when none), per block its owning sequence (-1 when free), per sequence
// its live count and block table. It mirrors PagedKvCache exactly, and checks
// every event as it goes, so a replay doubles as an invariant checker:
//
//   - a block is allocated only when free, and freed only by its owner
//   - a slot is written only when empty, in a block its sequence owns, and each
//     sequence writes strictly increasing positions (next_pos only grows)
//   - an eviction or a move names the position the slot really holds, and a
//     move's destination is empty
//   - a block is freed only once every slot in it is empty, except when its
//     sequence is released: then the sequence frees its blocks one after the
//     other with nothing else in between, and never appears again
//   - round markers pair up and carry the sequence's live count
class Occupancy {
 public:
  Occupancy(int num_blocks, int block_size);
  explicit Occupancy(const TraceHeader& header) : Occupancy(header.num_blocks, header.block_size) {}

  // Applies one event; throws kvscope::Error saying what is wrong with it.
  void apply(const Event& e);
  // Throws if the stream stopped half-way through something (a release, a round).
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
  // cache keeps them in (it appends on allocation and never reorders).   O(num_blocks)
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
// names the event: "event 812 (slot_written seq 0 block 3 slot 5 pos 77): ...".
// With upto < size, a release or round cut in half is not an error (scrubbing).
Occupancy replay(const TraceHeader& header, const EventLog& events, size_t upto = SIZE_MAX);

// One event in words, for messages and debugging: "slot_moved seq 0 block 2 slot 0 <- block 5 slot 3 pos 81".
std::string describe(const Event& e);

}  // namespace kvscope
