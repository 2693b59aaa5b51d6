#include "model/attention.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>

namespace kvscope {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Below this many multiply-adds (queries x heads x keys x head_dim) attention runs on
// one thread.  One decode query of the bundled model over 1,024 keys is 131k: split
// over 2 cores, `kvscope eval` took 1.3x as long as on one (team start-up and
// waiting at the join outweigh ~30 us of work).  Prefill and long contexts of the
// 0.6B shape (16 heads x 128) pass it.
constexpr double kMinParallelAttention = 1e6;

LiveSlots live_slots(const PagedKvCache& cache, int seq) {
  const Sequence& s = cache.sequence(seq);
  const int bs = cache.block_size();
  LiveSlots out;
  for (size_t i = 0; i < s.blocks.size(); ++i) {
    const int used = (i + 1 == s.blocks.size()) ? s.tail_used : bs;
    for (int j = 0; j < used; ++j) {
      const SlotRef at{s.blocks[i], j};
      const int64_t p = cache.position(at);
      if (p == kEmpty) continue;
      out.slots.push_back(at);
      out.pos.push_back(p);
      out.table_index.push_back(int(i) * bs + j);
    }
  }
  return out;
}

void attention_flash(float* out, const float* q, const int64_t* q_pos, int T, const LiveSlots& keys,
                     const KvStorage& kv, int layer, AttentionShape shape) {
  constexpr int kTile = kFlashTile;  // keys scored together before the running sums are updated
  const int hd = shape.head_dim, q_dim = shape.n_heads * hd;
  const int group = shape.n_heads / shape.n_kv_heads;
  const int n = int(keys.slots.size());
  const float scale = 1.0f / std::sqrt(float(hd));
  const double work = double(T) * shape.n_heads * n * hd;

#pragma omp parallel for collapse(2) schedule(dynamic, 1) if (work > kMinParallelAttention)
  for (int t = 0; t < T; ++t) {
    for (int h = 0; h < shape.n_heads; ++h) {
      const float* qh = q + size_t(t) * q_dim + size_t(h) * hd;
      const int kv_off = (h / group) * hd;  // GQA: the KV head this query head reads
      float* acc = out + size_t(t) * q_dim + size_t(h) * hd;
      std::fill(acc, acc + hd, 0.0f);
      float m = -INFINITY, l = 0.0f;  // running max and running sum of exp(score - m)
      float s[kTile];

      for (int j0 = 0; j0 < n; j0 += kTile) {
        const int len = std::min(kTile, n - j0);
        // 1. Score the tile (keys after the query's position are masked out).
        float m_tile = -INFINITY;
        for (int j = 0; j < len; ++j) {
          s[j] = -INFINITY;
          if (keys.pos[j0 + j] > q_pos[t]) continue;
          const float* k = kv.key(layer, keys.slots[j0 + j]) + kv_off;
          float dot = 0.0f;
#pragma omp simd reduction(+ : dot)  // lets the compiler split the sum across vector lanes
          for (int i = 0; i < hd; ++i) dot += qh[i] * k[i];
          s[j] = dot * scale;
          m_tile = std::max(m_tile, s[j]);
        }
        if (m_tile == -INFINITY) continue;
        // 2. Rescale what we have to the new max, then add the tile.
        const float m_new = std::max(m, m_tile);
        const float correction = std::exp(m - m_new);  // exp(-inf) = 0 on the first tile
        l *= correction;
        for (int i = 0; i < hd; ++i) acc[i] *= correction;
        for (int j = 0; j < len; ++j) {
          if (s[j] == -INFINITY) continue;
          const float p = std::exp(s[j] - m_new);
          l += p;
          const float* v = kv.value(layer, keys.slots[j0 + j]) + kv_off;
#pragma omp simd
          for (int i = 0; i < hd; ++i) acc[i] += p * v[i];
        }
        m = m_new;
      }
      for (int i = 0; i < hd; ++i) acc[i] /= l;
    }
  }
}

void attention_eager(float* out, const float* q, const int64_t* q_pos, int T, const LiveSlots& keys,
                     const KvStorage& kv, int layer, AttentionShape shape, int sum_from, float* prob_sums,
                     int table_slots) {
  const int hd = shape.head_dim, q_dim = shape.n_heads * hd;
  const int group = shape.n_heads / shape.n_kv_heads;
  const int n = int(keys.slots.size());
  const float scale = 1.0f / std::sqrt(float(hd));

#pragma omp parallel for schedule(dynamic, 1) if (double(T) * n * hd * shape.n_heads > kMinParallelAttention)
  for (int g = 0; g < shape.n_kv_heads; ++g) {
    // Gather this KV head's keys and values into contiguous [n, hd] matrices.
    RowMatrix K(n, hd), V(n, hd);
    for (int j = 0; j < n; ++j) {
      std::copy_n(kv.key(layer, keys.slots[j]) + g * hd, hd, K.row(j).data());
      std::copy_n(kv.value(layer, keys.slots[j]) + g * hd, hd, V.row(j).data());
    }
    RowMatrix Q(T, hd), P(T, n);
    for (int h = g * group; h < (g + 1) * group; ++h) {
      for (int t = 0; t < T; ++t) std::copy_n(q + size_t(t) * q_dim + size_t(h) * hd, hd, Q.row(t).data());
      // P = softmax(Q K^T / sqrt(d)) with the causal mask, row by row.  [T, n]
      P.noalias() = (Q * K.transpose()) * scale;
      for (int t = 0; t < T; ++t) {
        float* row = P.row(t).data();
        float max_s = -INFINITY;
        for (int j = 0; j < n; ++j) {
          if (keys.pos[j] > q_pos[t]) row[j] = -INFINITY;
          max_s = std::max(max_s, row[j]);
        }
        float sum = 0.0f;
        for (int j = 0; j < n; ++j) sum += (row[j] = std::exp(row[j] - max_s));
        for (int j = 0; j < n; ++j) row[j] /= sum;
        if (prob_sums && t >= sum_from)
          for (int j = 0; j < n; ++j) prob_sums[size_t(h) * table_slots + keys.table_index[j]] += row[j];
      }
      // O = P V, into this head's columns of out.  [T, hd]
      RowMatrix O = P * V;
      for (int t = 0; t < T; ++t) std::copy_n(O.row(t).data(), hd, out + size_t(t) * q_dim + size_t(h) * hd);
    }
  }
}

void key_scores(double* raw, const float* w, const float* gap, const std::vector<SlotRef>& slots,
                const KvStorage& kv, AttentionShape shape) {
  const int L = kv.num_layers, H = shape.n_heads, G = shape.n_heads / shape.n_kv_heads, d = shape.head_dim,
            half = d / 2;
  const int n = int(slots.size());
#pragma omp parallel for schedule(dynamic, 1) if (double(L) * H * n * d > 1e6)
  for (int l = 0; l < L; ++l) {
    std::vector<double> kabs(static_cast<size_t>(half));
    for (int i = 0; i < n; ++i) {
      const float* key = kv.key(l, slots[i]);
      for (int g = 0; g < shape.n_kv_heads; ++g) {
        const float* k = key + size_t(g) * d;
        for (int f = 0; f < half; ++f) kabs[f] = std::sqrt(double(k[f]) * k[f] + double(k[f + half]) * k[f + half]);
        for (int h = g * G; h < (g + 1) * G; ++h) {
          const float* wh = w + (size_t(l) * H + h) * d;
          const float* gh = gap + (size_t(l) * H + h) * half;
          double s = 0;
          for (int j = 0; j < d; ++j) s += double(wh[j]) * k[j];
          for (int f = 0; f < half; ++f) s += double(gh[f]) * kabs[f];
          raw[(size_t(l) * H + h) * n + i] = s;
        }
      }
    }
  }
}

}  // namespace kvscope
