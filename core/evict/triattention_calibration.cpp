// TriAttention's calibration: the query centres (TriCalibrator, calibrate) and the
// file that keeps them (TriCalibration::save / load). The scoring: triattention.cpp.
#include "evict/triattention_calibration.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model/qwen3.h"
#include "util/error.h"
#include "util/file.h"

namespace kvscope {

double tri_noise_ratio(int64_t n) { return std::sqrt(M_PI / (4.0 * double(n))); }

// ---------------------------------------------------------------------------
// Calibration
// ---------------------------------------------------------------------------

TriCalibrator::TriCalibrator(const ModelConfig& c)
    : TriCalibrator(c.num_layers, c.num_heads, c.head_dim, c.rope_theta) {
  shape_.num_kv_heads = c.num_kv_heads;
  shape_.hidden_size = c.hidden_size;
}

TriCalibrator::TriCalibrator(int num_layers, int num_heads, int head_dim, double rope_theta) {
  if (num_layers < 1 || num_heads < 1 || head_dim < 2 || head_dim % 2)
    throw Error("triattention: calibration needs layers >= 1, heads >= 1 and an even head_dim");
  shape_.num_layers = num_layers;
  shape_.num_heads = num_heads;
  shape_.head_dim = head_dim;
  shape_.rope_theta = rope_theta;
  const size_t n = size_t(num_layers) * num_heads * (head_dim / 2);
  sum_re_.assign(n, 0.0);
  sum_im_.assign(n, 0.0);
  sum_abs_.assign(n, 0.0);
}

void TriCalibrator::add(const float* queries, int T) {
  const int L = shape_.num_layers, H = shape_.num_heads, d = shape_.head_dim, half = d / 2;
  const size_t q_dim = size_t(H) * d;
  for (int l = 0; l < L; ++l)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < H; ++h) {
        const float* q = queries + (size_t(l) * T + t) * q_dim + size_t(h) * d;
        const size_t at = shape_.index(l, h, 0);
        for (int f = 0; f < half; ++f) {
          const double re = q[f], im = q[f + half];
          sum_re_[at + f] += re;
          sum_im_[at + f] += im;
          sum_abs_[at + f] += std::sqrt(re * re + im * im);
        }
      }
  tokens_ += T;
}

TriCalibration TriCalibrator::finish() const {
  if (tokens_ == 0) throw Error("triattention: calibration saw no tokens");
  TriCalibration c = shape_;
  const size_t n = sum_re_.size();
  c.qbar_re.resize(n);
  c.qbar_im.resize(n);
  c.q_abs_mean.resize(n);
  for (size_t i = 0; i < n; ++i) {
    c.qbar_re[i] = float(sum_re_[i] / double(tokens_));
    c.qbar_im[i] = float(sum_im_[i] / double(tokens_));
    c.q_abs_mean[i] = float(sum_abs_[i] / double(tokens_));
  }
  c.tokens = tokens_;
  return c;
}

TriCalibration calibrate(const Model& model, const std::vector<int>& tokens, const CalibrateOptions& options) {
  const ModelConfig& c = model.config;
  if (tokens.empty()) throw Error("calibrate: no tokens to calibrate on");
  const int chunk = options.chunk > 0 ? options.chunk : std::min(1024, c.max_position_embeddings);
  if (options.chunk < 0 || chunk > c.max_position_embeddings)
    throw Error("calibrate: chunk " + std::to_string(options.chunk) + " is outside [1, max_position_embeddings = " +
                std::to_string(c.max_position_embeddings) + "]");
  const int batch = std::max(1, options.batch);
  constexpr int kBlock = 16;

  TriCalibrator acc(c);
  RunState state;
  std::vector<float> queries;
  ForwardOptions fo;
  fo.queries = &queries;
  const int64_t total = int64_t(tokens.size());
  for (int64_t start = 0; start < total; start += chunk) {
    // A fresh sequence per chunk: its tokens sit at positions 0 .. len-1.
    const int len = int(std::min<int64_t>(chunk, total - start));
    PagedKvCache cache((len + kBlock - 1) / kBlock, kBlock, MemoryStrategy::HolesOnly);
    KvStorage kv(c, cache.num_blocks(), kBlock);
    const int seq = cache.add_sequence();
    for (int b = 0; b < len; b += batch) {
      const int T = std::min(batch, len - b);
      forward(model, cache, kv, seq, state, tokens.data() + start + b, T, fo);
      acc.add(queries.data(), T);
      if (options.progress) options.progress(start + b + T, total);
    }
  }
  TriCalibration cal = acc.finish();
  cal.chunk = chunk;
  return cal;
}

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
  s << ", rope_theta " << theta;
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

int64_t int_field(const nlohmann::json& j, const char* key, const std::string& where, const std::string& path,
                  int64_t min_value) {
  const nlohmann::json& v = field(j, key, where, path);
  if (!v.is_number_integer() || v.get<int64_t>() < min_value)
    throw file_error(path, where + "." + key + " must be an integer >= " + std::to_string(min_value));
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

  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw file_error(path, std::string("cannot open for writing: ") + std::strerror(errno));
  const std::string s = out.str();
  f.write(s.data(), std::streamsize(s.size()));
  f.close();
  if (!f) throw file_error(path, "write failed");
}

namespace {
TriCalibration load_json(const std::string& path, const std::string& bytes, const nlohmann::json& root);
}

TriCalibration TriCalibration::load(const std::string& path) {
  const std::string bytes = read_file(path);
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
  c.tokens = int_field(t, "tokens", "text", path, 1);
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
  return c;
}
}  // namespace

TriCalibration TriCalibration::load(const std::string& path, const ModelConfig& expect) {
  TriCalibration c = load(path);
  c.check_matches(expect, path);
  return c;
}

}  // namespace kvscope
