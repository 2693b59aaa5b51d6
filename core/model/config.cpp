#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <system_error>
#include <nlohmann/json.hpp>

#include "util/error.h"
#include "util/json_depth.h"
#include "util/json_int.h"
#include "util/file.h"
#include "util/format.h"

namespace kvscope {

using json = nlohmann::json;

namespace {

// A required positive integer field.
int positive_int(const json& j, const char* key, const std::string& source) {
  if (!j.contains(key)) throw file_error(source, std::string("missing field \"") + key + "\"");
  const json& v = j[key];
  if (!json_int_in(v, 1, 1 << 30))
    throw file_error(source,
                     std::string("field \"") + key + "\" must be a positive integer up to 2^30, got " + v.dump());
  return v.get<int>();
}

// A token id: an integer from 0 to INT32_MAX (2^32 + 2 must not wrap to 2).
bool is_token_id(const json& id) { return json_int_in(id, 0, INT32_MAX); }

// Parameters of the checkpoint (lm_head counted once when tied), counted in N:
// int64_t for ModelConfig::parameter_count, long double to check that the sizes
// a file gives cannot overflow it.
template <typename N>
N count_parameters(const ModelConfig& c) {
  const N h = c.hidden_size, q_dim = N(c.num_heads) * c.head_dim, kv_dim = N(c.num_kv_heads) * c.head_dim;
  N per_layer = h * q_dim + 2 * h * kv_dim + q_dim * h;  // q, k, v, o
  per_layer += 3 * h * c.intermediate_size;             // gate, up, down
  per_layer += 2 * h + 2 * N(c.head_dim);               // two norms, q_norm, k_norm
  const N embed = N(c.vocab_size) * h;
  return embed * (c.tie_word_embeddings ? 1 : 2) + N(c.num_layers) * per_layer + h;
}

// Each field is at most 2^30, but their products are the sizes everything else
// computes with: rows of q_proj in an int, parameters and bytes in an int64_t.
// The largest real models have about 1e12 parameters.
constexpr int64_t kMaxQDim = int64_t(1) << 30;
constexpr long double kMaxParameters = 1e15L;

void check_sizes(const ModelConfig& c, const std::string& source) {
  if (int64_t(c.num_heads) * c.head_dim > kMaxQDim)
    throw file_error(source, "num_attention_heads x head_dim = " + std::to_string(int64_t(c.num_heads) * c.head_dim) +
                                 " is more than kvscope handles (2^30)");
  if (const long double n = count_parameters<long double>(c); n > kMaxParameters)
    throw file_error(source, "the sizes describe a model of " + number_text(double(n)) +
                                 " parameters, more than kvscope handles (1e15)");
}

// eos_token_id may be a number or a list of numbers.
void add_eos_ids(const json& j, std::vector<int>& out, const std::string& source) {
  if (!j.contains("eos_token_id") || j["eos_token_id"].is_null()) return;
  const json& v = j["eos_token_id"];
  auto add = [&](const json& id) {
    if (!is_token_id(id))
      throw file_error(source, "eos_token_id must be a token id (an integer from 0 to 2147483647) or a list of them, got " +
                                   v.dump());
    int x = id.get<int>();
    if (std::find(out.begin(), out.end(), x) == out.end()) out.push_back(x);
  };
  if (v.is_array()) {
    for (const json& id : v) add(id);
  } else {
    add(v);
  }
}

// A field that must be absent, null or false: kvscope does not implement it.
void require_off(const json& j, const char* key, const std::string& source) {
  if (!j.contains(key) || j[key].is_null() || j[key] == false) return;
  throw file_error(source, std::string("\"") + key + "\" = " + j[key].dump() + " is not supported by kvscope");
}

// j[key] as T when present, else `fallback`; a value of another type is an error that
// names the field ("rope_theta must be a number, got \"big\""), not nlohmann's
// "[json.exception.type_error.302] type must be number, but is string".
template <typename T>
T optional_field(const json& j, const char* key, T fallback, const char* kind, const std::string& source) {
  if (!j.contains(key)) return fallback;
  try {
    return j[key].get<T>();
  } catch (const json::type_error&) {
    throw file_error(source, std::string(key) + " must be " + kind + ", got " + j[key].dump());
  }
}

}  // namespace

// partial_rotary_factor, in j or rope_parameters (`where`), absent, null or 1: Hugging
// Face rotates that fraction of a head's dimensions; kvscope rotates them all.
static void require_full_rotation(const json& j, const std::string& where, const std::string& source) {
  if (!j.contains("partial_rotary_factor") || j["partial_rotary_factor"].is_null() || j["partial_rotary_factor"] == 1)
    return;
  throw file_error(source, where + "partial_rotary_factor " + j["partial_rotary_factor"].dump() +
                               " is not supported by kvscope (it rotates every dimension of a head)");
}

// RoPE's base. transformers 4 writes "rope_theta" at the top level; transformers 5
// writes it inside "rope_parameters", beside "rope_type", and Hugging Face reads that
// one first, then the top level's, then 10000 (`fallback`). A file that gives two
// different thetas is refused rather than read one way. rope_type must be "default":
// plain RoPE, the only kind kvscope implements (rope_scaling is its transformers 4 form).
// theta stays a double, but RoPE raises float(theta) to a power in f32 (as Hugging Face
// computes inv_freq), so it must be a number a float holds: 1e39 became infinity (no
// band but the first rotated), 1e-50 became 0 (infinite frequencies, NaN).
static double read_rope_theta(const json& j, double fallback, const std::string& source) {
  const json* given = j.contains("rope_theta") ? &j["rope_theta"] : nullptr;
  const char* name = "rope_theta";
  if (j.contains("rope_parameters") && !j["rope_parameters"].is_null()) {
    const json& p = j["rope_parameters"];
    if (!p.is_object()) throw file_error(source, "rope_parameters must be an object, got " + p.dump());
    const json type = p.contains("rope_type") ? p["rope_type"] : p.contains("type") ? p["type"] : json("default");
    if (type != "default")
      throw file_error(source, "rope_parameters' rope_type " + type.dump() +
                                   " is not supported by kvscope (plain RoPE, \"default\", only)");
    require_full_rotation(p, "rope_parameters' ", source);
    if (p.contains("rope_theta")) {
      if (given && p["rope_theta"] != *given)
        throw file_error(source, "rope_theta is " + given->dump() + " but rope_parameters' rope_theta is " +
                                     p["rope_theta"].dump() + ": which one is meant?");
      given = &p["rope_theta"], name = "rope_parameters' rope_theta";
    }
  }
  if (!given) return fallback;
  if (!given->is_number()) throw file_error(source, std::string(name) + " must be a number, got " + given->dump());
  const double theta = given->get<double>();
  if (!(theta >= std::numeric_limits<float>::min()) || theta > std::numeric_limits<float>::max())
    throw file_error(source, std::string(name) + " must be a positive number a float holds, got " + given->dump());
  return theta;
}

// Architecture: model_type "qwen3", as Hugging Face decides it; without a model_type,
// an architectures list that names Qwen3ForCausalLM.
static void check_qwen3(const json& j, const std::string& source) {
  const std::string model_type = optional_field<std::string>(j, "model_type", "", "a string", source);
  bool qwen3_arch = false;
  if (j.contains("architectures") && j["architectures"].is_array())
    for (const json& a : j["architectures"]) qwen3_arch |= (a == "Qwen3ForCausalLM");
  if (model_type.empty() ? !qwen3_arch : model_type != "qwen3") {
    std::string what = model_type.empty() ? std::string("no model_type") : "model_type \"" + model_type + "\"";
    throw file_error(source, "unsupported architecture (" + what + "); kvscope runs Qwen3 (model_type \"qwen3\") only");
  }
}

// layer_types (transformers 4.53 and later), when given: one entry a layer, each
// "full_attention". A "sliding_attention" layer attends to a window of the newest
// tokens only; kvscope attends to every cached token in every layer.
static void require_full_attention_layers(const json& j, const ModelConfig& c, const std::string& source) {
  if (!j.contains("layer_types") || j["layer_types"].is_null()) return;
  const json& types = j["layer_types"];
  if (!types.is_array()) throw file_error(source, "layer_types must be a list, got " + types.dump());
  if (types.size() != size_t(c.num_layers))
    throw file_error(source, "layer_types lists " + plural(int64_t(types.size()), "layer") +
                                 ", but num_hidden_layers is " + std::to_string(c.num_layers));
  for (size_t i = 0; i < types.size(); ++i)
    if (types[i] != "full_attention")
      throw file_error(source, "layer_types[" + std::to_string(i) + "] is " + types[i].dump() +
                                   ": kvscope runs \"full_attention\" in every layer (no sliding window)");
}

// The shapes fit together, and the options kvscope does not implement are off.
static void check_shapes_and_options(const json& j, const ModelConfig& c, const std::string& source) {
  if (c.num_heads % c.num_kv_heads != 0)
    throw file_error(source, "num_attention_heads (" + std::to_string(c.num_heads) +
                                 ") is not a multiple of num_key_value_heads (" + std::to_string(c.num_kv_heads) + ")");
  check_sizes(c, source);
  if (c.head_dim % 2 != 0)
    throw file_error(source, "head_dim must be even for rotary embeddings, got " + std::to_string(c.head_dim));
  if (optional_field<std::string>(j, "hidden_act", "silu", "a string", source) != "silu")
    throw file_error(source, "hidden_act must be \"silu\"");
  require_off(j, "attention_bias", source);
  require_off(j, "rope_scaling", source);
  require_full_rotation(j, "", source);
  require_off(j, "use_sliding_window", source);
  require_full_attention_layers(j, c, source);
}

static ModelConfig parse_config_object(const std::string& json_text, const std::string& source) {
  check_json_depth(json_text, source);
  json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw file_error(source, "not valid JSON");
  if (!j.is_object()) throw file_error(source, "expected a JSON object");

  check_qwen3(j, source);

  ModelConfig c;
  c.hidden_size = positive_int(j, "hidden_size", source);
  c.intermediate_size = positive_int(j, "intermediate_size", source);
  c.num_layers = positive_int(j, "num_hidden_layers", source);
  c.num_heads = positive_int(j, "num_attention_heads", source);
  // A field left out takes Hugging Face's Qwen3Config default: 32 KV heads (null: as
  // many as query heads), head_dim 128 (not hidden_size / heads: 0.6B has 1024 / 16 =
  // 64 and head_dim 128), rope_theta 10000 (ModelConfig's defaults).
  const bool kv_null = j.contains("num_key_value_heads") && j["num_key_value_heads"].is_null();
  c.num_kv_heads = kv_null ? c.num_heads
                   : j.contains("num_key_value_heads") ? positive_int(j, "num_key_value_heads", source) : 32;
  c.head_dim = j.contains("head_dim") ? positive_int(j, "head_dim", source) : 128;
  c.vocab_size = positive_int(j, "vocab_size", source);
  c.max_position_embeddings = j.contains("max_position_embeddings") ? positive_int(j, "max_position_embeddings", source) : 32768;
  // Read as a double and checked before it becomes a float: 1e300 is past a float's
  // range (converting it is undefined behaviour), and would become infinity; 1e-50
  // would become 0, and RMSNorm of a row of zeros NaN.
  const double eps = optional_field<double>(j, "rms_norm_eps", c.rms_norm_eps, "a number", source);
  if (!(eps >= std::numeric_limits<float>::min()) || eps > std::numeric_limits<float>::max())
    throw file_error(source, "rms_norm_eps must be a positive number a float holds (1.17549e-38, its smallest normal, "
                             "to 3.40282e+38), got " + j["rms_norm_eps"].dump());
  c.rms_norm_eps = float(eps);
  c.rope_theta = read_rope_theta(j, c.rope_theta, source);
  c.tie_word_embeddings = optional_field<bool>(j, "tie_word_embeddings", false, "true or false", source);
  // A hint checked against the tensors; transformers 5 writes it as "dtype".
  const std::string dtype = optional_field<std::string>(j, "dtype", "", "a string", source);
  c.torch_dtype = optional_field<std::string>(j, "torch_dtype", dtype, "a string", source);
  if (j.contains("bos_token_id") && !j["bos_token_id"].is_null()) {
    if (!is_token_id(j["bos_token_id"]))
      throw file_error(source, "bos_token_id must be a token id (an integer from 0 to 2147483647) or null, got " +
                                   j["bos_token_id"].dump());
    c.bos_token_id = j["bos_token_id"].get<int>();
  }
  add_eos_ids(j, c.eos_token_ids, source);

  check_shapes_and_options(j, c, source);
  return c;
}

ModelConfig parse_config(const std::string& json_text, const std::string& source) {
  try {
    return parse_config_object(json_text, source);
  } catch (const json::exception& e) {  // a field of the wrong type, e.g. "rope_theta": "big"
    throw file_error(source, std::string("bad field: ") + e.what());
  }
}

ModelConfig load_config_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec) && file_exists(path + "/config.json"))  // a model folder for --config
    throw Error(path + ": is a model folder, not a config.json; give " + path + "/config.json");
  return parse_config(read_file(path), path);
}

void check_model_folder(const std::string& model_dir) {
  namespace fs = std::filesystem;
  if (model_dir.empty()) throw Error("an empty model folder name");  // not ": no such folder"
  std::error_code ec;
  const fs::file_status st = fs::status(model_dir, ec);
  if (!fs::exists(st)) throw Error(model_dir + ": no such folder");
  if (!fs::is_directory(st)) {
    const std::string folder = fs::path(model_dir).parent_path().string();  // "" for a bare file name
    const std::string parent = folder.empty() ? "." : folder;
    throw Error(model_dir + ": is a file, not a model folder" +
                (fs::exists(parent + "/config.json", ec) ? "; give " + parent : ""));
  }
  if (!fs::exists(model_dir + "/config.json", ec))  // one that is there but unreadable gets read_file's message
    throw Error(model_dir + ": no config.json (not a model folder)");
}

ModelConfig load_config(const std::string& model_dir) {
  check_model_folder(model_dir);
  ModelConfig c = load_config_file(model_dir + "/config.json");
  std::string gen = model_dir + "/generation_config.json";
  if (path_exists(gen)) {  // a directory by that name is refused when read, not passed over
    const std::string text = read_file(gen);
    check_json_depth(text, gen);
    json g = json::parse(text, nullptr, false);
    if (g.is_discarded()) throw file_error(gen, "not valid JSON");
    if (!g.is_object()) throw file_error(gen, "expected a JSON object");
    add_eos_ids(g, c.eos_token_ids, gen);
  }
  return c;
}

int64_t ModelConfig::parameter_count() const { return count_parameters<int64_t>(*this); }

}  // namespace kvscope
