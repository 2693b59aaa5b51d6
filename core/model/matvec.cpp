// Matrix-vector kernels: y = W x, streaming W from memory as fast as it comes.
//
// The shape of the work
// ---------------------
// W is [rows, cols] row-major, so row r is the cols weights W[r*cols .. r*cols+cols),
// and consecutive rows are adjacent in memory: the whole matrix is one long
// contiguous array.  y[r] is the dot product of row r with x.
//
// Why it is memory-bound
// ----------------------
// Every weight is loaded once and used in one fused multiply-add (FMA).  With f32
// weights that is 4 bytes per 2 flops.  One core with AVX-512 does two 16-wide FMAs
// per cycle (64 flops), i.e. it could consume 128 bytes per cycle; DRAM gives each
// core something like 5-10 bytes per cycle.  So the arithmetic is almost free, and
// the only question is whether the loop keeps the memory system busy all the time.
// x (a few KiB) is reused by every row and stays in the L1 cache; y is written once.
//
// What each thread does
// ---------------------
// The rows are shared out among the OpenMP threads in a few large runs of
// consecutive rows (a "guided" schedule, see matvec_rows() below: with two threads,
// thread A takes the first half, thread B the next quarter, and the rest goes in
// shrinking pieces to whichever thread is free).  A thread computes y[r] for the
// rows of its run one after the other.  Because rows are adjacent, it then reads
// ONE sequential stream of memory -- the pattern hardware prefetchers recognise
// best: after a few cache misses they run ahead of the loop and fetch the next
// lines before they are asked for.  (We measured the alternative of working on 2,
// 4 or 8 rows at once, so that each load of x serves several rows: it splits the
// reading into several short streams, one per row, and was slower -- by up to half
// for bf16, where a 1024-wide row is only 2 KiB.  Loads of x from L1 cost nothing
// that matters here.)
//
// Why several accumulators
// ------------------------
// acc = fma(w, x, acc) depends on the previous acc: an FMA takes ~4 cycles, so a
// single accumulator allows one FMA every 4 cycles, 16 weights per 4 cycles.  That
// is already near DRAM speed, and any stall (a late cache line) is then added on
// top rather than overlapped.  Four independent accumulators (16 weights each, 64
// per step) let four FMA chains run side by side; they are added together once at
// the end of the row.  (The order of additions differs from a plain loop, so the
// result can differ in the last bits.)
//
// Measured on the machine this was tuned on (2 vCPUs of an AMD Zen 5 EPYC, a noisy
// virtual machine): over the weights of a whole Qwen3-0.6B decode step these
// kernels stream within a few percent of a plain AVX-512 sum of the same bytes,
// with f32 and with bf16 weights, on one thread and on two (a whole decode step, with
// its attention, norms and sampling, reads less of the bandwidth probe's limit:
// `kvscope bench decode`, assets/benchmarks/bench-decode.md).  What did NOT help:
// software prefetch (_mm_prefetch 1-4 KiB ahead: 5-10% slower, the hardware
// prefetcher already runs ahead and the extra instructions only get in its way);
// more than four accumulators (no change); one 64-byte bf16 load split into even
// and odd halves by shift and mask, with x pre-shuffled to match (5-10% slower).
// What did: 2 MiB transparent huge pages for W (HugeBuffer), about 10% on one thread
// end to end (assets/benchmarks/bench-decode.md: six runs with the hint, six without).
#include "model/matvec.h"

#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "util/simd.h"

#include "model/bf16.h"

namespace kvscope {
namespace {

// Below this many multiply-adds (weights x vectors) a product runs on one thread:
// starting and joining an OpenMP team costs a few microseconds, as long as reading ~256 KiB.
constexpr std::size_t kMinParallelWeights = 1u << 16;

// The smallest piece of W handed to a thread at once (see the guided schedule below):
// large enough that the prefetchers' start-up at each new piece does not matter.
constexpr std::size_t kMinChunkBytes = std::size_t{64} << 10;

#if defined(__AVX512F__)

// Sum of the 16 lanes of v (a short tree of shuffles and adds, once per row).
inline float hsum(__m512 v) { return _mm512_reduce_add_ps(v); }

// Mask of the first n (< 16) lanes: the tail of a row whose length is not a multiple of 16.
inline __mmask16 first_lanes(int n) { return static_cast<__mmask16>((1u << n) - 1u); }

// f32 row: dot(w[0..cols), x[0..cols)).
inline float dot_f32(const float* w, const float* x, int cols) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int c = 0;
  for (; c + 64 <= cols; c += 64) {  // 64 weights = 256 bytes = 4 cache lines per step
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + c), _mm512_loadu_ps(x + c), a0);
    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(w + c + 16), _mm512_loadu_ps(x + c + 16), a1);
    a2 = _mm512_fmadd_ps(_mm512_loadu_ps(w + c + 32), _mm512_loadu_ps(x + c + 32), a2);
    a3 = _mm512_fmadd_ps(_mm512_loadu_ps(w + c + 48), _mm512_loadu_ps(x + c + 48), a3);
  }
  for (; c + 16 <= cols; c += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + c), _mm512_loadu_ps(x + c), a0);
  if (c < cols) {  // tail: masked loads read only the lanes that exist (no fault past the end)
    const __mmask16 m = first_lanes(cols - c);
    a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w + c), _mm512_maskz_loadu_ps(m, x + c), a1);
  }
  return hsum(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

// 16 bf16 weights (32 bytes) -> 16 exact f32: zero-extend each 16-bit value to 32
// bits (vpmovzxwd, which also does the load) and shift it into the high half
// (vpslld 16): the bf16 bits ARE the top half of the f32.  (AVX512_BF16's
// _mm512_cvtpbh_ps is no faster: GCC defines it as this same extend-and-shift.)
inline __m512 widen_bf16(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

inline __m512 widen_bf16_masked(__mmask16 m, const uint16_t* p) {
  const __m256i h = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// bf16 row: the same loop, 64 weights = 128 bytes = 2 cache lines per step.
inline float dot_bf16(const uint16_t* w, const float* x, int cols) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int c = 0;
  for (; c + 64 <= cols; c += 64) {
    a0 = _mm512_fmadd_ps(widen_bf16(w + c), _mm512_loadu_ps(x + c), a0);
    a1 = _mm512_fmadd_ps(widen_bf16(w + c + 16), _mm512_loadu_ps(x + c + 16), a1);
    a2 = _mm512_fmadd_ps(widen_bf16(w + c + 32), _mm512_loadu_ps(x + c + 32), a2);
    a3 = _mm512_fmadd_ps(widen_bf16(w + c + 48), _mm512_loadu_ps(x + c + 48), a3);
  }
  for (; c + 16 <= cols; c += 16) a0 = _mm512_fmadd_ps(widen_bf16(w + c), _mm512_loadu_ps(x + c), a0);
  if (c < cols) {
    const __mmask16 m = first_lanes(cols - c);
    a1 = _mm512_fmadd_ps(widen_bf16_masked(m, w + c), _mm512_maskz_loadu_ps(m, x + c), a1);
  }
  return hsum(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

#else  // portable fallback

// Sixteen independent partial sums written as a plain array: without -ffast-math
// the compiler may not reorder a single running sum, but it can turn sixteen
// separate ones into one vector register of whatever width the target has.
constexpr int kLanes = 16;

template <typename Load>
inline float dot_portable(Load load, const float* x, int cols) {
  float acc[kLanes] = {};
  int c = 0;
  for (; c + kLanes <= cols; c += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] += load(c + j) * x[c + j];
  for (; c < cols; ++c) acc[0] += load(c) * x[c];  // tail
  float s = 0;
  for (float a : acc) s += a;
  return s;
}

inline float dot_f32(const float* w, const float* x, int cols) {
  return dot_portable([w](int c) { return w[c]; }, x, cols);
}

inline float dot_bf16(const uint16_t* w, const float* x, int cols) {
  return dot_portable([w](int c) { return bf16_to_f32(w[c]); }, x, cols);
}

#endif

// The driver shared by both weight types: share the rows out among the threads; each
// thread runs row(r) over its rows in order, i.e. one sequential walk through its part
// of W, using each row for all n vectors of X while it is in L1. `elem` is the size of
// one weight; n counts towards the work when deciding whether threads are worth it.
template <typename Row>
void matvec_rows(int rows, int cols, int n, std::size_t elem, Row row) {
  if (rows <= 0 || n <= 0) return;
  const std::size_t work = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols) * static_cast<std::size_t>(n);
  const int threads = work < kMinParallelWeights ? 1 : std::min(omp_get_max_threads(), rows);
  // Serially, with no OpenMP region at all: for small products, for one thread (even a
  // one-thread team costs ~1 us to set up), and when called from inside a parallel region.
  if (threads <= 1 || omp_in_parallel()) {
    for (int r = 0; r < rows; ++r) row(r);
    return;
  }
  // Rows are handed out by OpenMP's "guided" schedule: each thread that asks gets
  // 1/threads of the rows still left (half with two threads), down to chunks of
  // min_chunk rows.  So each thread still reads a few long contiguous runs, but the
  // last small chunks go to whichever thread is ahead, and both finish together.
  // (A fixed split into equal halves was 2-5% slower over the whole model: the two
  // cores do not always stream at the same speed, and the faster one then waited.)
  const int min_chunk = std::max(1, static_cast<int>(kMinChunkBytes / (static_cast<std::size_t>(cols) * elem)));
#pragma omp parallel num_threads(threads)
  {
#pragma omp for schedule(guided, min_chunk) nowait
    for (int r = 0; r < rows; ++r) row(r);
  }
}

}  // namespace

void matvec_f32(const float* W, const float* x, float* y, int rows, int cols) { matvec_f32_n(W, x, y, rows, cols, 1); }

void matvec_bf16(const uint16_t* W, const float* x, float* y, int rows, int cols) {
  matvec_bf16_n(W, x, y, rows, cols, 1);
}

// (Lambdas rather than bare functions: their types name the function, so the call
// inlines into the loop of the OpenMP region instead of going through a pointer.)
void matvec_f32_n(const float* W, const float* X, float* Y, int rows, int cols, int n) {
  const std::size_t in = static_cast<std::size_t>(cols), out = static_cast<std::size_t>(rows);
  matvec_rows(rows, cols, n, sizeof(float), [&](int r) {
    const float* w = W + static_cast<std::size_t>(r) * in;
    for (int i = 0; i < n; ++i) Y[i * out + r] = cols > 0 ? dot_f32(w, X + i * in, cols) : 0.0f;
  });
}

void matvec_bf16_n(const uint16_t* W, const float* X, float* Y, int rows, int cols, int n) {
  const std::size_t in = static_cast<std::size_t>(cols), out = static_cast<std::size_t>(rows);
  if (n == 1) {
    matvec_rows(rows, cols, 1, sizeof(uint16_t), [&](int r) {
      Y[r] = cols > 0 ? dot_bf16(W + static_cast<std::size_t>(r) * in, X, cols) : 0.0f;
    });
    return;
  }
  // Several vectors: widen the row once (exactly) and run the f32 dot on it, which
  // does the same multiply-adds in the same order as dot_bf16.
  matvec_rows(rows, cols, n, sizeof(uint16_t), [&](int r) {
    thread_local std::vector<float> wide;
    wide.resize(in);
    const uint16_t* w = W + static_cast<std::size_t>(r) * in;
    for (std::size_t c = 0; c < in; ++c) wide[c] = bf16_to_f32(w[c]);
    for (int i = 0; i < n; ++i) Y[i * out + r] = cols > 0 ? dot_f32(wide.data(), X + i * in, cols) : 0.0f;
  });
}

}  // namespace kvscope
