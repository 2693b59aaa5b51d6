#include "cache/kv_storage.h"

#include <algorithm>
#include <string>

#include "util/error.h"
#include "util/format.h"
#include "util/memory_check.h"

namespace kvscope {

KvStorage::KvStorage(const ModelConfig& c, int num_blocks_, int block_size_)
    : num_layers(c.num_layers), num_blocks(num_blocks_), block_size(block_size_), kv_dim(c.kv_dim()) {
  const size_t floats = size_t(num_layers) * num_blocks * block_size * kv_dim;  // of K, and of V
  check_fits_in_memory(2 * floats * sizeof(float), describe(c, num_blocks, block_size));
  k.assign(floats, 0.0f);
  v.assign(floats, 0.0f);
}

size_t KvStorage::apply(const std::vector<Move>& plan) {
  for (int l = 0; l < num_layers; ++l)
    for (const Move& m : plan) {
      std::copy_n(key(l, m.from), kv_dim, key(l, m.to));
      std::copy_n(value(l, m.from), kv_dim, value(l, m.to));
    }
  return plan.size() * bytes_per_slot(num_layers, kv_dim);
}

std::string KvStorage::describe(const ModelConfig& c, int num_blocks, int block_size) {
  return "the paged K/V storage (" + plural(num_blocks, "block") + " of " + plural(block_size, "token") +
         "; K and V of " + plural(c.num_layers, "layer") + ", f32)";
}

int blocks_for_budget(const ModelConfig& c, int block_size, size_t bytes) {
  check_block_size(block_size);
  const size_t per_block = KvStorage::bytes_per_block(c, block_size);
  const size_t n = bytes / per_block;
  if (n < 1)
    throw Error("a KV memory budget of " + commas(int64_t(bytes)) + " bytes is smaller than one block (" +
                commas(int64_t(per_block)) + " bytes for " + plural(block_size, "token") + ")");
  if (n > size_t(1) << 30)
    throw Error("a KV memory budget of " + commas(int64_t(bytes)) + " bytes is " + commas(int64_t(n)) +
                " blocks of " + commas(int64_t(per_block)) + " bytes; a pool holds at most 1,073,741,824 (2^30)");
  return int(n);
}

}  // namespace kvscope
