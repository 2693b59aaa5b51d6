#include "cache/occupancy.h"

#include <algorithm>

#include "cache/kv_cache.h"
#include "util/error.h"

namespace kvscope {

Occupancy::Occupancy(int num_blocks, int block_size) : block_size_(block_size) {
  if (block_size < 1 || block_size > kMaxBlockSize || num_blocks < 1)
    throw Error("occupancy: needs num_blocks >= 1 and block_size in [1, " + std::to_string(kMaxBlockSize) + "]");
  slot_pos_.assign(size_t(num_blocks) * block_size, kEmpty);
  owner_.assign(size_t(num_blocks), -1);
  block_live_.assign(size_t(num_blocks), 0);
  alloc_order_.assign(size_t(num_blocks), 0);
}

int Occupancy::live(int seq) const { return seq >= 0 && seq < int(seqs_.size()) ? seqs_[seq].live : 0; }

std::vector<int> Occupancy::table(int seq) const {
  std::vector<int> blocks;
  for (int b = 0; b < num_blocks(); ++b)
    if (owner_[b] == seq) blocks.push_back(b);
  std::sort(blocks.begin(), blocks.end(), [&](int a, int b) { return alloc_order_[a] < alloc_order_[b]; });
  return blocks;
}

Occupancy::SeqInfo& Occupancy::seq_info(int seq) {
  if (seq < 0 || seq >= kMaxSequenceId) throw Error("sequence id " + std::to_string(seq) + " out of range");
  if (seq >= int(seqs_.size())) seqs_.resize(size_t(seq) + 1);
  return seqs_[seq];
}

void Occupancy::check_owned(const Event& e, int block) const {
  if (block < 0 || block >= num_blocks()) throw Error("block " + std::to_string(block) + " out of range");
  if (owner_[block] != e.seq)
    throw Error("block " + std::to_string(block) +
                (owner_[block] < 0 ? " is free" : " belongs to sequence " + std::to_string(owner_[block])));
}

void Occupancy::apply(const Event& e) {
  try {
    seq_info(e.seq);  // checks the id
    const bool slot_event =
        e.kind == EventKind::SlotWritten || e.kind == EventKind::SlotEvicted || e.kind == EventKind::SlotMoved;
    if (slot_event && (e.slot < 0 || e.slot >= block_size_)) throw Error("slot out of range");
    if (e.kind == EventKind::SlotMoved && (e.from_slot < 0 || e.from_slot >= block_size_))
      throw Error("source slot out of range");
    switch (e.kind) {
      case EventKind::BlockAllocated: allocate(e); break;
      case EventKind::SlotWritten: write(e); break;
      case EventKind::SlotEvicted: evict(e); break;
      case EventKind::SlotMoved: move(e); break;
      case EventKind::BlockFreed: free(e); break;
      case EventKind::RoundBegin: round(e, true); break;
      case EventKind::RoundEnd: round(e, false); break;
      default: throw Error("unknown event kind " + std::to_string(int(e.kind)));
    }
  } catch (const Error& err) {
    throw Error(describe(e) + ": " + err.what());
  }
  ++applied_;
}

void Occupancy::allocate(const Event& e) {
  if (e.block < 0 || e.block >= num_blocks()) throw Error("block out of range");
  if (owner_[e.block] >= 0) throw Error("block is already owned by sequence " + std::to_string(owner_[e.block]));
  owner_[e.block] = e.seq;
  alloc_order_[e.block] = ++allocations_;
  ++seqs_[e.seq].blocks;
  ++blocks_in_use_;
}

void Occupancy::write(const Event& e) {
  check_owned(e, e.block);
  SeqInfo& s = seqs_[e.seq];
  int64_t& at = slot_pos_[index(e.block, e.slot)];
  if (at != kEmpty) throw Error("the slot already holds position " + std::to_string(at));
  // A sequence's tokens are written in order, 0, 1, 2, ...: a trace with a gap (position
  // 10^9 after 0) would make a replay's per-position tables that long (it took 8 GB).
  if (e.pos != s.last_pos + 1)
    throw Error("position written after " +
                (s.last_pos < 0 ? std::string("none") : "position " + std::to_string(s.last_pos)) +
                " (a sequence's positions are written 0, 1, 2, ... one after another)");
  at = e.pos;
  s.last_pos = e.pos;
  ++s.live;
  ++block_live_[e.block];
}

void Occupancy::evict(const Event& e) {
  check_owned(e, e.block);
  int64_t& at = slot_pos_[index(e.block, e.slot)];
  // An empty slot holds kEmpty (-1): "evict -1" from one must not pass as a match.
  if (at == kEmpty) throw Error("the slot is already empty");
  if (at != e.pos) throw Error("the slot holds position " + std::to_string(at));
  at = kEmpty;
  --seqs_[e.seq].live;
  --block_live_[e.block];
}

void Occupancy::move(const Event& e) {
  check_owned(e, e.from_block);
  check_owned(e, e.block);
  int64_t& from = slot_pos_[index(e.from_block, e.from_slot)];
  int64_t& to = slot_pos_[index(e.block, e.slot)];
  if (&from == &to) throw Error("a move onto its own slot");
  if (from == kEmpty) throw Error("the source slot is empty");  // whatever position the event names, -1 too
  if (from != e.pos) throw Error("the source slot holds position " + std::to_string(from));
  if (to != kEmpty) throw Error("the destination still holds position " + std::to_string(to));
  to = from;
  from = kEmpty;
  --block_live_[e.from_block];
  ++block_live_[e.block];
}

void Occupancy::free(const Event& e) {
  check_owned(e, e.block);
  SeqInfo& s = seqs_[e.seq];
  // A block returns to the pool only when empty: even a released sequence's
  // tokens are evicted (events) before its blocks are freed.
  if (const int live = block_live_[e.block]; live > 0)
    throw Error("the block still holds " + std::to_string(live) +
                " live slot(s) (a block returns to the pool only when empty)");
  owner_[e.block] = -1;
  --s.blocks;
  --blocks_in_use_;
}

void Occupancy::round(const Event& e, bool begin) {
  SeqInfo& s = seqs_[e.seq];
  if (begin == s.in_round) throw Error(begin ? "a round begins inside a round" : "a round ends that never began");
  if (e.pos != s.live)
    throw Error("the marker says " + std::to_string(e.pos) + " live tokens, the sequence has " +
                std::to_string(s.live));
  s.in_round = begin;
}

void Occupancy::check_finished() const {
  for (size_t q = 0; q < seqs_.size(); ++q) {
    if (seqs_[q].in_round) throw Error("the stream ends inside a round of sequence " + std::to_string(q));
  }
}

Occupancy replay(const TraceHeader& header, const EventLog& events, size_t upto) {
  Occupancy occ(header);
  const size_t n = std::min(upto, events.size());
  for (size_t i = 0; i < n; ++i) {
    try {
      occ.apply(events[i]);
    } catch (const Error& e) {
      throw Error("event " + std::to_string(i) + ": " + e.what());
    }
  }
  if (n == events.size()) occ.check_finished();
  return occ;
}

}  // namespace kvscope
