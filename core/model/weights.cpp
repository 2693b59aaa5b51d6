#include "model/weights.h"

#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <sstream>

#include "model/bf16.h"
#include "model/memory.h"
#include "util/error.h"
#include "util/format.h"
#include "util/memory_check.h"
#include "util/splitmix64.h"

namespace kvscope {

std::vector<const Matrix*> Weights::matrices() const {
  std::vector<const Matrix*> all = {&embed};
  for (const LayerWeights& l : layers)
    all.insert(all.end(), {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj});
  if (lm_head.data != embed.data) all.push_back(&lm_head);
  return all;
}

size_t Weights::matrix_bytes() const {
  size_t total = 0;
  for (const Matrix* m : matrices()) total += m->bytes();
  return total;
}

// A decode step reads every matrix once, but of the embedding only its token's row,
// unless lm_head is the embedding (tied), which reads it whole.
size_t Weights::decode_bytes() const {
  if (lm_head.data == embed.data) return matrix_bytes();
  return matrix_bytes() - embed.bytes() + embed.bytes() / size_t(embed.rows);
}

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::ostringstream o;
  o << '[';
  for (size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  o << ']';
  return o.str();
}

// The tensors a Qwen3 checkpoint must hold, with the shapes its config implies.
std::map<std::string, std::vector<int64_t>> expected_shapes(const ModelConfig& c, bool with_lm_head) {
  const int64_t h = c.hidden_size, hd = c.head_dim;
  std::map<std::string, std::vector<int64_t>> s;
  s["model.embed_tokens.weight"] = {c.vocab_size, h};
  s["model.norm.weight"] = {h};
  if (with_lm_head) s["lm_head.weight"] = {c.vocab_size, h};
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    s[p + "input_layernorm.weight"] = {h};
    s[p + "post_attention_layernorm.weight"] = {h};
    s[p + "self_attn.q_proj.weight"] = {c.q_dim(), h};
    s[p + "self_attn.k_proj.weight"] = {c.kv_dim(), h};
    s[p + "self_attn.v_proj.weight"] = {c.kv_dim(), h};
    s[p + "self_attn.o_proj.weight"] = {h, c.q_dim()};
    s[p + "self_attn.q_norm.weight"] = {hd};
    s[p + "self_attn.k_norm.weight"] = {hd};
    s[p + "mlp.gate_proj.weight"] = {c.intermediate_size, h};
    s[p + "mlp.up_proj.weight"] = {c.intermediate_size, h};
    s[p + "mlp.down_proj.weight"] = {h, c.intermediate_size};
  }
  return s;
}

// Builds Weights from a name -> tensor lookup; `matrix` and `vector` turn a
// tensor name into storage (views or converted copies).
template <class MatrixFn, class VectorFn>
void assemble(const ModelConfig& c, Weights& w, bool tied, MatrixFn matrix, VectorFn vector) {
  w.embed = matrix("model.embed_tokens.weight");
  w.final_norm = vector("model.norm.weight");
  w.lm_head = tied ? w.embed : matrix("lm_head.weight");
  w.layers.resize(c.num_layers);
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights& l = w.layers[i];
    l.input_norm = vector(p + "input_layernorm.weight");
    l.q_proj = matrix(p + "self_attn.q_proj.weight");
    l.k_proj = matrix(p + "self_attn.k_proj.weight");
    l.v_proj = matrix(p + "self_attn.v_proj.weight");
    l.q_norm = vector(p + "self_attn.q_norm.weight");
    l.k_norm = vector(p + "self_attn.k_norm.weight");
    l.o_proj = matrix(p + "self_attn.o_proj.weight");
    l.post_norm = vector(p + "post_attention_layernorm.weight");
    l.gate_proj = matrix(p + "mlp.gate_proj.weight");
    l.up_proj = matrix(p + "mlp.up_proj.weight");
    l.down_proj = matrix(p + "mlp.down_proj.weight");
  }
}

// Element i of a tensor, widened to f32.
float element(const TensorView& t, int64_t i) {
  uint16_t h;
  switch (t.dtype) {
    case DType::F32: { float f; std::memcpy(&f, t.data + 4 * i, 4); return f; }
    case DType::BF16: std::memcpy(&h, t.data + 2 * i, 2); return bf16_to_f32(h);
    case DType::F16: std::memcpy(&h, t.data + 2 * i, 2); return f16_to_f32(h);
  }
  return 0;
}

// Values that are NaN or infinite: every exponent bit set, in each of the three formats.
int64_t count_non_finite(const TensorView& t) {
  const int64_t n = t.numel();
  int64_t bad = 0;
  if (t.dtype == DType::F32) {
#pragma omp parallel for reduction(+ : bad) if (n > (1 << 22))
    for (int64_t i = 0; i < n; ++i) {
      uint32_t u;
      std::memcpy(&u, t.data + 4 * i, 4);
      bad += (u & 0x7F800000u) == 0x7F800000u;
    }
  } else {
    const uint16_t exponent = t.dtype == DType::BF16 ? 0x7F80 : 0x7C00;
#pragma omp parallel for reduction(+ : bad) if (n > (1 << 22))
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, t.data + 2 * i, 2);
      bad += (h & exponent) == exponent;
    }
  }
  return bad;
}

// config.json's torch_dtype as a DType; nullopt when absent or unknown (nothing to check).
std::optional<DType> config_dtype(const ModelConfig& c) {
  if (c.torch_dtype == "float32") return DType::F32;
  if (c.torch_dtype == "float16") return DType::F16;
  if (c.torch_dtype == "bfloat16") return DType::BF16;
  return std::nullopt;
}

// Tensors holding NaN or infinite values (the output turns NaN as soon as one
// is read): one line per tensor, the first few of them.
// Only the tensors the model reads: a tied checkpoint's lm_head.weight is ignored,
// and a NaN in it reaches no output.
void warn_non_finite(const ModelConfig& c, const std::map<std::string, TensorView>& tensors,
                     std::vector<std::string>& out) {
  constexpr int kListed = 8;
  const auto used = expected_shapes(c, !c.tie_word_embeddings);
  int found = 0;
  for (const auto& [name, t] : tensors) {
    if (!used.count(name)) continue;
    const int64_t bad = count_non_finite(t);
    if (bad == 0 || ++found > kListed) continue;
    out.push_back(t.file + ": tensor \"" + name + "\" holds " + plural(bad, "NaN or infinite value") + " (of " +
                  std::to_string(t.numel()) + "); its outputs will be NaN");
  }
  if (found > kListed)
    out.push_back("... and " + plural(found - kListed, "more tensor") + " with NaN or infinite values");
}

// Tensors stored in another dtype than config.json's torch_dtype: loaded as
// stored, so the numbers are right, but the checkpoint is not what its config says.
void warn_dtype(const ModelConfig& c, const std::map<std::string, TensorView>& tensors, std::vector<std::string>& out) {
  const std::optional<DType> want = config_dtype(c);
  if (!want) return;
  const TensorView* first = nullptr;
  int count = 0;
  for (const auto& [name, t] : tensors) {
    if (t.dtype == *want) continue;
    if (!first) first = &t;
    ++count;
  }
  if (count == 0) return;
  out.push_back(first->file + ": tensor \"" + first->name + "\" is " + dtype_name(first->dtype) +
                " but config.json says torch_dtype \"" + c.torch_dtype + "\"" +
                (count > 1 ? " (as are " + std::to_string(count - 1) + " more tensors)" : "") + "; loaded as stored");
}

}  // namespace

// Every tensor the config implies is there with its shape, and no other: a tied
// checkpoint may still carry lm_head.weight (of the right shape), which is ignored.
static void check_tensors(const ModelConfig& c, const std::map<std::string, TensorView>& tensors,
                          const std::string& model_dir) {
  const auto expected = expected_shapes(c, !c.tie_word_embeddings);
  for (const auto& [name, shape] : expected) {
    auto it = tensors.find(name);
    if (it == tensors.end()) throw file_error(model_dir, "missing tensor \"" + name + "\"");
    if (it->second.shape != shape)
      throw file_error(it->second.file, "tensor \"" + name + "\" has shape " + shape_str(it->second.shape) +
                                            " but config.json implies " + shape_str(shape));
  }
  for (const auto& [name, t] : tensors) {
    if (expected.count(name)) continue;
    if (name == "lm_head.weight" && c.tie_word_embeddings) {
      if (t.shape != std::vector<int64_t>{c.vocab_size, c.hidden_size})
        throw file_error(t.file, "tensor \"lm_head.weight\" has shape " + shape_str(t.shape) + " but config.json implies " +
                                     shape_str({c.vocab_size, c.hidden_size}));
      continue;
    }
    throw file_error(t.file, "unexpected tensor \"" + name + "\" (not part of a Qwen3 model with this config)");
  }
}

Model load_model(const std::string& model_dir, WeightFormat format) {
  Model m;
  m.config = load_config(model_dir);
  const ModelConfig& c = m.config;
  Weights& w = m.weights;
  w.checkpoint = std::make_shared<Checkpoint>(model_dir);
  const auto& tensors = w.checkpoint->tensors();

  check_tensors(c, tensors, model_dir);
  warn_non_finite(c, tensors, m.warnings);
  warn_dtype(c, tensors, m.warnings);

  auto matrix = [&](const std::string& name) {
    const TensorView& t = tensors.at(name);
    Matrix mat;
    mat.rows = int(t.shape[0]);
    mat.cols = int(t.shape[1]);
    const bool aligned = reinterpret_cast<uintptr_t>(t.data) % dtype_size(t.dtype) == 0;
    const bool keep = aligned && ((t.dtype == DType::F32 && format != WeightFormat::BF16) ||
                                  (t.dtype == DType::BF16 && format != WeightFormat::F32));
    if (keep) {  // zero-copy view into the map
      mat.dtype = t.dtype;
      mat.data = t.data;
    } else if (format == WeightFormat::BF16) {
      uint16_t* v = w.owned.emplace_back(size_t(t.numel()) * 2).as<uint16_t>();
      for (int64_t i = 0; i < t.numel(); ++i) v[i] = f32_to_bf16(element(t, i));
      mat.dtype = DType::BF16;
      mat.data = v;
    } else {
      float* v = w.owned.emplace_back(size_t(t.numel()) * 4).as<float>();
      for (int64_t i = 0; i < t.numel(); ++i) v[i] = element(t, i);
      mat.dtype = DType::F32;
      mat.data = v;
    }
    return mat;
  };
  auto vector = [&](const std::string& name) {
    const TensorView& t = tensors.at(name);
    float* v = w.owned.emplace_back(size_t(t.numel()) * 4).as<float>();
    for (int64_t i = 0; i < t.numel(); ++i) v[i] = element(t, i);
    return static_cast<const float*>(v);
  };
  assemble(c, w, c.tie_word_embeddings, matrix, vector);
  return m;
}

void check_random_model_fits(const ModelConfig& config, DType dtype) {
  if (dtype == DType::F16) throw Error("random_model: matrices are held in F32 or BF16");
  // Every parameter at the matrices' width (the norms' few f32 vectors aside).
  check_fits_in_memory(size_t(weight_bytes(config, dtype == DType::F32 ? 32 : 16)),
                       "random " + std::string(dtype == DType::F32 ? "f32" : "bf16") + " weights of " +
                           std::to_string(config.parameter_count()) + " parameters");
}

Model random_model(const ModelConfig& config, DType dtype, uint64_t seed) {
  check_random_model_fits(config, dtype);
  Model m;
  m.config = config;
  Weights& w = m.weights;
  const auto shapes = expected_shapes(config, true);

  // Uniform values in [-1, 1) from splitmix64: cheap enough for 600M weights.
  SplitMix64 rng(seed);
  auto uniform = [&rng] { return rng.symmetric(); };

  auto matrix = [&](const std::string& name) {
    const auto& shape = shapes.at(name);
    Matrix mat{dtype, int(shape[0]), int(shape[1]), nullptr};
    const size_t n = size_t(mat.rows) * mat.cols;
    const float scale = std::sqrt(3.0f / float(mat.cols));  // variance 1/cols keeps activations O(1)
    if (dtype == DType::F32) {
      float* v = w.owned.emplace_back(n * 4).as<float>();
      for (size_t i = 0; i < n; ++i) v[i] = scale * uniform();
      mat.data = v;
    } else {
      uint16_t* v = w.owned.emplace_back(n * 2).as<uint16_t>();
      for (size_t i = 0; i < n; ++i) v[i] = f32_to_bf16(scale * uniform());
      mat.data = v;
    }
    return mat;
  };
  auto vector = [&](const std::string& name) {
    const size_t n = size_t(shapes.at(name)[0]);
    float* v = w.owned.emplace_back(n * 4).as<float>();
    for (size_t i = 0; i < n; ++i) v[i] = 1.0f + 0.1f * uniform();
    return static_cast<const float*>(v);
  };
  assemble(config, w, config.tie_word_embeddings, matrix, vector);
  return m;
}

}  // namespace kvscope
