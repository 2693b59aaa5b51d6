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

// Asks for one head's slice of a K or V row ([hd] floats) ahead of its use.
static void prefetch_slice(const float* row, int hd) {
  for (int i = 0; i < hd; i += 64 / int(sizeof(float))) __builtin_prefetch(row + i);  // one per 64-byte line
}

void attention_flash(float* out, const float* q, const int64_t* q_pos, int T, const LiveSlots& keys,
                     const KvStorage& kv, int layer, AttentionShape shape) {
  constexpr int kTile = kFlashTile;        // keys scored together before the running sums are updated
  constexpr int kQueryTile = kFlashQueryTile;  // queries that walk the keys together
  const int hd = shape.head_dim, q_dim = shape.n_heads * hd;
  const int group = shape.n_heads / shape.n_kv_heads;  // query heads per KV head (GQA)
  const int n = int(keys.slots.size());
  const float scale = 1.0f / std::sqrt(float(hd));
  const double work = double(T) * shape.n_heads * n * hd;
  const int query_tiles = (T + kQueryTile - 1) / kQueryTile;

  // One work item: a tile of queries and one KV head. Its rows are every (query, head
  // of the group) pair, and each K and V row is loaded once for all of them: for one
  // decode query, once for the group's heads; for a chunk, once for 16 queries' heads.
  // Each row's arithmetic is the same whatever the tile holds.
#pragma omp parallel for collapse(2) schedule(dynamic, 1) if (work > kMinParallelAttention)
  for (int qt = 0; qt < query_tiles; ++qt) {
    for (int g = 0; g < shape.n_kv_heads; ++g) {
      const int t0 = qt * kQueryTile, tiles_T = std::min(kQueryTile, T - t0);
      const int rows = tiles_T * group;  // row r: query t0 + r / group, head g * group + r % group
      const int kv_off = g * hd;
      auto row_q = [&](int r) { return q + size_t(t0 + r / group) * q_dim + size_t(g * group + r % group) * hd; };
      auto row_out = [&](int r) { return out + size_t(t0 + r / group) * q_dim + size_t(g * group + r % group) * hd; };
      int64_t last_pos = q_pos[t0];  // the latest query of the tile: keys after it are masked for every row
      for (int t = t0; t < t0 + tiles_T; ++t) last_pos = std::max(last_pos, q_pos[t]);

      for (int r = 0; r < rows; ++r) std::fill_n(row_out(r), hd, 0.0f);
      std::vector<float> m(rows, -INFINITY);      // [rows]  running max of the scores
      std::vector<float> l(rows, 0.0f);           // [rows]  running sum of exp(score - m)
      std::vector<float> m_new(rows);             // [rows]
      std::vector<char> visible(size_t(rows) * kTile);  // [rows, kTile]  key j at or before the row's query
      std::vector<float> s(size_t(rows) * kTile);       // [rows, kTile]  the tile's scores

      for (int j0 = 0; j0 < n; j0 += kTile) {
        const int len = std::min(kTile, n - j0);
        // 0. Ask for this tile's V slices and the next tile's K slices now. Consecutive
        //    slots are a whole row (kv_dim floats, 4 KiB in Qwen3-0.6B) apart, and the
        //    hardware prefetchers do not cross 4 KiB pages: unasked, every slice is a
        //    wait on DRAM (decode attention over 16K tokens took twice as long).
        for (int j = j0; j < j0 + len; ++j) prefetch_slice(kv.value(layer, keys.slots[j]) + kv_off, hd);
        for (int j = j0 + kTile; j < std::min(n, j0 + 2 * kTile); ++j)
          prefetch_slice(kv.key(layer, keys.slots[j]) + kv_off, hd);
        bool any_visible = false;
        for (int j = j0; j < j0 + len; ++j) any_visible |= keys.pos[j] <= last_pos;
        if (!any_visible) continue;  // the whole tile is in every query's future

        // 1. Score the tile, every row (keys after the row's query position are masked out).
        for (int j = 0; j < len; ++j) {
          const float* k = kv.key(layer, keys.slots[j0 + j]) + kv_off;
          for (int r = 0; r < rows; ++r) {
            const bool vis = keys.pos[j0 + j] <= q_pos[t0 + r / group];
            visible[r * kTile + j] = vis;
            const float* qr = row_q(r);
            float dot = 0.0f;
            if (vis) {
#pragma omp simd reduction(+ : dot)  // lets the compiler split the sum across vector lanes
              for (int i = 0; i < hd; ++i) dot += qr[i] * k[i];
            }
            s[r * kTile + j] = vis ? dot * scale : -INFINITY;
          }
        }

        // 2. Rescale what each row has to its new max, then add the tile. A row that
        //    sees none of the tile's keys skips it (its max could still be -inf).
        for (int r = 0; r < rows; ++r) {
          const float m_tile = *std::max_element(&s[r * kTile], &s[r * kTile] + len);
          m_new[r] = std::max(m[r], m_tile);
          if (m_tile == -INFINITY) continue;
          const float correction = std::exp(m[r] - m_new[r]);  // exp(-inf) = 0 on the first tile
          l[r] *= correction;
          float* a = row_out(r);
          for (int i = 0; i < hd; ++i) a[i] *= correction;
        }
        for (int j = 0; j < len; ++j) {
          const float* v = kv.value(layer, keys.slots[j0 + j]) + kv_off;
          for (int r = 0; r < rows; ++r) {
            if (!visible[r * kTile + j]) continue;  // masked
            const float p = std::exp(s[r * kTile + j] - m_new[r]);
            l[r] += p;
            float* a = row_out(r);
#pragma omp simd
            for (int i = 0; i < hd; ++i) a[i] += p * v[i];
          }
        }
        m = m_new;
      }
      for (int r = 0; r < rows; ++r) {
        float* a = row_out(r);
        for (int i = 0; i < hd; ++i) a[i] /= l[r];
      }
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
