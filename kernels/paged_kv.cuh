// How the attention kernels find a key: through a block table (kernels.h, PagedKv).
//
// A table lists, for each logical block of a sequence, the physical block that
// holds it; logical slot j is then slot j % block_size of physical block
// table[j / block_size]. slot_pos[j] is the position of the token in slot j, or
// -1 for a hole. In a batch of decoding sequences (kv.row_start set) query row t
// has a table of its own: a run of the step's tables, as vLLM's block_tables.
#pragma once

#include <cstddef>

#include "kernels.h"

namespace kvscope::cuda {

// One query row's view of the cache: its block table, the position in each of its
// slots, and how many logical slots it spans.
struct RowTable {
  const int* blocks;
  const int* slot_pos;
  int slots;
};

// Query row t's table: the whole of kv's, or its own run of it in a batch.
__device__ __forceinline__ RowTable row_table(const PagedKv& kv, int t) {
  if (!kv.row_start) return {kv.block_table, kv.slot_pos, kv.table_slots};
  const int start = kv.row_start[t];  // a multiple of block_size
  return {kv.block_table + start / kv.block_size, kv.slot_pos + start, kv.row_slots[t]};
}

// Where logical slot j of a table lives: its row in this layer's K (or V) array,
// which is [num_blocks * block_size, kv_dim].
__device__ __forceinline__ size_t slot_row(const int* blocks, int block_size, int j) {
  return size_t(blocks[j / block_size]) * block_size + j % block_size;
}

}  // namespace kvscope::cuda
