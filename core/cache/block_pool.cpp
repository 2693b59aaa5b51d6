#include "cache/block_pool.h"

#include <string>

#include "util/error.h"

namespace kvscope {

BlockPool::BlockPool(int num_blocks) {
  if (num_blocks < 1) throw Error("block pool: needs at least one block, got " + std::to_string(num_blocks));
  ref_count_.assign(size_t(num_blocks), 0);
  free_queue_.resize(size_t(num_blocks));
  for (int b = 0; b < num_blocks; ++b) free_queue_[b] = b;  // blocks 0, 1, 2, ... handed out first
  free_count_ = num_blocks;
}

int BlockPool::allocate() {
  if (free_count_ == 0)
    throw PoolExhausted(num_blocks() == 1 ? "block pool exhausted: its one block is in use"
                                          : "block pool exhausted: all " + std::to_string(num_blocks()) +
                                                " blocks are in use");
  const int block = free_queue_[head_];
  head_ = (head_ + 1) % num_blocks();
  --free_count_;
  ref_count_[block] = 1;
  return block;
}

int BlockPool::ref_count(int block) const {
  if (block < 0 || block >= num_blocks()) throw Error("block pool: no block " + std::to_string(block));
  return ref_count_[block];
}

void BlockPool::free(int block) {
  if (ref_count(block) == 0) throw Error("block pool: block " + std::to_string(block) + " freed twice");
  if (--ref_count_[block] > 0) return;
  free_queue_[(head_ + free_count_) % num_blocks()] = block;  // to the back of the queue
  ++free_count_;
}

void BlockPool::retain(int block) {
  if (ref_count(block) == 0)
    throw Error("block pool: cannot retain block " + std::to_string(block) + ", it is not allocated");
  ++ref_count_[block];
}

}  // namespace kvscope
