// KvStorage: the K and V numbers of the paged cache, on the CPU.
//
// Laid out layer by layer, then by block and slot: [layer, block, slot, kv_dim] floats,
// one row of kv_dim (kv_heads * head_dim) per slot. Keys are stored after RoPE, at the position
// the slot records; moving a slot never re-rotates its key.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "model/config.h"

namespace kvscope {

struct KvStorage {
  int num_layers = 0;
  int num_blocks = 0;
  int block_size = 0;
  int kv_dim = 0;
  std::vector<float> k;  // [num_layers, num_blocks, block_size, kv_dim]
  std::vector<float> v;  // [num_layers, num_blocks, block_size, kv_dim]

  KvStorage(const ModelConfig& c, int num_blocks, int block_size);

  float* key(int layer, SlotRef s) { return k.data() + offset(layer, s); }
  float* value(int layer, SlotRef s) { return v.data() + offset(layer, s); }
  const float* key(int layer, SlotRef s) const { return k.data() + offset(layer, s); }
  const float* value(int layer, SlotRef s) const { return v.data() + offset(layer, s); }

  // Executes a compaction plan in order, in every layer; returns the bytes moved
  // (K and V, all layers).
  size_t apply(const std::vector<Move>& plan);

  // Bytes one slot (one token) takes: K and V, all layers, f32. A compaction move
  // copies this many; a block takes block_size of them.
  static size_t bytes_per_slot(int layers, int dim) { return size_t(2) * layers * dim * sizeof(float); }
  static size_t bytes_per_slot(const ModelConfig& c) { return bytes_per_slot(c.num_layers, c.kv_dim()); }
  static size_t bytes_per_block(const ModelConfig& c, int block_size) { return bytes_per_slot(c) * block_size; }
  // "the paged K/V storage (N blocks of B tokens; K and V of L layers, f32)": how the
  // memory checks name it, on the CPU and on the GPU.
  static std::string describe(const ModelConfig& c, int num_blocks, int block_size);

 private:
  size_t offset(int layer, SlotRef s) const {
    return ((size_t(layer) * num_blocks + s.block) * block_size + s.slot) * kv_dim;
  }
};

// The number of blocks a memory budget of `bytes` buys; kvscope::Error if not even one.
int blocks_for_budget(const ModelConfig& c, int block_size, size_t bytes);

}  // namespace kvscope
