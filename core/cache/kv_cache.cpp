#include "cache/kv_cache.h"

#include <algorithm>
#include <unordered_set>

#include "util/error.h"
#include "util/memory_check.h"

namespace kvscope {

const char* strategy_name(MemoryStrategy s) {
  switch (s) {
    case MemoryStrategy::HolesOnly: return "holes";
    case MemoryStrategy::ReuseHoles: return "reuse";
    case MemoryStrategy::Compact: return "compact";
  }
  return "?";
}

MemoryStrategy parse_strategy(const std::string& name) {
  if (name == "holes") return MemoryStrategy::HolesOnly;
  if (name == "reuse") return MemoryStrategy::ReuseHoles;
  if (name == "compact") return MemoryStrategy::Compact;
  throw Error("unknown memory strategy \"" + name + "\" (choose holes, reuse or compact)");
}

void check_block_size(int block_size) {
  if (block_size < 1 || block_size > kMaxBlockSize)
    throw Error("block size must be between 1 and " + std::to_string(kMaxBlockSize) + ", got " + std::to_string(block_size));
}

size_t PagedKvCache::table_bytes(int num_blocks, int block_size) {
  return size_t(std::max(num_blocks, 0)) * (size_t(std::max(block_size, 0)) * sizeof(int64_t) + 3 * sizeof(int));
}

std::string PagedKvCache::describe(int num_blocks, int block_size) {
  return "the cache's slot table (" + std::to_string(num_blocks) + " blocks of " + std::to_string(block_size) +
         " slots, a position each)";
}

// The checks that come before the pool, the first member, allocates anything.
static int checked_num_blocks(int num_blocks, int block_size) {
  check_block_size(block_size);
  check_fits_in_memory(PagedKvCache::table_bytes(num_blocks, block_size),
                       PagedKvCache::describe(num_blocks, block_size));
  return num_blocks;
}

PagedKvCache::PagedKvCache(int num_blocks, int block_size, MemoryStrategy strategy, EventLog* log)
    : pool_(checked_num_blocks(num_blocks, block_size)), block_size_(block_size), strategy_(strategy), log_(log) {
  slot_pos_.assign(size_t(num_blocks) * block_size, kEmpty);
  owner_.assign(size_t(num_blocks), -1);
}

int PagedKvCache::add_sequence() {
  Sequence s;
  s.active = true;
  seqs_.push_back(std::move(s));
  return int(seqs_.size()) - 1;
}

bool PagedKvCache::has_sequence(int seq) const {
  return seq >= 0 && seq < int(seqs_.size()) && seqs_[seq].active;
}

Sequence& PagedKvCache::seq_ref(int seq) {
  if (seq < 0 || seq >= int(seqs_.size()) || !seqs_[seq].active) throw Error("no sequence " + std::to_string(seq));
  return seqs_[seq];
}

const Sequence& PagedKvCache::sequence(int seq) const { return const_cast<PagedKvCache*>(this)->seq_ref(seq); }

void PagedKvCache::free_block(int seq, int block) {
  for (int s = 0; s < block_size_; ++s) slot_pos_[index({block, s})] = kEmpty;
  owner_[block] = -1;
  pool_.free(block);
  emit({EventKind::BlockFreed, seq, block});
}

void PagedKvCache::release_sequence(int seq) {
  Sequence& s = seq_ref(seq);
  // Its tokens leave first (events a replay can check), then its blocks.
  for (int b : s.blocks) {
    for (int j = 0; j < block_size_; ++j)
      if (int64_t p = slot_pos_[index({b, j})]; p != kEmpty) emit({EventKind::SlotEvicted, seq, b, j, -1, -1, p});
    free_block(seq, b);
  }
  s = Sequence{};  // inactive; the id is not reused
}

int64_t PagedKvCache::room(int seq) const {
  const Sequence& s = sequence(seq);
  int64_t n = int64_t(pool_.num_free()) * block_size_;
  if (!s.blocks.empty()) n += block_size_ - s.tail_used;
  if (strategy_ == MemoryStrategy::ReuseHoles) n += int64_t(s.holes.size());
  return n;
}

int64_t PagedKvCache::blocks_needed(int seq, int64_t T) const {
  const Sequence& s = sequence(seq);
  int64_t n = T;  // tokens that do not fit in the sequence's own slots
  if (!s.blocks.empty()) n -= block_size_ - s.tail_used;
  if (strategy_ == MemoryStrategy::ReuseHoles) n -= int64_t(s.holes.size());
  return n <= 0 ? 0 : blocks_for_tokens(n, block_size_);
}

SlotRef PagedKvCache::append(int seq) {
  Sequence& s = seq_ref(seq);
  SlotRef at;
  if (strategy_ == MemoryStrategy::ReuseHoles && !s.holes.empty()) {
    at = s.holes.back();  // the first hole in logical order
    s.holes.pop_back();
  } else {
    if (s.blocks.empty() || s.tail_used == block_size_) {
      const int block = pool_.allocate();  // throws when exhausted, before any change
      owner_[block] = seq;
      s.blocks.push_back(block);
      s.tail_used = 0;
      emit({EventKind::BlockAllocated, seq, block});
    }
    at = {s.blocks.back(), s.tail_used++};
  }
  slot_pos_[index(at)] = s.next_pos;
  emit({EventKind::SlotWritten, seq, at.block, at.slot, -1, -1, s.next_pos});
  ++s.next_pos;
  ++s.live;
  return at;
}

void PagedKvCache::evict(int seq, const std::vector<int64_t>& positions) {
  Sequence& s = seq_ref(seq);
  std::unordered_set<int64_t> drop(positions.begin(), positions.end());
  if (drop.size() != positions.size()) throw Error("evict: a position is listed twice");
  if (drop.count(kEmpty)) throw Error("evict: positions are >= 0");

  // Find every position first, so that a bad request changes nothing.
  std::vector<SlotRef> slots;
  for (int b : s.blocks)
    for (int i = 0; i < block_size_; ++i)
      if (drop.count(slot_pos_[index({b, i})])) slots.push_back({b, i});
  if (slots.size() != drop.size()) throw Error("evict: a position is not live in sequence " + std::to_string(seq));

  for (SlotRef at : slots) {
    emit({EventKind::SlotEvicted, seq, at.block, at.slot, -1, -1, slot_pos_[index(at)]});
    slot_pos_[index(at)] = kEmpty;
  }
  s.live -= int(slots.size());
  free_empty_blocks(seq);
  if (strategy_ == MemoryStrategy::ReuseHoles) s.holes = holes_of(s);
}

// Blocks with no live slot go back to the pool, the tail block included.
void PagedKvCache::free_empty_blocks(int seq) {
  Sequence& s = seq_ref(seq);
  std::vector<int> kept;
  for (size_t i = 0; i < s.blocks.size(); ++i) {
    const int b = s.blocks[i];
    bool any_live = false;
    for (int j = 0; j < block_size_ && !any_live; ++j) any_live = slot_pos_[index({b, j})] != kEmpty;
    if (any_live) {
      kept.push_back(b);
    } else {
      if (i + 1 == s.blocks.size()) s.tail_used = block_size_;  // the tail is gone: next append takes a new block
      free_block(seq, b);
    }
  }
  s.blocks = std::move(kept);
}

// ReuseHoles: the holes to fill, first in logical order at the back of the stack.
std::vector<SlotRef> PagedKvCache::holes_of(const Sequence& s) const {
  std::vector<SlotRef> holes;
  for (size_t i = 0; i < s.blocks.size(); ++i) {
    const int used = slots_written(s, i);
    for (int j = 0; j < used; ++j)
      if (slot_pos_[index({s.blocks[i], j})] == kEmpty) holes.push_back({s.blocks[i], j});
  }
  std::reverse(holes.begin(), holes.end());
  return holes;
}

std::vector<Move> PagedKvCache::plan_compaction(int seq) const {
  const Sequence& s = sequence(seq);
  std::vector<Move> plan;
  int dest = 0;  // logical index of the next survivor's new home
  for (size_t i = 0; i < s.blocks.size(); ++i) {
    const int used = slots_written(s, i);
    for (int j = 0; j < used; ++j) {
      const int64_t pos = slot_pos_[index({s.blocks[i], j})];
      if (pos == kEmpty) continue;
      const SlotRef to{s.blocks[size_t(dest) / block_size_], dest % block_size_};
      if (to.block != s.blocks[i] || to.slot != j) plan.push_back({{s.blocks[i], j}, to, pos});
      ++dest;
    }
  }
  return plan;
}

void PagedKvCache::commit_compaction(int seq, const std::vector<Move>& plan) {
  // Only the plan plan_compaction makes now will do, checked before anything changes:
  // one made before an append or an eviction, or cut short, would overwrite live
  // tokens or free blocks that still hold some. (The same walk as making the plan.)
  if (plan != plan_compaction(seq)) throw Error("compaction plan does not match the cache (stale plan?)");
  Sequence& s = seq_ref(seq);
  for (const Move& m : plan) {
    slot_pos_[index(m.from)] = kEmpty;
    slot_pos_[index(m.to)] = m.pos;
    emit({EventKind::SlotMoved, seq, m.to.block, m.to.slot, m.from.block, m.from.slot, m.pos});
  }
  // Survivors now fill logical slots [0, live): free every block past them.
  const size_t keep_blocks = size_t(blocks_for_tokens(s.live, block_size_));
  while (s.blocks.size() > keep_blocks) {
    free_block(seq, s.blocks.back());
    s.blocks.pop_back();
  }
  s.tail_used = s.live == 0 ? block_size_ : (s.live - 1) % block_size_ + 1;
  s.holes.clear();
}

void PagedKvCache::begin_round(int seq) { emit({EventKind::RoundBegin, seq, -1, -1, -1, -1, sequence(seq).live}); }
void PagedKvCache::end_round(int seq) { emit({EventKind::RoundEnd, seq, -1, -1, -1, -1, sequence(seq).live}); }

std::vector<int64_t> PagedKvCache::live_positions(int seq) const {
  const Sequence& s = sequence(seq);
  std::vector<int64_t> out;
  out.reserve(size_t(s.live));
  for (size_t i = 0; i < s.blocks.size(); ++i) {
    const int used = slots_written(s, i);
    for (int j = 0; j < used; ++j)
      if (int64_t p = slot_pos_[index({s.blocks[i], j})]; p != kEmpty) out.push_back(p);
  }
  return out;
}

int PagedKvCache::slots_in_table(int seq) const {
  const Sequence& s = sequence(seq);
  return s.blocks.empty() ? 0 : int(s.blocks.size() - 1) * block_size_ + s.tail_used;
}

}  // namespace kvscope
