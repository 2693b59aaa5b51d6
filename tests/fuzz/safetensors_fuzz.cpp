// Fuzz target: a .safetensors file (header length, JSON header, tensor ranges).
// Loading either succeeds, and then every tensor lies inside the file, or it
// throws kvscope::Error; anything else is a bug.
#include <cstdlib>

#include "fuzz_util.h"
#include "model/safetensors.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = kvscope::fuzz::input_file(data, size, "model.safetensors");
  try {
    kvscope::SafetensorsFile file(path);
    for (const auto& [name, t] : file.tensors()) {
      if (size_t(t.numel()) * kvscope::dtype_size(t.dtype) != t.nbytes) std::abort();
      volatile unsigned char sink = 0;  // touch the first and last byte: ASan checks they are mapped
      if (t.nbytes) sink = sink + t.data[0] + t.data[t.nbytes - 1];
    }
  } catch (const kvscope::Error&) {
  }
  return 0;
}
