// Chapter 6: scoring without scores (TriAttention), on the bundled model.
//
// 1. The calibration: how concentrated the pre-RoPE queries are, band by band.
// 2. One eviction round on held-out text: at position t = 512 each policy keeps
//    128 of the 512 tokens (4 sinks + 32 recent + the 92 best of the middle), and
//    we compare its picks with the oracle's (the tokens the next 256 queries of
//    the full-cache run attend to most): how many it shares, where the picks lie
//    by distance, and how many blocks of 16 they touch.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <numeric>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "cache/kv_storage.h"
#include "eval/windows.h"
#include "evict/oracle.h"
#include "evict/policy.h"
#include "evict/snapkv.h"
#include "evict/triattention.h"
#include "model/qwen3.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"
#include "tutorial.h"
#include "util/splitmix64.h"

using namespace kvscope;
using namespace kvscope::tutorial;

constexpr int kT = 512;        // the round's position: tokens 0..511 are cached
constexpr int kFuture = 256;   // the oracle looks at the next 256 queries
constexpr int kBudget = 128, kSinks = 4, kRecent = 32, kBlock = 16;
const char* kPolicies[] = {"oracle", "triattention", "h2o", "snapkv", "streaming", "random"};  // round_scores' order
constexpr int kN = int(std::size(kPolicies));

// How concentrated one band's queries are, |qbar_f| / m_f, over the model's heads.
struct Concentration {
  double mean = 0, least = 1, most = 0;
};

// Per band f: the mean over every layer's heads, and the least and most concentrated head.
std::vector<Concentration> concentration(const TriCalibration& cal) {
  std::vector<Concentration> r(size_t(cal.bands()));
  for (int l = 0; l < cal.num_layers; ++l)
    for (int h = 0; h < cal.num_heads; ++h)
      for (int f = 0; f < cal.bands(); ++f) {
        const size_t i = cal.index(l, h, f);
        const double ratio = std::hypot(double(cal.qbar_re[i]), double(cal.qbar_im[i])) / cal.q_abs_mean[i];
        r[f].mean += ratio / (cal.num_layers * cal.num_heads);
        r[f].least = std::min(r[f].least, ratio);
        r[f].most = std::max(r[f].most, ratio);
      }
  return r;
}

// Tokens 0..kT-1 of w, run through eager attention as the empty sequence `seq`: the
// attention each token received from the queries t >= sum_from, summed over layers
// and heads (the eager path's probability sums).   [kT]
std::vector<float> attention_received(const Model& model, const std::vector<int>& w, int sum_from,
                                      PagedKvCache& cache, KvStorage& kv, int seq) {
  const ModelConfig& c = model.config;
  RunState state;
  std::vector<float> sums;  // [num_layers * num_heads, kT]
  ForwardOptions eager;
  eager.attention = AttentionPath::Eager;
  eager.sum_from = sum_from;
  eager.prob_sums = &sums;
  forward(model, cache, kv, seq, state, w.data(), kT, eager);
  std::vector<float> received(kT, 0.0f);
  for (size_t lh = 0; lh < size_t(c.num_layers) * c.num_heads; ++lh)
    for (int p = 0; p < kT; ++p) received[p] += sums[lh * kT + p];
  return received;
}

// Every policy's scores for the tokens 0..kT-1 of one window, at t = kT.   [policy][position]
std::vector<std::vector<float>> round_scores(const Model& model, const TriCalibration& cal, const std::vector<int>& w,
                                             uint64_t seed) {
  const ModelConfig& c = model.config;
  PagedKvCache cache(kT / kBlock, kBlock, MemoryStrategy::HolesOnly);
  KvStorage kv(c, cache.num_blocks(), kBlock);
  const int seq = cache.add_sequence();
  // H2O's score: the attention each token received from every query so far.
  const std::vector<float> h2o = attention_received(model, w, 0, cache, kv, seq);

  std::vector<int64_t> pos(kT);
  std::iota(pos.begin(), pos.end(), 0);
  const LiveSlots slots = live_slots(cache, seq);
  const ScoreContext ctx{pos, kT, &c, &kv, &slots};
  const std::vector<float> tri = triattention_scores(cal, ctx);

  // SnapKV's: the votes of the last 32 queries (its observation window), pooled by the policy.
  PagedKvCache scratch(kT / kBlock, kBlock, MemoryStrategy::HolesOnly);
  KvStorage scratch_kv(c, scratch.num_blocks(), kBlock);
  SnapKVPolicy snapkv;
  const std::vector<float> votes =
      attention_received(model, w, kT - SnapKVPolicy::kWindow, scratch, scratch_kv, scratch.add_sequence());
  snapkv.observe(pos, votes, SnapKVPolicy::kWindow);
  const std::vector<float> snap = snapkv.scores(ctx);

  const std::vector<int> prompt(w.begin(), w.begin() + kT), future(w.begin() + kT, w.begin() + kT + kFuture);
  const FutureAttention oracle = record_future_attention(model, prompt, future);
  std::vector<float> orc(kT), newest(kT), rnd(kT);
  SplitMix64 rng(seed);
  for (int p = 0; p < kT; ++p) {
    orc[p] = oracle.received_from(kT, p);
    newest[p] = float(p);
    rnd[p] = float(rng.uniform());
  }
  return {orc, tri, h2o, snap, newest, rnd};
}

// 1. The calibration: per band, how concentrated the pre-RoPE queries are.
static void query_centres(const TriCalibration& cal, const ModelConfig& c) {
  std::printf("How concentrated the pre-RoPE queries are per band (|qbar_f| / m_f over all %d heads, %d layers\n"
              "x %d; omega_f = theta^(-2f / head_dim), this model's RoPE base theta = %.0f):\n",
              c.num_layers * c.num_heads, c.num_layers, c.num_heads, c.rope_theta);
  std::printf("  band f   period 2pi/omega_f (tokens)   mean   least head   most head\n");
  const std::vector<Concentration> conc = concentration(cal);
  for (int f = 0; f < cal.bands(); ++f) {
    const double period = 2 * M_PI / tri_omega(f, c.head_dim, c.rope_theta);
    std::printf("  %6d   %27.0f   %4.2f   %10.2f   %9.2f\n", f, period, conc[f].mean, conc[f].least, conc[f].most);
  }
  std::printf("Queries pointing every way at random would give about %.3f (sqrt(pi / (4 n)), n = %s).\n",
              tri_noise_ratio(cal.tokens), commas(cal.tokens).c_str());
}

// 2. One eviction round at t = kT on every held-out window: each policy's picks
//    against the oracle's, by distance, and the blocks they touch.
static void one_round(const Model& model, const Tokenizer& tokenizer, const TriCalibration& cal,
                      const std::string& dir) {
  const auto windows = text_windows(tokenizer, repo_path(dir + "/heldout.txt"), kT + kFuture);
  const EvictionSchedule schedule{kBudget, 0, kSinks, kRecent};
  const int middle = kT - kSinks - kRecent, picks = kBudget - kSinks - kRecent;
  // Distance buckets of the middle tokens: D = t - p in [33, 64), [64, 128), [128, 256), [256, 508].
  const int edges[] = {kRecent + 1, 64, 128, 256, kT - kSinks + 1};
  double shared[kN] = {}, blocks[kN] = {}, by_distance[kN][4] = {};
  for (size_t wi = 0; wi < windows.size(); ++wi) {
    const auto scores = round_scores(model, cal, windows[wi], 7 + wi);
    std::vector<int64_t> pos(kT);
    std::iota(pos.begin(), pos.end(), 0);
    std::vector<std::vector<int64_t>> keep(kN);
    for (int k = 0; k < kN; ++k) keep[k] = select_keep(pos, scores[k], schedule);  // ascending, as both need
    for (int k = 0; k < kN; ++k) {
      std::vector<int64_t> common;
      std::set_intersection(keep[k].begin(), keep[k].end(), keep[0].begin(), keep[0].end(),
                            std::back_inserter(common));
      shared[k] += double(common.size() - kSinks - kRecent) / picks;
      std::vector<int64_t> touched;
      for (int64_t p : keep[k]) touched.push_back(p / kBlock);
      blocks[k] += double(std::unique(touched.begin(), touched.end()) - touched.begin());
      for (int64_t p : keep[k]) {
        const int64_t d = kT - p;
        for (int b = 0; b < 4; ++b)
          if (d >= edges[b] && d < edges[b + 1]) by_distance[k][b] += 1.0 / picks;
      }
    }
  }
  const double n = double(windows.size());
  std::printf("\nOne round at t = %d on %zu held-out windows: keep %d of %d tokens (%d sinks, %d recent,\n", kT,
              windows.size(), kBudget, kT, kSinks, kRecent);
  std::printf("the best %d of the %d in between). The oracle keeps what the next %d queries attend to most.\n\n",
              picks, middle, kFuture);
  std::printf("  %-12s  %-16s  %-30s  %s\n", "policy", "shared with", "where its picks lie, by distance t - p",
              ("blocks of " + std::to_string(kBlock) + " in use").c_str());
  const auto range = [&](int b) { return std::to_string(edges[b]) + "-" + std::to_string(edges[b + 1] - 1); };
  const std::string of = "(of " + std::to_string(kT / kBlock) + "; compacted: " + std::to_string(kBudget / kBlock) + ")";
  std::printf("  %-12s  %-16s  %6s %6s %7s %8s  %s\n", "", "the oracle", range(0).c_str(), range(1).c_str(),
              range(2).c_str(), range(3).c_str(), of.c_str());
  for (int k = 0; k < kN; ++k)
    std::printf("  %-12s  %15.0f%%  %5.0f%% %5.0f%% %6.0f%% %7.0f%%  %6.1f\n", kPolicies[k], 100 * shared[k] / n,
                100 * by_distance[k][0] / n, 100 * by_distance[k][1] / n, 100 * by_distance[k][2] / n,
                100 * by_distance[k][3] / n, blocks[k] / n);
  std::printf("\nAn even spread over the middle would put %.0f%%, %.0f%%, %.0f%% and %.0f%% of the picks in those "
              "ranges,\n",
              100.0 * (edges[1] - edges[0]) / middle, 100.0 * (edges[2] - edges[1]) / middle,
              100.0 * (edges[3] - edges[2]) / middle, 100.0 * (edges[4] - edges[3]) / middle);
  std::printf("and share %.0f%% of the oracle's picks by chance (%d of %d).\n", 100.0 * picks / middle, picks, middle);
}

static void chapter() {
  const std::string dir = "assets/model";
  const Model model = load_model(repo_path(dir));
  const Tokenizer tokenizer = Tokenizer::load(repo_path(dir + "/tokenizer.json"));
  const std::string cal_file = dir + "/triattention-calibration.json";
  const TriCalibration cal = TriCalibration::load(repo_path(cal_file), model.config);
  const ModelConfig& c = model.config;

  std::printf("%s: %d layers x %d query heads, head_dim %d = %d RoPE bands\n", dir.c_str(), c.num_layers, c.num_heads,
              c.head_dim, cal.bands());
  std::printf("calibration %s: %s query tokens\n\n", cal_file.c_str(), commas(cal.tokens).c_str());
  query_centres(cal, c);
  one_round(model, tokenizer, cal, dir);
}

int main(int argc, char** argv) { return run_chapter(argc, argv, chapter); }
