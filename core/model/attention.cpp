#include "model/attention.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <omp.h>

#include "util/format.h"
#include "util/memory_check.h"
#include "util/omp_errors.h"

namespace kvscope {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

LiveSlots live_slots(const PagedKvCache& cache, int seq) {
  const Sequence& s = cache.sequence(seq);
  const int bs = cache.block_size();
  LiveSlots out;
  for (size_t i = 0; i < s.blocks.size(); ++i) {
    const int used = cache.slots_written(s, i);
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
  constexpr int kTile = kFlashTile;            // keys scored together before the running sums are updated
  constexpr int kQueryTile = kFlashQueryTile;  // queries that walk the keys together
  const int hd = shape.head_dim, q_dim = shape.n_heads * hd;
  const int group = shape.n_heads / shape.n_kv_heads;  // query heads per KV head (GQA)
  const int n = int(keys.slots.size());
  const float scale = 1.0f / std::sqrt(float(hd));
  const double work = double(T) * shape.n_heads * n * hd;
  const int query_tiles = (T + kQueryTile - 1) / kQueryTile;

  // One work item: a tile of queries and one KV head. Its rows are every (query, head
  // of the group) pair, and each K and V row is loaded once for all of them.
  OmpErrors errors;  // out of memory in a work item: rethrown after the region
#pragma omp parallel for collapse(2) schedule(dynamic, 1) if (work > kMinParallelAttention)
  for (int qt = 0; qt < query_tiles; ++qt) {
    for (int g = 0; g < shape.n_kv_heads; ++g) errors.run([&] {
      const int t0 = qt * kQueryTile, tile_T = std::min(kQueryTile, T - t0);
      const int rows = tile_T * group;  // row r: query t0 + r / group, head g * group + r % group
      const int kv_off = g * hd;
      auto row_of = [&](int r) { return size_t(t0 + r / group) * q_dim + size_t(g * group + r % group) * hd; };
      int64_t last_pos = q_pos[t0];  // the tile's latest query: keys after it are masked for every row
      for (int t = t0; t < t0 + tile_T; ++t) last_pos = std::max(last_pos, q_pos[t]);

      RowMatrix Q(rows, hd);                               // [rows, hd]  the queries
      RowMatrix O = RowMatrix::Zero(rows, hd);             // [rows, hd]  running output, unnormalised
      RowMatrix K(kTile, hd), V(kTile, hd);                // [kTile, hd] the tile's keys and values
      RowMatrix S(rows, kTile);                            // [rows, kTile] scores, then exp(S - m_new)
      Eigen::VectorXf m = Eigen::VectorXf::Constant(rows, -INFINITY);  // [rows]  running max
      Eigen::VectorXf l = Eigen::VectorXf::Zero(rows);                 // [rows]  running sum of exp(s - m)
      for (int r = 0; r < rows; ++r) std::copy_n(q + row_of(r), hd, Q.row(r).data());

      for (int j0 = 0; j0 < n; j0 += kTile) {
        const int len = std::min(kTile, n - j0);
        bool any_visible = false;
        for (int j = j0; j < j0 + len; ++j) any_visible |= keys.pos[j] <= last_pos;
        if (!any_visible) continue;  // the whole tile is in every query's future

        // 0. Ask for the next tile's K and V slices, then gather this tile's into
        //    [len, hd] matrices. A slice is a 512-byte piece of a slot's 4 KiB row in
        //    Qwen3-0.6B (kv_dim floats), and the hardware prefetchers stop at 4 KiB
        //    pages: unasked, every slice would be a wait on DRAM.
        for (int j = j0 + kTile; j < std::min(n, j0 + 2 * kTile); ++j) {
          prefetch_slice(kv.key(layer, keys.slots[j]) + kv_off, hd);
          prefetch_slice(kv.value(layer, keys.slots[j]) + kv_off, hd);
        }
        for (int j = 0; j < len; ++j) {
          std::copy_n(kv.key(layer, keys.slots[j0 + j]) + kv_off, hd, K.row(j).data());
          std::copy_n(kv.value(layer, keys.slots[j0 + j]) + kv_off, hd, V.row(j).data());
        }
        auto Kt = K.topRows(len), Vt = V.topRows(len);
        auto St = S.leftCols(len);

        // 1. S = Q K^T / sqrt(d), with the keys after a row's query masked out.  [rows, len]
        St.noalias() = (Q * Kt.transpose()) * scale;
        for (int r = 0; r < rows; ++r) {
          const int64_t p = q_pos[t0 + r / group];
          for (int j = 0; j < len; ++j)
            if (keys.pos[j0 + j] > p) St(r, j) = -INFINITY;
        }

        // 2. Per row: the new max, exp(S - m_new) in place of S (unnormalised: not P, whose
        //    divisor is known only after the last tile), and the old sums rescaled to m_new.
        for (int r = 0; r < rows; ++r) {
          const float m_new = std::max(m[r], St.row(r).maxCoeff());
          if (m_new == -INFINITY) {  // the row has seen no key yet: nothing to add
            St.row(r).setZero();
            continue;
          }
          const float correction = std::exp(m[r] - m_new);  // exp(-inf) = 0 on the row's first keys
          float sum = 0.0f;
          for (int j = 0; j < len; ++j) sum += (St(r, j) = std::exp(St(r, j) - m_new));
          l[r] = l[r] * correction + sum;
          O.row(r) *= correction;
          m[r] = m_new;
        }

        // 3. O += exp(S - m_new) V.  [rows, hd]
        O.noalias() += St * Vt;
      }
      for (int r = 0; r < rows; ++r) Eigen::Map<Eigen::RowVectorXf>(out + row_of(r), hd) = O.row(r) / l[r];
    });
  }
  errors.rethrow();
}

void attention_eager(float* out, const float* q, const int64_t* q_pos, int T, const LiveSlots& keys,
                     const KvStorage& kv, int layer, AttentionShape shape, int sum_from, float* prob_sums,
                     int table_slots) {
  const int hd = shape.head_dim, q_dim = shape.n_heads * hd;
  const int group = shape.n_heads / shape.n_kv_heads;
  const int n = int(keys.slots.size());
  const float scale = 1.0f / std::sqrt(float(hd));

  OmpErrors errors;  // P alone is T x n floats: out of memory is rethrown after the region
#pragma omp parallel for schedule(dynamic, 1) if (double(T) * n * hd * shape.n_heads > kMinParallelAttention)
  for (int g = 0; g < shape.n_kv_heads; ++g) errors.run([&] {
    // Gather this KV head's keys and values into contiguous [n, hd] matrices.
    RowMatrix K(n, hd), V(n, hd);
    for (int j = 0; j < n; ++j) {
      std::copy_n(kv.key(layer, keys.slots[j]) + g * hd, hd, K.row(j).data());
      std::copy_n(kv.value(layer, keys.slots[j]) + g * hd, hd, V.row(j).data());
    }
    RowMatrix Q(T, hd), P(T, n);  // [T, hd] one head's queries; [T, n] their probabilities over the keys
    for (int h = g * group; h < (g + 1) * group; ++h) {
      for (int t = 0; t < T; ++t) std::copy_n(q + size_t(t) * q_dim + size_t(h) * hd, hd, Q.row(t).data());
      // P = softmax(Q K^T / sqrt(d)) with the causal mask, row by row.  [T, n]
      P.noalias() = Q * K.transpose();
      P *= scale;
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
  });
  errors.rethrow();
}

void check_eager_attention_fits(int64_t T, int64_t n, int head_dim) {
  const int threads = omp_get_max_threads();
  const double floats = double(T) * double(n) + 2.0 * double(n) * head_dim + 2.0 * double(T) * head_dim;
  const double bytes = double(threads) * floats * sizeof(float);
  // Every decode step under H2O or SnapKV asks: a few megabytes need no look at
  // /proc/meminfo (tens of microseconds) nor a message.
  constexpr double kAlwaysFits = 64.0 * 1024 * 1024;
  if (bytes < kAlwaysFits) return;
  check_fits_in_memory(size_t(std::min(bytes, 1e18)),  // in double: must not wrap around
                       eager_probabilities(T, n, ", on each of " + plural(threads, "thread")));
}

std::string eager_probabilities(int64_t T, int64_t n, const std::string& spread) {
  return "eager attention's probabilities (" + commas(T) + (T == 1 ? " query x " : " queries x ") + commas(n) +
         (n == 1 ? " key" : " keys") + spread + "; H2O and SnapKV need them)";
}

}  // namespace kvscope
