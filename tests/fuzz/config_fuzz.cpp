// Fuzz target: config.json text. Either a ModelConfig whose numbers are usable
// (positive, heads divisible, and the sizes kvscope memory computes from them
// positive and free of overflow) or kvscope::Error; anything else is a bug.
#include <cstdlib>
#include <string>

#include "model/config.h"
#include "model/memory.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const kvscope::ModelConfig c =
        kvscope::parse_config(std::string(reinterpret_cast<const char*>(data), size), "fuzz/config.json");
    if (c.hidden_size <= 0 || c.num_layers <= 0 || c.num_kv_heads <= 0 || c.head_dim <= 0) std::abort();
    if (c.num_heads % c.num_kv_heads != 0) std::abort();
    if (c.q_dim() <= 0 || c.kv_dim() <= 0 || c.parameter_count() <= 0) std::abort();
    for (int bits : {8, 16, 32})
      if (kvscope::kv_bytes_per_token(c, bits) <= 0 || kvscope::kv_tokens_per_gb(c, bits) < 0) std::abort();
    if (kvscope::weight_bytes(c, 32) <= 0) std::abort();
  } catch (const kvscope::Error&) {
  }
  return 0;
}
