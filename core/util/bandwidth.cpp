// The read-bandwidth probe: a streaming sum, as cheap per byte as a loop can be.
#include "util/bandwidth.h"

#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "util/simd.h"

#include "util/error.h"

namespace kvscope {
namespace {

// Sum of p[0..n): n is a multiple of 16 (one 64-byte cache line of floats).
// Eight independent accumulators: an FMA/add has a latency of ~4 cycles and two
// can start per cycle, so one accumulator would cap the loop at 16 floats per
// 4 cycles -- close to DRAM speed already; with eight the adds are never the
// bottleneck and the loop only waits for memory.
float sum_floats(const float* p, std::size_t n) {
#if defined(__AVX512F__)
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  std::size_t i = 0;
  for (; i + 128 <= n; i += 128) {  // 512 bytes = 8 cache lines per iteration
    a0 = _mm512_add_ps(a0, _mm512_loadu_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_loadu_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_loadu_ps(p + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_loadu_ps(p + i + 48));
    a4 = _mm512_add_ps(a4, _mm512_loadu_ps(p + i + 64));
    a5 = _mm512_add_ps(a5, _mm512_loadu_ps(p + i + 80));
    a6 = _mm512_add_ps(a6, _mm512_loadu_ps(p + i + 96));
    a7 = _mm512_add_ps(a7, _mm512_loadu_ps(p + i + 112));
  }
  for (; i < n; i += 16) a0 = _mm512_add_ps(a0, _mm512_loadu_ps(p + i));
  a0 = _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3));
  a4 = _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7));
  return _mm512_reduce_add_ps(_mm512_add_ps(a0, a4));
#else
  float acc[16] = {};
  for (std::size_t i = 0; i < n; i += 16)
    for (int j = 0; j < 16; ++j) acc[j] += p[i + j];
  float s = 0;
  for (float v : acc) s += v;
  return s;
#endif
}

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};

}  // namespace

// Where the sums go: a volatile store the compiler must perform, so it cannot
// decide the loads are dead and delete the whole measurement.
static volatile float g_bandwidth_sink;

double measure_read_bandwidth_gbs(std::size_t bytes, int threads, int repeats) {
  if (threads <= 0) threads = omp_get_max_threads();
  repeats = std::max(repeats, 1);
  constexpr std::size_t kHuge = std::size_t{2} << 20;   // 2 MiB: a transparent huge page
  const std::size_t n = bytes / 64 * 16;                // whole cache lines of floats
  if (n == 0) throw Error("measure_read_bandwidth_gbs: " + std::to_string(bytes) + " bytes is too small");
  const std::size_t alloc = (n * sizeof(float) + kHuge - 1) / kHuge * kHuge;
  std::unique_ptr<float, FreeDeleter> buf(static_cast<float*>(std::aligned_alloc(kHuge, alloc)));
  if (!buf) throw Error("measure_read_bandwidth_gbs: cannot allocate " + std::to_string(alloc) + " bytes");
  float* data = buf.get();
#if defined(MADV_HUGEPAGE)
  madvise(data, alloc, MADV_HUGEPAGE);  // a hint: failure only costs speed
#endif

  // Write every page once (spread over the threads, so on a NUMA machine the pages
  // land near the cores that read them, roughly).
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::size_t i = 0; i < n; ++i) data[i] = static_cast<float>(i & 7);

  // The array is read in blocks of 64 KiB handed out by OpenMP's guided schedule:
  // with two threads, one takes the first half, the other the next quarter, and the
  // rest goes in shrinking runs to whichever thread is ahead.  Each thread still
  // streams long contiguous runs, but both finish together even when one core
  // streams faster than the other (with a fixed split in halves the faster one
  // waits, and the probe reads up to ~10% low on the machine this was written on).
  // matvec_f32/matvec_bf16 share out their rows the same way.
  constexpr std::size_t kBlock = 16384;  // floats: 64 KiB
  const std::size_t blocks = n / kBlock, rest = n - blocks * kBlock;
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    float total = 0;
    double start = 0, seconds = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
      // One clock for every thread, started before any of them reads: the single's
      // implicit barrier holds them all until it is set. (A clock per thread was
      // wrong: a thread descheduled here started its own late, found every block
      // taken, and timed a few microseconds.)
#pragma omp single
      start = omp_get_wtime();
#pragma omp for schedule(guided, 1)
      for (std::size_t b = 0; b < blocks; ++b) total += sum_floats(data + b * kBlock, kBlock);
      // (the implicit barrier at the end of the loop: every thread is done)
#pragma omp single
      {
        total += sum_floats(data + blocks * kBlock, rest);  // the last partial block, if any
        seconds = omp_get_wtime() - start;
      }
    }
    g_bandwidth_sink = total;
    best = std::max(best, static_cast<double>(n * sizeof(float)) / seconds / 1e9);
  }
  return best;
}

}  // namespace kvscope
