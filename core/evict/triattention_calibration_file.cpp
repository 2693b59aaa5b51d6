// The TriAttention calibration file: TriCalibration::save, load and check_matches.
// Plain JSON, no model code: the fuzz target tests/fuzz/calibration_fuzz.cpp links
// this file alone. The centres themselves: triattention_calibration.cpp.
#include "evict/triattention_calibration.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iomanip>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "util/error.h"
#include "util/json_depth.h"
#include "util/json_int.h"
#include "util/file.h"

namespace kvscope {

// ---------------------------------------------------------------------------
// The file
// ---------------------------------------------------------------------------
//
// {
//   "format": "kvscope.triattention.calibration", "version": 1,
//   "model": {"path": ..., "num_layers": L, "num_heads": H, "num_kv_heads": K,
//             "head_dim": d, "hidden_size": ..., "rope_theta": ...},
//   "text":  {"path": ..., "tokens": N, "chunk": C},
//   "layout": "...",
//   "qbar_re":    [ layer: [ head: [ d/2 numbers ] ] ],
//   "qbar_im":    same,
//   "q_abs_mean": same
// }
// One line per (layer, head) row; numbers with 9 significant digits (f32 round trip).

namespace {

const char* kFormat = "kvscope.triattention.calibration";
constexpr int kVersion = 1;

std::string shape_text(int layers, int heads, int kv_heads, int head_dim, int hidden, double theta) {
  std::ostringstream s;
  s << layers << " layers, " << heads << " heads";
  if (kv_heads) s << ", " << kv_heads << " KV heads";
  s << ", head_dim " << head_dim;
  if (hidden) s << ", hidden_size " << hidden;
  s << ", rope_theta " << std::setprecision(17) << theta;  // every digit: 1000001 is not 1e+06
  return s.str();
}

void write_array(std::ostream& out, const char* name, const TriCalibration& c, const std::vector<float>& a) {
  out << "  \"" << name << "\": [\n";
  char buf[32];
  for (int l = 0; l < c.num_layers; ++l) {
    out << "    [\n";
    for (int h = 0; h < c.num_heads; ++h) {
      out << "      [";
      for (int f = 0; f < c.bands(); ++f) {
        std::snprintf(buf, sizeof buf, "%.9g", double(a[c.index(l, h, f)]));
        out << (f ? ", " : "") << buf;
      }
      out << (h + 1 < c.num_heads ? "],\n" : "]\n");
    }
    out << (l + 1 < c.num_layers ? "    ],\n" : "    ]\n");
  }
  out << "  ]";
}

const nlohmann::json& field(const nlohmann::json& j, const char* key, const std::string& where,
                            const std::string& path) {
  if (!j.is_object() || !j.contains(key)) throw file_error(path, "missing \"" + std::string(key) + "\" in " + where);
  return j.at(key);
}

// An integer in [min_value, max_value]. The shape's fields are ints: 2^32 + 2 layers
// must be refused, not read as 2.
int64_t int_field(const nlohmann::json& j, const char* key, const std::string& where, const std::string& path,
                  int64_t min_value, int64_t max_value = std::numeric_limits<int>::max()) {
  const nlohmann::json& v = field(j, key, where, path);
  if (!json_int_in(v, min_value, max_value))
    throw file_error(path, where + "." + key + " must be an integer from " + std::to_string(min_value) + " to " +
                               std::to_string(max_value));
  return v.get<int64_t>();
}

void read_array(const nlohmann::json& root, const char* name, TriCalibration& c, std::vector<float>& out,
                const std::string& path) {
  const nlohmann::json& a = field(root, name, "the file", path);
  const std::string n = name;
  if (!a.is_array() || int(a.size()) != c.num_layers)
    throw file_error(path, n + " must be a list of " + std::to_string(c.num_layers) + " layers (model.num_layers), it has " +
                               (a.is_array() ? std::to_string(a.size()) : std::string("none")));
  out.assign(size_t(c.num_layers) * c.num_heads * c.bands(), 0.0f);
  for (int l = 0; l < c.num_layers; ++l) {
    const nlohmann::json& layer = a[size_t(l)];
    const std::string wl = n + "[" + std::to_string(l) + "]";
    if (!layer.is_array() || int(layer.size()) != c.num_heads)
      throw file_error(path, wl + " must list " + std::to_string(c.num_heads) + " heads (model.num_heads)");
    for (int h = 0; h < c.num_heads; ++h) {
      const nlohmann::json& row = layer[size_t(h)];
      const std::string wh = wl + "[" + std::to_string(h) + "]";
      if (!row.is_array() || int(row.size()) != c.bands())
        throw file_error(path, wh + " must hold " + std::to_string(c.bands()) + " bands (model.head_dim / 2), it has " +
                                   (row.is_array() ? std::to_string(row.size()) : std::string("none")));
      for (int f = 0; f < c.bands(); ++f) {
        const nlohmann::json& v = row[size_t(f)];
        const std::string wf = wh + "[" + std::to_string(f) + "]";
        if (!v.is_number()) throw file_error(path, wf + " is not a number (" + v.dump() + ")");
        const double x = v.get<double>();
        if (!std::isfinite(x) || !std::isfinite(float(x)))
          throw file_error(path, wf + " is " + v.dump() + ", not a finite float");
        out[c.index(l, h, f)] = float(x);
      }
    }
  }
}

}  // namespace

void TriCalibration::check_matches(const ModelConfig& c, const std::string& source) const {
  const bool ok = num_layers == c.num_layers && num_heads == c.num_heads && head_dim == c.head_dim &&
                  rope_theta == c.rope_theta && (num_kv_heads == 0 || num_kv_heads == c.num_kv_heads) &&
                  (hidden_size == 0 || hidden_size == c.hidden_size);
  if (!ok)
    throw file_error(source, "TriAttention calibration made for a model with " +
                                 shape_text(num_layers, num_heads, num_kv_heads, head_dim, hidden_size, rope_theta) +
                                 "; this model has " +
                                 shape_text(c.num_layers, c.num_heads, c.num_kv_heads, c.head_dim, c.hidden_size,
                                            c.rope_theta));
}

void TriCalibration::save(const std::string& path) const {
  const size_t n = size_t(num_layers) * num_heads * bands();
  if (qbar_re.size() != n || qbar_im.size() != n || q_abs_mean.size() != n)
    throw file_error(path, "calibration arrays do not match its shape; nothing written");
  for (const auto* a : {&qbar_re, &qbar_im, &q_abs_mean})
    for (float x : *a)
      if (!std::isfinite(x)) throw file_error(path, "calibration holds a non-finite value; nothing written");

  using nlohmann::json;
  std::ostringstream out;
  out << "{\n";
  out << "  \"format\": " << json(kFormat).dump() << ",\n";
  out << "  \"version\": " << kVersion << ",\n";
  json m = {{"path", model},         {"num_layers", num_layers}, {"num_heads", num_heads},
            {"num_kv_heads", num_kv_heads}, {"head_dim", head_dim},     {"hidden_size", hidden_size},
            {"rope_theta", rope_theta}};
  out << "  \"model\": " << m.dump() << ",\n";
  json t = {{"path", text}, {"tokens", tokens}, {"chunk", chunk}};
  out << "  \"text\": " << t.dump() << ",\n";
  out << "  \"layout\": "
      << json("[num_layers][num_heads][head_dim/2]; band f is q[f] + i q[f + head_dim/2], pre-RoPE, after q_norm")
             .dump()
      << ",\n";
  write_array(out, "qbar_re", *this, qbar_re);
  out << ",\n";
  write_array(out, "qbar_im", *this, qbar_im);
  out << ",\n";
  write_array(out, "q_abs_mean", *this, q_abs_mean);
  out << "\n}\n";

  const std::string s = out.str();
  write_file_atomically(path, [&](std::ostream& f) { f.write(s.data(), std::streamsize(s.size())); });
}

namespace {
TriCalibration load_json(const std::string& path, const std::string& bytes, const nlohmann::json& root);
}

TriCalibration TriCalibration::load(const std::string& path) {
  const std::string bytes = read_file(path);
  check_json_depth(bytes, path);
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(bytes);
  } catch (const nlohmann::json::exception& e) {
    throw file_error(path, std::string("not valid JSON (truncated?): ") + e.what());
  }
  try {
    return load_json(path, bytes, root);
  } catch (const nlohmann::json::exception& e) {  // a field of an unexpected type
    throw file_error(path, e.what());
  }
}

namespace {
TriCalibration load_json(const std::string& path, const std::string& bytes, const nlohmann::json& root) {
  if (!root.is_object() || !root.contains("format") || root.at("format") != kFormat)
    throw file_error(path, std::string("not a TriAttention calibration (\"format\" is not \"") + kFormat + "\")");
  const nlohmann::json& version = field(root, "version", "the file", path);
  if (!version.is_number_integer() || version.get<int64_t>() != kVersion)
    throw file_error(path, "calibration version " + version.dump() + " is not supported (this kvscope reads version " +
                               std::to_string(kVersion) + ")");

  TriCalibration c;
  const nlohmann::json& m = field(root, "model", "the file", path);
  c.num_layers = int(int_field(m, "num_layers", "model", path, 1));
  c.num_heads = int(int_field(m, "num_heads", "model", path, 1));
  c.head_dim = int(int_field(m, "head_dim", "model", path, 2));
  if (c.head_dim % 2) throw file_error(path, "model.head_dim must be even");
  c.num_kv_heads = int(int_field(m, "num_kv_heads", "model", path, 0));
  c.hidden_size = int(int_field(m, "hidden_size", "model", path, 0));
  const nlohmann::json& theta = field(m, "rope_theta", "model", path);
  if (!theta.is_number() || !(theta.get<double>() > 0)) throw file_error(path, "model.rope_theta must be a number > 0");
  c.rope_theta = theta.get<double>();
  if (m.contains("path") && m["path"].is_string()) c.model = m["path"].get<std::string>();
  const nlohmann::json& t = field(root, "text", "the file", path);
  if (t.contains("path") && t["path"].is_string()) c.text = t["path"].get<std::string>();
  c.tokens = int_field(t, "tokens", "text", path, 1, std::numeric_limits<int64_t>::max());
  c.chunk = int(int_field(t, "chunk", "text", path, 0));

  // Every number takes at least two bytes of text: a shape the file cannot hold is
  // refused before anything that large is allocated.
  if (double(c.num_layers) * c.num_heads * c.bands() * 3 * 2 > double(bytes.size()))
    throw file_error(path, "model.num_layers x num_heads x head_dim/2 = " +
                               std::to_string(int64_t(c.num_layers) * c.num_heads * c.bands()) +
                               " numbers per array, more than the file holds");
  read_array(root, "qbar_re", c, c.qbar_re, path);
  read_array(root, "qbar_im", c, c.qbar_im, path);
  read_array(root, "q_abs_mean", c, c.q_abs_mean, path);
  for (int l = 0; l < c.num_layers; ++l)
    for (int h = 0; h < c.num_heads; ++h)
      for (int f = 0; f < c.bands(); ++f) {
        // The mean length is at least the length of the mean (triangle inequality).
        const size_t i = c.index(l, h, f);
        const double centre = std::hypot(double(c.qbar_re[i]), double(c.qbar_im[i]));
        if (!(c.q_abs_mean[i] >= centre * (1 - 1e-5) - 1e-30))
          throw file_error(path, "q_abs_mean[" + std::to_string(l) + "][" + std::to_string(h) + "][" +
                                     std::to_string(f) + "] is smaller than |qbar| there: not a mean of lengths");
      }
  // All zero passes the check above, and would score every key 0: TriAttention would
  // quietly become "keep the newest" (ties go to them).
  if (std::all_of(c.q_abs_mean.begin(), c.q_abs_mean.end(), [](float x) { return x == 0; }))
    throw file_error(path, "q_abs_mean is 0 everywhere: no query had any length there, so every key would score 0; "
                           "not a calibration");
  return c;
}
}  // namespace

TriCalibration TriCalibration::load(const std::string& path, const ModelConfig& expect) {
  TriCalibration c = load(path);
  c.check_matches(expect, path);
  return c;
}

}  // namespace kvscope
