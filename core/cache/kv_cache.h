// PagedKvCache: which token lives in which slot of which block.
//
// This is the bookkeeping half of a vLLM-style paged cache, kept on the host: a
// BlockPool of physical blocks of `block_size` slots, a block table per sequence
// (logical block i -> physical block), and for every slot the absolute position
// of the token it holds, or kEmpty. The K/V numbers themselves live in a
// KvStorage (cache/kv_storage.h) on the CPU, or in GPU memory (kernels/cuda_backend.h,
// behind the interface in model/backend.h);
// the cache tells the storage which slots to write and which to move.
//
// Two lengths per sequence, never confused:
//   next_pos  the absolute position of the next token (RoPE); only grows
//   live      the slots that hold a token: what attention reads and budgets count
//
// After eviction the strategy decides what happens to the holes:
//   HolesOnly   a block returns to the pool only when every slot in it is empty
//   ReuseHoles  new tokens are written into holes first; the cache leaves token
//               order, and every read relies on the recorded positions
//   Compact     survivors slide forward in token order, whole tail blocks return
//               (the cache plans and commits the slide, plan_compaction and
//               commit_compaction; the engine or the simulator calls them after a
//               round and moves the bytes between: until then Compact holds its
//               holes as HolesOnly does)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cache/block_pool.h"
#include "cache/events.h"

namespace kvscope {

enum class MemoryStrategy { HolesOnly, ReuseHoles, Compact };
const char* strategy_name(MemoryStrategy s);           // "holes", "reuse", "compact"
MemoryStrategy parse_strategy(const std::string& name);  // throws kvscope::Error

constexpr int64_t kEmpty = -1;  // the position of a slot that holds no token
constexpr int kMaxBlockSize = 256;
// kvscope::Error "block size must be between 1 and 256, got N" for a size outside that range.
void check_block_size(int block_size);
// Blocks that `tokens` positions fill: ceil(tokens / block_size). With a sequence's
// positions used so far, its full-cache blocks: what it would hold with no eviction.
constexpr int64_t blocks_for_tokens(int64_t tokens, int block_size) { return (tokens + block_size - 1) / block_size; }

struct SlotRef {
  int block = -1;  // physical block
  int slot = -1;   // 0 .. block_size-1
  bool operator==(const SlotRef&) const = default;
};

// One step of a compaction plan: the token at `pos` goes from `from` to `to`.
// A plan lists moves by destination, and each destination comes before its source
// in the sequence's logical order. Executed in order, a move never overwrites a
// token still waiting to move: its destination is a hole or a source already read.
struct Move {
  SlotRef from, to;
  int64_t pos = kEmpty;
  bool operator==(const Move&) const = default;
};

struct Sequence {
  std::vector<int> blocks;     // the block table: logical block i -> physical block
  int tail_used = 0;           // slots written so far in the last block of the table
  int64_t next_pos = 0;        // absolute position of the next token
  int live = 0;                // slots holding a token
  std::vector<SlotRef> holes;  // ReuseHoles: holes to fill, the next one at the back
  bool active = false;
};

class PagedKvCache {
 public:
  // block_size in [1, 256]; num_blocks >= 1. `log` (optional) receives every event.
  // kvscope::Error, before anything is allocated, when its tables (table_bytes) do
  // not fit in the available memory.
  PagedKvCache(int num_blocks, int block_size, MemoryStrategy strategy, EventLog* log = nullptr);
  // The bytes of the cache's own tables: a position per slot, and per block the
  // pool's count and queue entry and its owner. (The K/V numbers are KvStorage's.)
  static size_t table_bytes(int num_blocks, int block_size);
  static std::string describe(int num_blocks, int block_size);  // "the cache's slot table (N blocks of B slots, ...)"

  int add_sequence();                // a new, empty sequence; returns its id
  void release_sequence(int seq);    // frees all its blocks

  // The slot for the sequence's next token (at next_pos), allocating a block when
  // the tail block is full (or, under ReuseHoles, filling a hole first).
  // Throws kvscope::PoolExhausted when the pool is exhausted; nothing changes then.
  SlotRef append(int seq);
  // How many more tokens append(seq) can place: tail room, holes it may reuse,
  // and every free block of the pool (which other sequences share).
  int64_t room(int seq) const;
  // How many free blocks of the pool T more tokens of `seq` would take: none while
  // they fit in its tail (and, under ReuseHoles, its holes). T <= room(seq) exactly
  // when blocks_needed(seq, T) <= pool().num_free().
  int64_t blocks_needed(int seq, int64_t T) const;

  // Drops the tokens at `positions` from the sequence; their slots become holes.
  // Blocks left with no live slot go back to the pool (under every strategy).
  // Throws if a position is not live in the sequence (nothing changes then).
  void evict(int seq, const std::vector<int64_t>& positions);

  // Compaction, in two steps so the K/V storage can move the bytes in between:
  // the plan slides every live token to the front of the table in logical order;
  // commit records the new places and frees the blocks past the last survivor. It
  // takes only the plan plan_compaction would make now (kvscope::Error "stale plan",
  // nothing changed, for one made before an append or eviction, or cut short).
  std::vector<Move> plan_compaction(int seq) const;
  void commit_compaction(int seq, const std::vector<Move>& plan);

  // Round markers in the event stream (the engine's eviction rounds).
  void begin_round(int seq);
  void end_round(int seq);

  // Reading.
  int64_t position(SlotRef s) const { return slot_pos_[index(s)]; }
  const Sequence& sequence(int seq) const;              // throws for an unknown or released id
  // Slots written in table block i of `s`: all block_size of a full block, tail_used of the last.
  int slots_written(const Sequence& s, size_t i) const { return i + 1 == s.blocks.size() ? s.tail_used : block_size_; }
  bool has_sequence(int seq) const;                      // added and not released
  std::vector<int64_t> live_positions(int seq) const;  // in logical (table) order
  int slots_in_table(int seq) const;                    // written slots: live + holes
  const BlockPool& pool() const { return pool_; }
  int block_size() const { return block_size_; }
  int num_blocks() const { return pool_.num_blocks(); }
  MemoryStrategy strategy() const { return strategy_; }
  int owner(int block) const { return owner_[block]; }  // sequence id, or -1 when free
  int num_sequences() const { return int(seqs_.size()); }

 private:
  size_t index(SlotRef s) const { return size_t(s.block) * block_size_ + s.slot; }
  Sequence& seq_ref(int seq);
  void emit(const Event& e) {
    if (log_) log_->push_back(e);
  }
  void free_block(int seq, int block);
  void free_empty_blocks(int seq);                        // evict's: blocks left with no live slot
  std::vector<SlotRef> holes_of(const Sequence& s) const;  // evict's, under ReuseHoles: Sequence::holes

  BlockPool pool_;
  int block_size_;
  MemoryStrategy strategy_;
  EventLog* log_;
  std::vector<int64_t> slot_pos_;  // [num_blocks * block_size]  position held, or kEmpty
  std::vector<int> owner_;         // [num_blocks]  owning sequence, -1 when free
  std::vector<Sequence> seqs_;
};

}  // namespace kvscope
