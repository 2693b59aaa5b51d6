// TriAttention: the no-un-rotation scoring formula against a direct computation
// on the tiny model's real cache, calibration, the calibration file, and the
// policy inside the engine.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "engine/engine.h"
#include "evict/triattention.h"
#include "model/ops.h"
#include "model/qwen3.h"
#include "run_kvscope.h"
#include "test_paths.h"
#include "util/error.h"
#include "util/file.h"
#include "util/max_abs_diff.h"

namespace kvscope {
namespace {

namespace fs = std::filesystem;
using cd = std::complex<double>;

// Token ids that look like text to no one but exercise the model: a fixed pseudo-random walk.
std::vector<int> some_tokens(int n, int vocab, int seed) {
  std::vector<int> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[i] = int((uint64_t(i + 1) * 2654435761u + uint64_t(seed) * 97) % uint64_t(vocab));
  return t;
}

// Inverse of model/ops.cpp's rope() on one head, with the same f32 angles.
std::vector<double> unrotate(const float* v, int d, int64_t pos, double theta) {
  const int half = d / 2;
  std::vector<double> k(static_cast<size_t>(d));
  for (int i = 0; i < half; ++i) {
    const float inv_freq = 1.0f / std::pow(float(theta), float(2 * i) / float(d));
    const float angle = float(pos) * inv_freq;
    const double c = std::cos(angle), s = std::sin(angle);
    k[i] = v[i] * c + v[i + half] * s;
    k[i + half] = v[i + half] * c - v[i] * s;
  }
  return k;
}

cd band(const double* x, int d, int f) { return {x[f], x[f + d / 2]}; }
cd qbar(const TriCalibration& c, int l, int h, int f) {
  return {c.qbar_re[c.index(l, h, f)], c.qbar_im[c.index(l, h, f)]};
}

// design.md's phase form, straight from the pre-RoPE key:
//   S_trig(D) = sum_f |qbar_f||k_f| cos(omega_f D + phi_f),  phi_f = arg(qbar_f conj(k_f)).
double s_trig_direct(const TriCalibration& c, int l, int h, const std::vector<double>& k, double D) {
  double s = 0;
  for (int f = 0; f < c.bands(); ++f) {
    const cd q = qbar(c, l, h, f), kf = band(k.data(), c.head_dim, f);
    s += std::abs(q) * std::abs(kf) * std::cos(tri_omega(f, c.head_dim, c.rope_theta) * D + std::arg(q * std::conj(kf)));
  }
  return s;
}
double mean_trig_direct(const TriCalibration& c, int l, int h, const std::vector<double>& k, int64_t t, int64_t p) {
  double s = 0;
  for (int i = 0; i < kTriOffsets; ++i) s += s_trig_direct(c, l, h, k, double(t - p) + tri_offset(i));
  return s / kTriOffsets;
}
double s_norm_direct(const TriCalibration& c, int l, int h, const std::vector<double>& k) {
  double s = 0;
  for (int f = 0; f < c.bands(); ++f)
    s += (c.q_abs_mean[c.index(l, h, f)] - std::abs(qbar(c, l, h, f))) * std::abs(band(k.data(), c.head_dim, f));
  return s;
}
// The scale the relative tolerance is taken against: sum_f |qbar_f||k_f| bounds |S_trig|.
double trig_scale(const TriCalibration& c, int l, int h, const std::vector<double>& k) {
  double s = 0;
  for (int f = 0; f < c.bands(); ++f) s += std::abs(qbar(c, l, h, f)) * std::abs(band(k.data(), c.head_dim, f));
  return s;
}

// A sequence of n tokens run through the model into a fresh paged cache.
struct Filled {
  PagedKvCache cache;
  KvStorage kv;
  int seq;
  Filled(const Model& m, const std::vector<int>& tokens, int block_size = 16)
      : cache(int(tokens.size() + block_size - 1) / block_size, block_size, MemoryStrategy::Compact),
        kv(m.config, cache.num_blocks(), block_size),
        seq(cache.add_sequence()) {
    RunState s;
    forward(m, cache, kv, seq, s, tokens.data(), int(tokens.size()));
  }
};

const Model& tiny() {
  static const Model m = load_model(test::tiny_model("tiny-untied"));
  return m;
}
const TriCalibration& tiny_calibration() {
  static const TriCalibration c = [] {
    CalibrateOptions o;
    o.chunk = 64;
    return calibrate(tiny(), some_tokens(192, tiny().config.vocab_size, 1), o);
  }();
  return c;
}

// Files under a folder of this process, removed at exit.
std::string temp_file(const std::string& name) {
  struct Dir {
    fs::path path = fs::temp_directory_path() / ("kvscope-tri-" + std::to_string(::getpid()));
    Dir() { fs::create_directories(path); }
    ~Dir() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  };
  static const Dir dir;
  return (dir.path / name).string();
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// kvscope::Error whose message names `path` and contains `what`.
template <class F>
void expect_error(F&& f, const std::string& path, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << "no error for " << path << " (" << what << ")";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  }
}

// ---------------------------------------------------------------------------
// (a) The formula on the real cache
// ---------------------------------------------------------------------------

// The un-rotation the direct computation relies on: layer 0's cached key, rotated
// back, is k_norm(k_proj(input_norm(embedding))) recomputed from the weights.
// The offsets the paper scores a key for: 1, 2, 4, ..., 65536 positions ahead. The
// reference scores above use the same tri_offset, so they alone cannot pin them.
TEST(TriAttention, OffsetsArePowersOfTwoFromOneTo65536) {
  ASSERT_EQ(kTriOffsets, 17);
  for (int i = 0; i < kTriOffsets; ++i) EXPECT_EQ(tri_offset(i), double(1 << i)) << i;
  EXPECT_EQ(tri_offset(0), 1.0);
  EXPECT_EQ(tri_offset(kTriOffsets - 1), 65536.0);
}

TEST(TriAttention, UnrotatedCachedKeyIsThePreRopeKey) {
  const Model& m = tiny();
  const ModelConfig& c = m.config;
  const std::vector<int> tokens = some_tokens(40, c.vocab_size, 2);
  Filled f(m, tokens);
  const LayerWeights& w = m.weights.layers[0];
  std::vector<float> x(size_t(c.hidden_size)), k(size_t(c.kv_dim()));
  const LiveSlots live = live_slots(f.cache, f.seq);
  double worst = 0;
  for (size_t j = 0; j < live.slots.size(); ++j) {
    embed(x.data(), m.weights.embed, &tokens[size_t(live.pos[j])], 1);
    rmsnorm(x.data(), x.data(), w.input_norm, 1, c.hidden_size, c.rms_norm_eps);
    matmul(k.data(), x.data(), w.k_proj, 1);
    rmsnorm(k.data(), k.data(), w.k_norm, c.num_kv_heads, c.head_dim, c.rms_norm_eps);
    for (int g = 0; g < c.num_kv_heads; ++g) {
      const auto back = unrotate(f.kv.key(0, live.slots[j]) + g * c.head_dim, c.head_dim, live.pos[j], c.rope_theta);
      const std::vector<double> before(k.begin() + g * c.head_dim, k.begin() + (g + 1) * c.head_dim);
      worst = std::max(worst, max_abs_diff(back, before));
    }
  }
  EXPECT_LT(worst, 1e-5);
}

// The sign convention pinned on the model itself: with one real query in place of
// qbar, the phase formula at D = s - p is the attention logit q~ . k~.
TEST(TriAttention, PhaseFormulaIsTheAttentionLogit) {
  const Model& m = tiny();
  const ModelConfig& c = m.config;
  const std::vector<int> tokens = some_tokens(40, c.vocab_size, 3);
  PagedKvCache cache(3, 16, MemoryStrategy::Compact);
  KvStorage kv(c, 3, 16);
  const int seq = cache.add_sequence();
  RunState s;
  std::vector<float> queries;
  ForwardOptions o;
  o.queries = &queries;
  forward(m, cache, kv, seq, s, tokens.data(), int(tokens.size()), o);
  const int T = int(tokens.size()), d = c.head_dim;
  const LiveSlots live = live_slots(cache, seq);

  for (int l = 0; l < c.num_layers; ++l)
    for (int t : {T - 1, T / 2})
      for (int h = 0; h < c.num_heads; ++h) {
        // One query as a "calibration" of a single token.
        TriCalibrator one(1, 1, d, c.rope_theta);
        std::vector<float> q(queries.begin() + (size_t(l) * T + t) * c.q_dim() + size_t(h) * d,
                             queries.begin() + (size_t(l) * T + t) * c.q_dim() + size_t(h + 1) * d);
        one.add(q.data(), 1);
        const TriCalibration qc = one.finish();
        rope(q.data(), 1, d, t, c.rope_theta);  // q~ as attention sees it
        for (size_t j = 0; j < live.slots.size(); ++j) {
          if (live.pos[j] > t) continue;
          const float* kt = kv.key(l, live.slots[j]) + (h / c.group_size()) * d;
          double logit = 0;
          for (int i = 0; i < d; ++i) logit += double(q[i]) * kt[i];
          const auto k = unrotate(kt, d, live.pos[j], c.rope_theta);
          EXPECT_NEAR(s_trig_direct(qc, 0, 0, k, double(t - live.pos[j])), logit, 1e-4 * trig_scale(qc, 0, 0, k))
              << "layer " << l << " query " << t << " head " << h << " key " << live.pos[j];
        }
      }
}

// The fast form (a dot product with the post-RoPE key) against the phase form on
// the un-rotated key, for every cached key, layer and head, at two round positions.
TEST(TriAttention, NoUnrotationFormulaEqualsDirectComputation) {
  const Model& m = tiny();
  const ModelConfig& c = m.config;
  const TriCalibration& cal = tiny_calibration();
  Filled f(m, some_tokens(100, c.vocab_size, 4));
  const LiveSlots live = live_slots(f.cache, f.seq);
  double worst_rel = 0;
  for (int64_t t : {int64_t(100), int64_t(357)}) {
    const TriScorer scorer(cal, t);
    for (size_t j = 0; j < live.slots.size(); ++j)
      for (int l = 0; l < c.num_layers; ++l)
        for (int h = 0; h < c.num_heads; ++h) {
          const float* kt = f.kv.key(l, live.slots[j]) + (h / c.group_size()) * c.head_dim;
          const auto k = unrotate(kt, c.head_dim, live.pos[j], c.rope_theta);
          const double scale = trig_scale(cal, l, h, k);
          const double fast = scorer.trig(l, h, kt), direct = mean_trig_direct(cal, l, h, k, t, live.pos[j]);
          worst_rel = std::max(worst_rel, std::abs(fast - direct) / scale);
          ASSERT_NEAR(fast, direct, 1e-4 * scale) << "t " << t << " key " << live.pos[j] << " layer " << l << " head " << h;
          ASSERT_NEAR(scorer.norm(l, h, kt), s_norm_direct(cal, l, h, k), 1e-5 * (1 + std::abs(s_norm_direct(cal, l, h, k))));
        }
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", worst_rel);
  RecordProperty("worst_relative_error", buf);
}

// The policy's per-token score: z-normalised per (layer, query head), max over the
// GQA group, mean over KV heads and layers; independent of the table order.
TEST(TriAttention, PolicyScoresAggregateTheDirectScores) {
  const Model& m = tiny();
  const ModelConfig& c = m.config;
  const TriCalibration& cal = tiny_calibration();
  Filled f(m, some_tokens(70, c.vocab_size, 5));
  LiveSlots live = live_slots(f.cache, f.seq);
  const std::vector<int64_t> pos = live.pos;  // Compact: table order is token order
  const int64_t now = 70;
  const int n = int(pos.size());

  std::vector<double> want(size_t(n), 0.0);
  for (int l = 0; l < c.num_layers; ++l) {
    std::vector<std::vector<double>> z(size_t(c.num_heads), std::vector<double>(size_t(n)));
    for (int h = 0; h < c.num_heads; ++h) {
      for (int j = 0; j < n; ++j) {
        const auto k = unrotate(f.kv.key(l, live.slots[j]) + (h / c.group_size()) * c.head_dim, c.head_dim, pos[j],
                                c.rope_theta);
        z[h][j] = mean_trig_direct(cal, l, h, k, now, pos[j]) + s_norm_direct(cal, l, h, k);
      }
      double mean = 0, var = 0;
      for (double v : z[h]) mean += v / n;
      for (double v : z[h]) var += (v - mean) * (v - mean) / n;
      for (double& v : z[h]) v = (v - mean) / std::sqrt(var);
    }
    for (int g = 0; g < c.num_kv_heads; ++g)
      for (int j = 0; j < n; ++j) {
        double mx = -1e300;
        for (int h = g * c.group_size(); h < (g + 1) * c.group_size(); ++h) mx = std::max(mx, z[h][j]);
        want[j] += mx / (c.num_kv_heads * c.num_layers);
      }
  }

  TriAttentionPolicy policy(std::make_shared<TriCalibration>(cal));
  EXPECT_FALSE(policy.needs_attention());
  EXPECT_EQ(policy.name(), "triattention");
  const ScoreContext ctx{pos, now, &c, &f.kv, &live};
  const std::vector<float> got = policy.scores(ctx);
  ASSERT_EQ(int(got.size()), n);
  for (int j = 0; j < n; ++j) EXPECT_NEAR(got[j], want[j], 1e-3) << "position " << pos[j];

  // The same slots listed in another table order: the scores follow the positions.
  std::mt19937 rng(9);
  std::vector<int> perm(static_cast<size_t>(n));
  for (int j = 0; j < n; ++j) perm[j] = j;
  std::shuffle(perm.begin(), perm.end(), rng);
  LiveSlots shuffled;
  for (int j : perm) {
    shuffled.slots.push_back(live.slots[j]);
    shuffled.pos.push_back(live.pos[j]);
    shuffled.table_index.push_back(live.table_index[j]);
  }
  const ScoreContext ctx2{pos, now, &c, &f.kv, &shuffled};
  EXPECT_EQ(policy.scores(ctx2), got);

  // Missing keys, or a calibration for another model: errors, not garbage.
  const ScoreContext bare{pos, now};
  EXPECT_THROW(policy.scores(bare), Error);
  TriCalibration other = cal;
  other.num_layers = 3;
  TriAttentionPolicy wrong(std::make_shared<TriCalibration>(other));
  EXPECT_THROW(wrong.scores(ctx), Error);
}

// A query head whose calibration is zero scores every key 0: its z-normalised scores
// are zeros (sd 0), not 0/0. Without that guard each key scored NaN and the round
// was refused ("scored NaN"). Head 0, the first of its group: std::max(m, NaN) keeps
// m, so a NaN in a later head of the group would not show.
TEST(TriAttention, AHeadThatScoresEveryKeyAlikeAddsZerosNotNaN) {
  const Model& m = tiny();
  const ModelConfig& c = m.config;
  TriCalibration cal = tiny_calibration();
  for (int l = 0; l < c.num_layers; ++l)
    for (int f = 0; f < cal.bands(); ++f) {
      const size_t i = cal.index(l, 0, f);  // query head 0 of every layer, first of its group
      cal.qbar_re[i] = cal.qbar_im[i] = cal.q_abs_mean[i] = 0;
    }
  Filled filled(m, some_tokens(70, c.vocab_size, 5));
  const LiveSlots live = live_slots(filled.cache, filled.seq);
  const ScoreContext ctx{live.pos, 70, &c, &filled.kv, &live};
  const std::vector<float> got = TriAttentionPolicy(std::make_shared<TriCalibration>(cal)).scores(ctx);
  ASSERT_EQ(got.size(), live.pos.size());
  for (size_t j = 0; j < got.size(); ++j) EXPECT_TRUE(std::isfinite(got[j])) << "position " << live.pos[j];
  EXPECT_NE(*std::min_element(got.begin(), got.end()), *std::max_element(got.begin(), got.end()))
      << "the other heads still rank the keys";
}

// A NaN in the second head of a group (std::max(m, NaN) keeps m) must not vanish from
// the group's max: it reaches select_keep, which refuses it by name.
TEST(TriAttention, ANaNInAnyHeadOfAGroupReachesTheScores) {
  const Model& m = tiny();
  const ModelConfig& c = m.config;
  ASSERT_GE(c.group_size(), 2) << "the test needs a second query head in the group";
  TriCalibration cal = tiny_calibration();
  for (int f = 0; f < cal.bands(); ++f) cal.qbar_re[cal.index(0, 1, f)] = std::nan("");  // layer 0, head 1
  Filled filled(m, some_tokens(70, c.vocab_size, 5));
  const LiveSlots live = live_slots(filled.cache, filled.seq);
  const ScoreContext ctx{live.pos, 70, &c, &filled.kv, &live};
  const std::vector<float> got = TriAttentionPolicy(std::make_shared<TriCalibration>(cal)).scores(ctx);
  ASSERT_EQ(got.size(), live.pos.size());
  for (size_t j = 0; j < got.size(); ++j) EXPECT_TRUE(std::isnan(got[j])) << "position " << live.pos[j];
  EvictionSchedule schedule;
  schedule.budget = 32;
  EXPECT_THROW(select_keep(live.pos, got, schedule), Error);
}

// ---------------------------------------------------------------------------
// (b) Calibration
// ---------------------------------------------------------------------------

TEST(TriAttention, CalibratorRecoversKnownCentres) {
  // Queries alternate between two known vectors per (layer, head, band): the
  // centre is their midpoint, the mean length the mean of their lengths.
  const int L = 2, H = 3, d = 8, half = d / 2;
  auto z = [](int which, int l, int h, int f) {
    return which == 0 ? cd(1.0 + l + 0.5 * f, -0.25 * h) : cd(-0.5 + 0.1 * h, 2.0 - f + 0.3 * l);
  };
  auto batch = [&](int first, int T) {  // tokens first .. first+T-1, layout [L, T, H*d]
    std::vector<float> q(size_t(L) * T * H * d);
    for (int l = 0; l < L; ++l)
      for (int t = 0; t < T; ++t)
        for (int h = 0; h < H; ++h)
          for (int f = 0; f < half; ++f) {
            const cd v = z((first + t) % 2, l, h, f);
            float* row = q.data() + (size_t(l) * T + t) * H * d + size_t(h) * d;
            row[f] = float(v.real());
            row[f + half] = float(v.imag());
          }
    return q;
  };
  TriCalibrator acc(L, H, d, 1e6);
  EXPECT_THROW(acc.finish(), Error);
  acc.add(batch(0, 4).data(), 4);
  acc.add(batch(4, 6).data(), 6);
  const TriCalibration c = acc.finish();
  EXPECT_EQ(c.tokens, 10);
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < H; ++h)
      for (int f = 0; f < half; ++f) {
        const cd a = z(0, l, h, f), b = z(1, l, h, f), centre = (a + b) / 2.0;
        EXPECT_NEAR(c.qbar_re[c.index(l, h, f)], centre.real(), 1e-6);
        EXPECT_NEAR(c.qbar_im[c.index(l, h, f)], centre.imag(), 1e-6);
        EXPECT_NEAR(c.q_abs_mean[c.index(l, h, f)], (std::abs(a) + std::abs(b)) / 2, 1e-6);
      }
}

TEST(TriAttention, CalibrateRunsTheModelInFreshChunks) {
  const Model& m = tiny();
  const ModelConfig& c = m.config;
  const std::vector<int> tokens = some_tokens(100, c.vocab_size, 6);
  CalibrateOptions o;
  o.chunk = 40;
  o.batch = 16;
  std::vector<std::pair<int64_t, int64_t>> calls;
  o.progress = [&](int64_t done, int64_t total) { calls.emplace_back(done, total); };
  const TriCalibration got = calibrate(m, tokens, o);
  ASSERT_FALSE(calls.empty());
  EXPECT_EQ(calls.back(), std::make_pair(int64_t(100), int64_t(100)));
  for (size_t i = 1; i < calls.size(); ++i) EXPECT_GT(calls[i].first, calls[i - 1].first);
  EXPECT_EQ(got.tokens, 100);
  EXPECT_EQ(got.chunk, 40);
  EXPECT_EQ(got.num_kv_heads, c.num_kv_heads);

  // The same by hand: chunks [0,40), [40,80), [80,100), each from position 0, one forward each.
  TriCalibrator acc(c);
  for (int start = 0; start < 100; start += 40) {
    const int len = std::min(40, 100 - start);
    PagedKvCache cache(3, 16, MemoryStrategy::HolesOnly);
    KvStorage kv(c, 3, 16);
    RunState s;
    std::vector<float> q;
    ForwardOptions fo;
    fo.queries = &q;
    forward(m, cache, kv, cache.add_sequence(), s, tokens.data() + start, len, fo);
    acc.add(q.data(), len);
  }
  const TriCalibration want = acc.finish();
  for (size_t i = 0; i < want.qbar_re.size(); ++i) {
    EXPECT_NEAR(got.qbar_re[i], want.qbar_re[i], 1e-5);
    EXPECT_NEAR(got.qbar_im[i], want.qbar_im[i], 1e-5);
    EXPECT_NEAR(got.q_abs_mean[i], want.q_abs_mean[i], 1e-5);
  }

  o.chunk = c.max_position_embeddings + 1;
  EXPECT_THROW(calibrate(m, tokens, o), Error);
  EXPECT_THROW(calibrate(m, {}, {}), Error);
}

// ---------------------------------------------------------------------------
// (c) The file
// ---------------------------------------------------------------------------

TEST(TriAttention, SaveLoadRoundTrip) {
  TriCalibration c = tiny_calibration();
  c.model = "tests/models/tiny-untied";
  c.text = "some \"quoted\" text.txt";
  const std::string path = temp_file("round_trip.json");
  c.save(path);
  const TriCalibration back = TriCalibration::load(path, tiny().config);
  EXPECT_EQ(back.num_layers, c.num_layers);
  EXPECT_EQ(back.num_heads, c.num_heads);
  EXPECT_EQ(back.num_kv_heads, c.num_kv_heads);
  EXPECT_EQ(back.head_dim, c.head_dim);
  EXPECT_EQ(back.hidden_size, c.hidden_size);
  EXPECT_EQ(back.rope_theta, c.rope_theta);
  EXPECT_EQ(back.model, c.model);
  EXPECT_EQ(back.text, c.text);
  EXPECT_EQ(back.tokens, c.tokens);
  EXPECT_EQ(back.chunk, c.chunk);
  EXPECT_EQ(back.qbar_re, c.qbar_re);  // bit for bit: 9 significant digits round-trip an f32
  EXPECT_EQ(back.qbar_im, c.qbar_im);
  EXPECT_EQ(back.q_abs_mean, c.q_abs_mean);
}

TEST(TriAttention, LoadErrorsNameTheFile) {
  TriCalibration c = tiny_calibration();
  const std::string good = temp_file("good.json");
  c.save(good);
  const std::string text = read_file(good);

  const std::string truncated = temp_file("truncated.json");
  write_text(truncated, text.substr(0, text.size() / 2));
  expect_error([&] { TriCalibration::load(truncated); }, truncated, "not valid JSON");

  const std::string bad = temp_file("bad.json");
  write_text(bad, "{\"format\": kvscope");
  expect_error([&] { TriCalibration::load(bad); }, bad, "not valid JSON");

  const std::string other = temp_file("other.json");
  write_text(other, "{\"format\": \"something else\"}");
  expect_error([&] { TriCalibration::load(other); }, other, "not a TriAttention calibration");

  // A valid file for a model of another shape.
  ModelConfig bigger = tiny().config;
  bigger.num_layers = 3;
  expect_error([&] { TriCalibration::load(good, bigger); }, good, "3 layers");
  ModelConfig other_theta = tiny().config;
  other_theta.rope_theta = 10000;
  expect_error([&] { TriCalibration::load(good, other_theta); }, good, "rope_theta");

  // Arrays that disagree with the shape the file declares.
  nlohmann::json j = nlohmann::json::parse(text);
  j["qbar_im"][1][2].erase(0);
  const std::string short_row = temp_file("short_row.json");
  write_text(short_row, j.dump());
  expect_error([&] { TriCalibration::load(short_row); }, short_row, "qbar_im[1][2] must hold 16 bands");

  j = nlohmann::json::parse(text);
  j["model"]["num_heads"] = 5;
  const std::string heads = temp_file("heads.json");
  write_text(heads, j.dump());
  expect_error([&] { TriCalibration::load(heads); }, heads, "must list 5 heads");

  // A count past what an int holds: 2^32 + 2 once read as 2 layers, the file's real
  // count, and passed.
  j = nlohmann::json::parse(text);
  j["model"]["num_layers"] = (int64_t(1) << 32) + 2;
  const std::string wraps = temp_file("wraps.json");
  write_text(wraps, j.dump());
  expect_error([&] { TriCalibration::load(wraps); }, wraps, "model.num_layers must be an integer from 1 to 2147483647");

  j = nlohmann::json::parse(text);
  j["q_abs_mean"][0][0][3] = nullptr;  // what a NaN becomes in JSON
  const std::string nan = temp_file("nan.json");
  write_text(nan, j.dump());
  expect_error([&] { TriCalibration::load(nan); }, nan, "q_abs_mean[0][0][3] is not a number");

  j = nlohmann::json::parse(text);
  j["qbar_re"][1][0][4] = 1e300;  // a double, but past the largest float
  const std::string huge = temp_file("huge.json");
  write_text(huge, j.dump());
  expect_error([&] { TriCalibration::load(huge); }, huge, "qbar_re[1][0][4] is 1e+300, not a finite float");

  j = nlohmann::json::parse(text);
  j["q_abs_mean"][0][1][2] = 0.0;
  const std::string shorter = temp_file("shorter.json");
  write_text(shorter, j.dump());
  expect_error([&] { TriCalibration::load(shorter); }, shorter, "smaller than |qbar|");

  j = nlohmann::json::parse(text);  // all zero: every key would score 0 (it was read, and ran as "keep the newest")
  for (const char* array : {"qbar_re", "qbar_im", "q_abs_mean"})
    for (auto& layer : j[array])
      for (auto& head : layer)
        for (auto& band : head) band = 0.0;
  const std::string zero = temp_file("zero.json");
  write_text(zero, j.dump());
  expect_error([&] { TriCalibration::load(zero); }, zero, "q_abs_mean is 0 everywhere");

  j = nlohmann::json::parse(text);
  j["version"] = 2;  // a later format: refused, not read as this one
  const std::string later = temp_file("later.json");
  write_text(later, j.dump());
  expect_error([&] { TriCalibration::load(later); }, later,
               "calibration version 2 is not supported (this kvscope reads version 1)");

  j = nlohmann::json::parse(text);
  j["qbar_re"].erase(1);
  const std::string layers = temp_file("layers.json");
  write_text(layers, j.dump());
  expect_error([&] { TriCalibration::load(layers); }, layers,
               "qbar_re must be a list of 2 layers (model.num_layers), it has 1");

  // A shape whose arrays could not fit in the file is refused before they are allocated.
  j = nlohmann::json::parse(text);
  j["model"]["num_layers"] = 1000000;
  const std::string vast = temp_file("vast.json");
  write_text(vast, j.dump());
  expect_error([&] { TriCalibration::load(vast); }, vast,
               "model.num_layers x num_heads x head_dim/2 = 64000000 numbers per array, more than the file holds");

  const std::string missing = temp_file("missing.json");
  EXPECT_THROW(TriCalibration::load(missing), Error);

  // Writing: NaN refused, unwritable path named.
  TriCalibration broken = c;
  broken.qbar_re[5] = NAN;
  const std::string nan_out = temp_file("nan_out.json");
  expect_error([&] { broken.save(nan_out); }, nan_out, "non-finite");
  EXPECT_FALSE(fs::exists(nan_out));
  broken = c;
  broken.num_heads += 1;  // the arrays hold one head fewer than the shape says
  expect_error([&] { broken.save(nan_out); }, nan_out, "calibration arrays do not match its shape; nothing written");
  EXPECT_FALSE(fs::exists(nan_out));
  const std::string nowhere = temp_file("no/such/folder/cal.json");
  expect_error([&] { c.save(nowhere); }, nowhere, "cannot write: No such file");  // as check_writable says
}

// ---------------------------------------------------------------------------
// (d) Sanity: a key pointing along the query centre outranks its opposite
// ---------------------------------------------------------------------------

TEST(TriAttention, KeysAlongTheQueryCentreOutscoreOppositeKeys) {
  // A one-layer model shape with 2 query heads on 1 KV head, head_dim 16. The
  // centre sits in the two lowest-frequency bands (omega ~ 3e-5 and 6e-6), where
  // cos(omega D) stays positive for every offset: a key along qbar there faces the
  // future queries, its negation faces away. Pairs share everything else.
  ModelConfig c;
  c.num_layers = 1;
  c.num_heads = 2;
  c.num_kv_heads = 1;
  c.head_dim = 16;
  c.hidden_size = 32;
  c.rope_theta = 1e6;
  const int d = 16, half = 8, pairs = 20, bs = 8;
  TriCalibration cal;
  cal.num_layers = 1, cal.num_heads = 2, cal.head_dim = d, cal.rope_theta = 1e6;
  cal.num_kv_heads = 1, cal.hidden_size = 32;
  cal.qbar_re.assign(size_t(2 * half), 0.0f);
  cal.qbar_im.assign(size_t(2 * half), 0.0f);
  cal.q_abs_mean.assign(size_t(2 * half), 0.5f);
  const cd centre[2] = {{0.8, -0.6}, {-0.3, 1.1}};  // bands 6 and 7
  for (int h = 0; h < 2; ++h)
    for (int f = 6; f < 8; ++f) {
      cal.qbar_re[cal.index(0, h, f)] = float(centre[f - 6].real() * (1 + h));
      cal.qbar_im[cal.index(0, h, f)] = float(centre[f - 6].imag() * (1 + h));
      cal.q_abs_mean[cal.index(0, h, f)] = float(std::abs(centre[f - 6]) * (1 + h) * 1.5);
    }

  std::mt19937 rng(3);
  std::normal_distribution<double> normal;
  const int n = 2 * pairs;
  PagedKvCache cache((n + bs - 1) / bs, bs, MemoryStrategy::Compact);
  KvStorage kv(c, cache.num_blocks(), bs);
  const int seq = cache.add_sequence();
  std::vector<std::vector<double>> pre(static_cast<size_t>(n));
  for (int i = 0; i < pairs; ++i) {
    std::vector<double> base(static_cast<size_t>(d));
    for (double& v : base) v = normal(rng);
    const double len = 0.5 + std::abs(normal(rng));
    for (int sign : {+1, -1}) {
      std::vector<double> k = base;
      for (int f = 6; f < 8; ++f) {
        const cd along = centre[f - 6] / std::abs(centre[f - 6]) * (sign * len);
        k[f] = along.real();
        k[f + half] = along.imag();
      }
      const SlotRef slot = cache.append(seq);
      const int64_t p = cache.position(slot);
      std::vector<float> rotated(k.begin(), k.end());
      rope(rotated.data(), 1, d, int(p), c.rope_theta);
      std::copy(rotated.begin(), rotated.end(), kv.key(0, slot));
      pre[size_t(p)] = k;
    }
  }
  const int64_t now = n;

  // The phase formula at small distances.
  for (int i = 0; i < pairs; ++i)
    for (double D : {1.0, 2.0, 5.0, 20.0}) {
      EXPECT_GT(s_trig_direct(cal, 0, 0, pre[2 * i], D), 0.0);
      EXPECT_LT(s_trig_direct(cal, 0, 0, pre[2 * i + 1], D), 0.0);
    }

  // The policy's scores, through the cache.
  LiveSlots live = live_slots(cache, seq);
  const std::vector<int64_t> pos = live.pos;
  TriAttentionPolicy policy(std::make_shared<TriCalibration>(cal));
  const std::vector<float> s = policy.scores(ScoreContext{pos, now, &c, &kv, &live});
  double aligned = 0, opposite = 0;
  for (int i = 0; i < pairs; ++i) {
    EXPECT_GT(s[2 * i], s[2 * i + 1]) << "pair " << i;
    aligned += s[2 * i];
    opposite += s[2 * i + 1];
  }
  EXPECT_GT(aligned, opposite);
}

// ---------------------------------------------------------------------------
// (e) In the engine
// ---------------------------------------------------------------------------

TEST(TriAttention, EnginePrunesToBudget) {
  const Model& m = tiny();
  auto cal = std::make_shared<const TriCalibration>(tiny_calibration());
  for (MemoryStrategy strategy : {MemoryStrategy::Compact, MemoryStrategy::ReuseHoles}) {
    EngineConfig cfg;
    cfg.num_blocks = 8;
    cfg.block_size = 16;
    cfg.strategy = strategy;
    cfg.schedule = {24, 8, 4, 8};  // budget, slack, sinks, recent
    cfg.policy = [cal] { return std::make_unique<TriAttentionPolicy>(cal); };
    Engine engine(m, cfg);
    const int seq = engine.add_sequence();
    const float* logits = engine.prefill(seq, some_tokens(20, m.config.vocab_size, 7));
    int rounds = 0;
    for (int step = 0; step < 90; ++step) {
      const int token = int(std::max_element(logits, logits + m.config.vocab_size) - logits);
      logits = engine.decode(seq, token);
      const SequenceStats st = engine.stats(seq);
      EXPECT_LT(st.live, cfg.schedule.budget + cfg.schedule.slack);
      if (st.rounds == rounds) continue;
      rounds = st.rounds;
      // Just after a round: exactly the budget, sinks and the newest tokens among them.
      std::vector<int64_t> live = engine.cache().live_positions(seq);
      std::sort(live.begin(), live.end());
      ASSERT_EQ(int(live.size()), cfg.schedule.budget) << strategy_name(strategy);
      for (int64_t p = 0; p < cfg.schedule.sinks; ++p) EXPECT_TRUE(std::binary_search(live.begin(), live.end(), p));
      for (int64_t p = st.tokens_seen - cfg.schedule.recent; p < st.tokens_seen; ++p)
        EXPECT_TRUE(std::binary_search(live.begin(), live.end(), p)) << p;
    }
    EXPECT_GE(rounds, 8) << strategy_name(strategy);
    EXPECT_EQ(engine.stats(seq).tokens_seen, 110);
  }
}

// The noise floor calibrate prints: n unit vectors at random angles, the length of
// their mean, averaged over many draws, against sqrt(pi / (4 n)).
TEST(TriNoise, RandomDirectionsGiveSqrtPiOver4n) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> angle(0, 2 * M_PI);
  for (int n : {16, 64, 256}) {
    const int draws = 4000;
    double sum = 0;
    for (int d = 0; d < draws; ++d) {
      cd mean = 0;
      for (int i = 0; i < n; ++i) mean += std::polar(1.0, angle(rng));
      sum += std::abs(mean) / n;  // |qbar| / m with every |q| = 1
    }
    EXPECT_NEAR(sum / draws, tri_noise_ratio(n), 0.04 * tri_noise_ratio(n)) << n;  // the draws' error is ~1.2%
  }
  EXPECT_NEAR(tri_noise_ratio(1), 0.886, 0.001);  // one token: the true ratio is 1, the formula is asymptotic
}

// kvscope calibrate on the tiny model: the table, and the noise floor for the tokens used.
TEST(TriCalibrateCommand, PrintsTheTableAndTheNoiseFloor) {
  const std::string out = test::binary_path("calibrate_" + std::to_string(::getpid()) + ".json");
  const test::ProgramRun r = test::run_kvscope("calibrate --model " + test::tiny_model("tiny-tied") + " --text " +
                                               test::source_path("assets/model/heldout.txt") +
                                               " --max-tokens 64 --out " + out);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("tokens used: 64 of "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("| layer | mean ratio | least concentrated head | most concentrated head |"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("would give about sqrt(pi / (4 n)) = 0.111 over these n = 64 tokens"), std::string::npos)
      << r.output;
  // Each layer's row, worked out again from the file it wrote: per head the mean
  // over bands of |qbar_f| / m_f, then the heads' mean, least and most.
  const TriCalibration cal = TriCalibration::load(out);
  EXPECT_EQ(cal.tokens, 64);
  for (int l = 0; l < cal.num_layers; ++l) {
    std::vector<double> heads;
    for (int h = 0; h < cal.num_heads; ++h) {
      double sum = 0;
      for (int f = 0; f < cal.bands(); ++f) {
        const size_t i = cal.index(l, h, f);
        sum += std::abs(std::complex<double>(cal.qbar_re[i], cal.qbar_im[i])) / cal.q_abs_mean[i];
      }
      heads.push_back(sum / cal.bands());
    }
    char row[128];
    std::snprintf(row, sizeof row, "| %d | %.3f | %.3f | %.3f |", l,
                  std::accumulate(heads.begin(), heads.end(), 0.0) / double(heads.size()),
                  *std::min_element(heads.begin(), heads.end()), *std::max_element(heads.begin(), heads.end()));
    EXPECT_NE(r.output.find(row), std::string::npos) << row << "\n" << r.output;
  }
  std::remove(out.c_str());
}

}  // namespace
}  // namespace kvscope
