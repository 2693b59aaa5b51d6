// BlockPool: the physical blocks of the paged KV cache, handed out and taken back in O(1).
//
// Like vLLM's BlockPool, reduced to what kvscope needs: a FIFO queue of free
// block ids and a reference count per block. allocate() pops the front of the
// queue, free() pushes the block back once its count drops to zero. The queue is
// a ring buffer over a fixed array, so neither operation ever allocates memory.
#pragma once

#include <cstdint>
#include <vector>

namespace kvscope {

class BlockPool {
 public:
  explicit BlockPool(int num_blocks);

  // A free block with reference count 1. Throws kvscope::PoolExhausted ("block pool exhausted ...")
  // when none is free; callers that can wait check num_free() first.
  int allocate();
  // Drops one reference; the block returns to the free queue when none is left.
  // Throws on a block that is not allocated (a double free).
  void free(int block);
  // One more reference to an allocated block (a block shared by two sequences, as
  // prefix caching would). PagedKvCache never shares one: check_invariants requires a
  // count of 1 for every block in a table, and its free_block clears the slots, which
  // a second holder would still need.
  void retain(int block);

  int num_blocks() const { return int(ref_count_.size()); }
  int num_free() const { return free_count_; }
  int num_used() const { return num_blocks() - free_count_; }
  // References to `block` (0: free). Throws kvscope::Error for an id outside the pool.
  int ref_count(int block) const;
  bool is_free(int block) const { return ref_count(block) == 0; }

 private:
  std::vector<int> ref_count_;   // [num_blocks]  0 = in the free queue
  std::vector<int> free_queue_;  // [num_blocks]  ring buffer of free block ids
  int head_ = 0;                 // next block to hand out
  int free_count_ = 0;           // entries of the ring in use
};

}  // namespace kvscope
