#include "evict/triattention.h"

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

// ============================================================================
// Scoring a post-RoPE key without un-rotating it: the derivation
// ============================================================================
//
// 1. Bands as complex numbers. Split a head vector x of d numbers into d/2 bands:
//        x_f = x[f] + i x[f + d/2],      f = 0 .. d/2 - 1      (rotate-half pairing)
//    A dot product is a sum over bands:
//        x . y = sum_f (x[f] y[f] + x[f+d/2] y[f+d/2]) = sum_f Re(x_f conj(y_f)).
//
// 2. RoPE multiplies each band by a phase. model/ops.cpp rotates a token at
//    position p by the angle a = omega_f p, omega_f = theta^(-2f/d):
//        v[f]       = x[f] cos a - x[f+d/2] sin a
//        v[f + d/2] = x[f+d/2] cos a + x[f] sin a
//    which is exactly (x[f] + i x[f+d/2]) (cos a + i sin a):  v_f = x_f e^{+i omega_f p}.
//    So a cached key is  k~_f = k_f e^{+i omega_f p}  and a query at position s
//    is  q~_f = q_f e^{+i omega_f s}.
//
// 3. The attention logit (before the 1/sqrt(d) scale) is therefore
//        q~ . k~ = sum_f Re(q_f conj(k_f) e^{i omega_f (s - p)})
//                = sum_f |q_f||k_f| cos(omega_f D + phi_f),   D = s - p,  phi_f = arg(q_f conj(k_f)):
//    it depends on the positions only through the distance D. Replacing the
//    query by its calibrated centre qbar_f gives the paper's S_trig(D).
//
// 4. Now write S_trig with the key as it sits in the cache, k_f = k~_f e^{-i omega_f p}:
//        qbar_f conj(k_f) e^{i omega_f D} = qbar_f conj(k~_f) e^{+i omega_f p} e^{i omega_f D}
//                                         = (A_f + i B_f) e^{i omega_f tau},
//        A_f + i B_f = qbar_f conj(k~_f),   tau = p + D = t + delta   (D = t - p + delta).
//    (t is the round position, ScoreContext::now: the position of the next token.)
//    The key's own position cancels: tau is the position of the future query.
//    Taking the real part,
//        S_trig = sum_f Re((A_f + i B_f)(cos omega_f tau + i sin omega_f tau))
//               = sum_f (A_f cos(omega_f tau) - B_f sin(omega_f tau)).
//    Sign: MINUS B sin, for RoPE that multiplies by e^{+i angle} as ops.cpp does
//    (with e^{-i angle} it would be plus). tests/triattention_test.cpp checks it
//    against the un-rotated key and against the model's real attention logits.
//
// 5. The mean over the 17 offsets is linear, so it moves onto the trigonometric
//    factors, which depend only on the band and the round position t:
//        C_f = mean_delta cos(omega_f (t + delta)),   S_f = mean_delta sin(omega_f (t + delta))
//        mean_delta S_trig = sum_f (A_f C_f - B_f S_f).
//    Expanding A + iB = (qr + i qi)(kr - i ki) with k~_f = kr + i ki:
//        A_f C_f - B_f S_f = kr (qr C_f - qi S_f) + ki (qi C_f + qr S_f).
//    With u_f + i v_f = qbar_f (C_f + i S_f), i.e. the query centre rotated to the
//    future positions and averaged over them, the whole term is one dot product:
//        mean_delta S_trig = w . k~,     w = [u_0 .. u_{d/2-1}, v_0 .. v_{d/2-1}].
//    Per round: d/2 x 17 cosines and sines, then one w per (layer, query head).
//    Per key and head: a dot product of d numbers, as in attention itself.
//    Precision: the angles omega_f tau are taken in double with the f32 omega_f of
//    ops.cpp; the cached keys carry ops.cpp's f32 angle float(p) * omega_f, whose
//    rounding (about p * 6e-8 rad) is the only difference from the un-rotated form.
//
// 6. S_norm = sum_f (m_f - |qbar_f|) |k_f| needs only |k_f| = |k~_f| (a rotation
//    keeps lengths): the part of the query length that the centre does not
//    explain, credited in proportion to the key's length in each band.
//
// Where this follows the paper and design.md, and where kvscope simplifies:
//   follows     calibration on pre-RoPE queries after q_norm; qbar_f, m_f per
//               (layer, query head, band); S_trig + S_norm; 17 geometric offsets;
//               z-normalisation per head; max over the query heads of a GQA group.
//   simplifies  one selection for the whole sequence. design.md (from the authors'
//               code) ends with one score per (KV head, token), averaged over layers:
//               each KV head keeps its own tokens. kvscope's cache keeps or drops a
//               token in every layer and head at once (evict/policy.h), so the
//               per-KV-head scores are also averaged over the KV heads.
//               The round schedule (prune at budget + slack, protect the newest
//               `recent` tokens and the sinks) is the engine's EvictionSchedule; the
//               paper's setting is slack 128, recent 128.
// ============================================================================

double tri_noise_ratio(int64_t n) { return std::sqrt(M_PI / (4.0 * double(n))); }

double tri_omega(int band, int head_dim, double theta) {
  // Same expression, same f32 rounding as rope() in model/ops.cpp.
  return double(1.0f / std::pow(float(theta), float(2 * band) / float(head_dim)));
}

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

// ---------------------------------------------------------------------------
// Scoring
// ---------------------------------------------------------------------------

TriScorer::TriScorer(const TriCalibration& cal, int64_t t) : heads_(cal.num_heads), dim_(cal.head_dim) {
  const int half = cal.bands();
  // C_f and S_f: the mean over the offsets of cos and sin of omega_f (t + delta), in double.
  std::vector<double> C(size_t(half), 0.0), S(size_t(half), 0.0);
  for (int f = 0; f < half; ++f) {
    const double omega = tri_omega(f, cal.head_dim, cal.rope_theta);
    for (int i = 0; i < kTriOffsets; ++i) {
      const double a = omega * (double(t) + tri_offset(i));
      C[f] += std::cos(a);
      S[f] += std::sin(a);
    }
    C[f] /= kTriOffsets;
    S[f] /= kTriOffsets;
  }
  const size_t rows = size_t(cal.num_layers) * cal.num_heads;
  w_.resize(rows * dim_);
  gap_.resize(rows * half);
  for (size_t r = 0; r < rows; ++r)
    for (int f = 0; f < half; ++f) {
      const size_t i = r * half + f;
      const double qr = cal.qbar_re[i], qi = cal.qbar_im[i];
      w_[r * dim_ + f] = float(qr * C[f] - qi * S[f]);         // u_f = Re(qbar_f (C_f + i S_f))
      w_[r * dim_ + f + half] = float(qi * C[f] + qr * S[f]);  // v_f = Im(qbar_f (C_f + i S_f))
      gap_[i] = float(double(cal.q_abs_mean[i]) - std::hypot(qr, qi));
    }
}

double TriScorer::trig(int layer, int head, const float* key) const {
  const float* w = future_query(layer, head);
  double s = 0;
  for (int i = 0; i < dim_; ++i) s += double(w[i]) * key[i];
  return s;
}

double TriScorer::norm(int layer, int head, const float* key) const {
  const int half = dim_ / 2;
  const float* g = norm_weights(layer, head);
  double s = 0;
  for (int f = 0; f < half; ++f) s += double(g[f]) * std::sqrt(double(key[f]) * key[f] + double(key[f + half]) * key[f + half]);
  return s;
}

// r = (r - mean(r)) / sd(r) over the n live keys: one query head's scores on a common
// scale. A head whose scores are all equal (sd ~ 0) gives zeros.
static void z_normalise(double* r, int n) {
  double mean = 0, var = 0;
  for (int j = 0; j < n; ++j) mean += r[j];
  mean /= n;
  for (int j = 0; j < n; ++j) var += (r[j] - mean) * (r[j] - mean);
  const double sd = std::sqrt(var / n);
  const double inv = sd > 1e-9 * std::max(1.0, std::abs(mean)) ? 1.0 / sd : 0.0;
  for (int j = 0; j < n; ++j) r[j] = (r[j] - mean) * inv;
}

// out[j] += mean over the K KV heads of (max over the G query heads of its group of raw[h][j]).
//   raw: [K * G, n]   out: [n]
static void add_mean_of_group_max(double* out, const double* raw, int K, int G, int n) {
  for (int g = 0; g < K; ++g)
    for (int j = 0; j < n; ++j) {
      double m = raw[size_t(g * G) * n + j];
      for (int h = g * G + 1; h < (g + 1) * G; ++h) m = std::max(m, raw[size_t(h) * n + j]);
      out[j] += m / K;
    }
}

std::vector<float> triattention_scores(const TriCalibration& cal, const ScoreContext& ctx) {
  if ((!ctx.kv && !ctx.backend) || !ctx.slots || !ctx.config)
    throw Error("triattention: the score context carries no cached keys (kv or backend, slots and config are needed)");
  const ModelConfig& c = *ctx.config;
  cal.check_matches(c, "triattention calibration" + (cal.text.empty() ? std::string() : " (text " + cal.text + ")"));
  const int n = int(ctx.pos.size());
  const LiveSlots& live = *ctx.slots;
  if (int(live.slots.size()) != n || int(live.pos.size()) != n)
    throw Error("triattention: the score context's slots and positions disagree (" + std::to_string(live.slots.size()) +
                " slots, " + std::to_string(n) + " positions)");
  if (n == 0) return {};

  // Table order -> ctx.pos order (ctx.pos is ascending).
  std::vector<int> where(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const auto it = std::lower_bound(ctx.pos.begin(), ctx.pos.end(), live.pos[i]);
    if (it == ctx.pos.end() || *it != live.pos[i])
      throw Error("triattention: slot position " + std::to_string(live.pos[i]) + " is not among the live positions");
    where[i] = int(it - ctx.pos.begin());
  }

  // The raw score of every key for every (layer, query head): mean over delta of
  // S_trig (w . k~) plus S_norm, computed where the keys are (CPU or GPU).
  const TriScorer scorer(cal, ctx.now);
  const int L = c.num_layers, H = c.num_heads, K = c.num_kv_heads, G = c.group_size();
  std::vector<double> table_raw(size_t(L) * H * n);  // [L, H, n] in table order
  if (ctx.backend)
    ctx.backend->key_scores(table_raw.data(), scorer.future_query(0, 0), scorer.norm_weights(0, 0), live.slots);
  else
    key_scores(table_raw.data(), scorer.future_query(0, 0), scorer.norm_weights(0, 0), live.slots, *ctx.kv,
               {H, K, c.head_dim});

  std::vector<double> per_layer(size_t(L) * n, 0.0);  // [L, n] mean over KV heads of the group max
  for (int l = 0; l < L; ++l) {
    std::vector<double> raw(size_t(H) * n);  // [H, n] in ctx.pos order
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < n; ++i) raw[size_t(h) * n + where[i]] = table_raw[(size_t(l) * H + h) * n + i];
    for (int h = 0; h < H; ++h) z_normalise(raw.data() + size_t(h) * n, n);
    add_mean_of_group_max(per_layer.data() + size_t(l) * n, raw.data(), K, G, n);
  }

  std::vector<float> scores(size_t(n), 0.0f);
  for (int j = 0; j < n; ++j) {
    double s = 0;
    for (int l = 0; l < L; ++l) s += per_layer[size_t(l) * n + j];  // fixed order: deterministic
    scores[j] = float(s / L);
  }
  return scores;
}

TriAttentionPolicy::TriAttentionPolicy(std::shared_ptr<const TriCalibration> calibration)
    : cal_(std::move(calibration)) {
  if (!cal_) throw Error("triattention: no calibration given");
}

}  // namespace kvscope
