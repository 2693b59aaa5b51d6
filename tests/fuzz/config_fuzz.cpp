// Fuzz target: config.json text. Either a ModelConfig whose numbers are usable
// (positive, heads divisible) or kvscope::Error; anything else is a bug.
#include <cstdlib>
#include <string>

#include "model/config.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const kvscope::ModelConfig c =
        kvscope::parse_config(std::string(reinterpret_cast<const char*>(data), size), "fuzz/config.json");
    if (c.hidden_size <= 0 || c.num_layers <= 0 || c.num_kv_heads <= 0 || c.head_dim <= 0) std::abort();
    if (c.num_heads % c.num_kv_heads != 0) std::abort();
    (void)c.parameter_count();
  } catch (const kvscope::Error&) {
  }
  return 0;
}
