// Fuzz target: a TriAttention calibration file (what --calibration reads). Either
// kvscope::Error, or a TriCalibration that
//   - has three arrays of the shape it declares, finite, mean lengths >= 0;
//   - matches a model of that shape;
//   - saves and loads back bit for bit (9 significant digits round-trip an f32).
// Anything else (a crash, a huge allocation, another exception) is a bug.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "evict/triattention_calibration.h"
#include "fuzz_util.h"
#include "util/error.h"

using kvscope::TriCalibration;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = kvscope::fuzz::input_file(data, size, "calibration.json");
  TriCalibration c;
  try {
    c = TriCalibration::load(path);
  } catch (const kvscope::Error&) {
    return 0;  // refused, with a message: fine
  }
  const size_t n = size_t(c.num_layers) * size_t(c.num_heads) * size_t(c.bands());
  if (n == 0 || c.qbar_re.size() != n || c.qbar_im.size() != n || c.q_abs_mean.size() != n) std::abort();
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(c.qbar_re[i]) || !std::isfinite(c.qbar_im[i]) || !std::isfinite(c.q_abs_mean[i])) std::abort();
    if (c.q_abs_mean[i] < 0) std::abort();
  }

  kvscope::ModelConfig same;  // a model of the declared shape
  same.num_layers = c.num_layers;
  same.num_heads = c.num_heads;
  same.head_dim = c.head_dim;
  same.rope_theta = c.rope_theta;
  same.num_kv_heads = c.num_kv_heads;
  same.hidden_size = c.hidden_size;
  try {
    c.check_matches(same, path);
    static std::string copy;  // beside the input, and removed at exit as it is
    if (copy.empty()) {
      copy = path + ".copy";
      std::atexit([] { std::remove(copy.c_str()); });
    }
    c.save(copy);
    const TriCalibration back = TriCalibration::load(copy);
    if (back.num_layers != c.num_layers || back.num_heads != c.num_heads || back.head_dim != c.head_dim ||
        back.rope_theta != c.rope_theta || back.tokens != c.tokens || back.qbar_re != c.qbar_re ||
        back.qbar_im != c.qbar_im || back.q_abs_mean != c.q_abs_mean)
      std::abort();
  } catch (const kvscope::Error&) {
    std::abort();
  }
  return 0;
}
