// Matrix-vector kernels and 16-bit float conversions.
//
// The kernels are checked against a plain double-precision loop on random data, on
// shapes that exercise every path: 1 row, rows not a multiple of the thread count,
// cols below one vector (1, 15), exactly one (16), one vector plus a tail (17), the
// 64-wide main loop (1024) and the main loop plus both tails (1031).
//
// Tolerance: the kernels accumulate in f32, the reference in double.  Rounding
// error of an f32 sum grows with the magnitudes of the terms, not with the result
// (which may nearly cancel), so the bound is relative to sum_c |W[r,c] * x[c]|:
//     |y[r] - ref[r]| <= 1e-5 * sum_c |W[r,c] x[c]|
// (f32 epsilon is 6e-8; the kernels' 64 partial sums keep chains short).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "model/bf16.h"
#include "model/matvec.h"
#include "scoped_threads.h"
#include "util/bandwidth.h"
#include "util/error.h"

namespace kvscope {
namespace {

constexpr double kRelTol = 1e-5;

struct Shape {
  int rows, cols;
};

std::vector<Shape> odd_shapes() {
  std::vector<Shape> shapes;
  for (int rows : {1, 3, 17, 1000})
    for (int cols : {1, 15, 16, 17, 1024, 1031}) shapes.push_back({rows, cols});
  shapes.push_back({17, 4096});  // few rows, but big enough to be split among threads
  return shapes;
}

std::vector<float> random_floats(std::size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

// Checks y against the double-precision product of `weight(r, c)` and x.
template <typename WeightAt>
void expect_matches_reference(const std::vector<float>& y, const std::vector<float>& x, Shape s,
                              WeightAt weight) {
  for (int r = 0; r < s.rows; ++r) {
    double ref = 0, magnitude = 0;
    for (int c = 0; c < s.cols; ++c) {
      const double term = static_cast<double>(weight(r, c)) * x[c];
      ref += term;
      magnitude += std::abs(term);
    }
    ASSERT_NEAR(y[r], ref, kRelTol * magnitude + 1e-30)
        << "row " << r << " of " << s.rows << "x" << s.cols;
  }
}

TEST(Matvec, F32MatchesDoubleReference) {
  std::mt19937 rng(1);
  for (Shape s : odd_shapes()) {
    const std::vector<float> W = random_floats(static_cast<std::size_t>(s.rows) * s.cols, rng);
    const std::vector<float> x = random_floats(s.cols, rng);
    std::vector<float> y(s.rows, std::numeric_limits<float>::quiet_NaN());
    matvec_f32(W.data(), x.data(), y.data(), s.rows, s.cols);
    expect_matches_reference(y, x, s, [&](int r, int c) { return W[static_cast<std::size_t>(r) * s.cols + c]; });
  }
}

TEST(Matvec, Bf16MatchesDoubleReference) {
  std::mt19937 rng(2);
  for (Shape s : odd_shapes()) {
    const std::vector<float> Wf = random_floats(static_cast<std::size_t>(s.rows) * s.cols, rng);
    std::vector<uint16_t> W(Wf.size());
    for (std::size_t i = 0; i < W.size(); ++i) W[i] = f32_to_bf16(Wf[i]);
    const std::vector<float> x = random_floats(s.cols, rng);
    std::vector<float> y(s.rows, std::numeric_limits<float>::quiet_NaN());
    matvec_bf16(W.data(), x.data(), y.data(), s.rows, s.cols);
    // The reference uses the bf16 weights widened exactly: the kernel must add no error
    // beyond f32 accumulation.
    expect_matches_reference(y, x, s, [&](int r, int c) { return bf16_to_f32(W[static_cast<std::size_t>(r) * s.cols + c]); });
  }
}

// x must stay f32: with every weight 1.0 the result is the f32 sum of x, and x's
// values here are not representable in bf16 (rounding them would be off by ~2^-9).
TEST(Matvec, Bf16KeepsActivationsInF32) {
  const int cols = 100;
  std::vector<uint16_t> W(cols, 0x3F80);  // 1.0
  std::vector<float> x(cols, 1.0f + 0x1p-20f);
  float y = 0;
  matvec_bf16(W.data(), x.data(), &y, 1, cols);
  EXPECT_NEAR(y, cols * (1.0 + 0x1p-20), 1e-4);
  EXPECT_NE(y, static_cast<float>(cols));
}

TEST(Matvec, TwoThreadsGiveTheSameBitsAsOne) {
  // Each row's sum is one thread's work, whichever thread, so splitting the rows
  // changes no bit. Shapes big enough to be split (over 64Ki weights).
  std::mt19937 rng(3);
  for (Shape s : {Shape{17, 4096}, Shape{1000, 1031}, Shape{4096, 128}}) {
    const std::vector<float> W = random_floats(static_cast<std::size_t>(s.rows) * s.cols, rng);
    std::vector<uint16_t> Wb(W.size());
    for (std::size_t i = 0; i < W.size(); ++i) Wb[i] = f32_to_bf16(W[i]);
    const std::vector<float> x = random_floats(s.cols, rng);
    std::vector<float> f32[2], bf16[2];
    for (int threads : {1, 2}) {
      const test::ScopedThreads scoped(threads);
      f32[threads - 1].assign(s.rows, 0.0f);
      bf16[threads - 1].assign(s.rows, 0.0f);
      matvec_f32(W.data(), x.data(), f32[threads - 1].data(), s.rows, s.cols);
      matvec_bf16(Wb.data(), x.data(), bf16[threads - 1].data(), s.rows, s.cols);
    }
    for (int r = 0; r < s.rows; ++r) {
      ASSERT_EQ(std::bit_cast<uint32_t>(f32[0][r]), std::bit_cast<uint32_t>(f32[1][r])) << s.rows << "x" << s.cols << " row " << r;
      ASSERT_EQ(std::bit_cast<uint32_t>(bf16[0][r]), std::bit_cast<uint32_t>(bf16[1][r])) << s.rows << "x" << s.cols << " row " << r;
    }
  }
}

TEST(Matvec, EmptyShapes) {
  float y[2] = {5, 5};
  const float x[1] = {1};
  matvec_f32(nullptr, x, y, 2, 0);  // no columns: every dot product is 0
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 0.0f);
  y[0] = y[1] = 7;
  matvec_bf16(nullptr, x, y, 0, 5);  // no rows: nothing written
  EXPECT_EQ(y[0], 7.0f);
  EXPECT_EQ(y[1], 7.0f);
}

TEST(Bf16, RoundTripsEveryNonNanValue) {
  // Every bf16 that is not NaN is exactly an f32; narrowing it back must give the same bits.
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    const auto bits = static_cast<uint16_t>(h);
    const float f = bf16_to_f32(bits);
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_bf16(f), bits) << std::hex << h;
  }
  EXPECT_EQ(bf16_to_f32(0x3F80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0xC020), -2.5f);
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
}

TEST(Bf16, RoundsToNearestEven) {
  auto narrow = [](uint32_t f32_bits) { return f32_to_bf16(std::bit_cast<float>(f32_bits)); };
  // Exactly halfway between two bf16 values: the even one wins.
  EXPECT_EQ(narrow(0x3F808000u), 0x3F80);  // 1 + 2^-8: between 0x3F80 (even) and 0x3F81
  EXPECT_EQ(narrow(0x3F818000u), 0x3F82);  // between 0x3F81 and 0x3F82 (even): rounds up
  EXPECT_EQ(narrow(0xBF808000u), 0xBF80);  // the same with the sign bit
  // Not a tie: nearest.
  EXPECT_EQ(narrow(0x3F808001u), 0x3F81);
  EXPECT_EQ(narrow(0x3F807FFFu), 0x3F80);
  // Rounding up can carry into the exponent, and past the largest finite value to inf.
  EXPECT_EQ(narrow(0x3FFFFFFFu), 0x4000);  // just below 2.0 -> 2.0
  EXPECT_EQ(narrow(0x7F7FFFFFu), 0x7F80);  // FLT_MAX -> +inf
  EXPECT_EQ(narrow(0x7F800000u), 0x7F80);  // inf stays inf
}

TEST(Bf16, NanStaysNan) {
  const float qnan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(qnan))));
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(-qnan))));
  EXPECT_EQ(f32_to_bf16(-qnan) & 0x8000, 0x8000);  // sign kept
  // A NaN whose payload lies only in the low 16 bits must not truncate to inf, nor round to it.
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::bit_cast<float>(0x7F800001u)))));
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::bit_cast<float>(0x7FFFFFFFu)))));
  EXPECT_TRUE(std::isnan(bf16_to_f32(0x7FC0)));
}

TEST(F16, KnownBitPatterns) {
  EXPECT_EQ(f16_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xC000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);           // largest finite half
  EXPECT_EQ(f16_to_f32(0x0001), 0x1p-24f);           // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x03FF), 1023 * 0x1p-24f);    // largest subnormal
  EXPECT_EQ(f16_to_f32(0x0200), 0x1p-15f);           // a subnormal with one bit set
  EXPECT_EQ(f16_to_f32(0x8001), -0x1p-24f);
  EXPECT_EQ(f16_to_f32(0x0400), 0x1p-14f);           // smallest normal
  EXPECT_EQ(f16_to_f32(0x3555), 0.333251953125f);    // 1/3 rounded to half
  EXPECT_EQ(f16_to_f32(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(f16_to_f32(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(f16_to_f32(0x0000), 0.0f);
  EXPECT_TRUE(std::signbit(f16_to_f32(0x8000)));     // -0
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7E00)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7C01)));       // signalling-NaN pattern stays NaN
}

// The probe itself, on a small array so the test stays fast: it must return a
// positive, finite rate, and refuse an array smaller than one cache line.
TEST(Bandwidth, ProbeRunsOnASmallArray) {
  const double gbs = measure_read_bandwidth_gbs(std::size_t{8} << 20, 1, 1);
  EXPECT_GT(gbs, 0.0);
  EXPECT_TRUE(std::isfinite(gbs));
  EXPECT_THROW(measure_read_bandwidth_gbs(32, 1, 1), Error);
}

// Every thread's reading is timed from one start. With a clock per thread, a thread
// that was descheduled after the barrier started its clock late, found the blocks all
// taken, and timed a few microseconds: 8 threads on 2 cores read "13,000 GB/s". With
// four threads a core that happens in most runs. The bound: every core at three times
// what one thread alone reads, which no machine beats.
TEST(Bandwidth, EveryThreadIsTimedFromOneStart) {
  const std::size_t bytes = std::size_t{16} << 20;
  const int cores = omp_get_num_procs(), threads = std::min(4 * cores, 256);
  const double one = measure_read_bandwidth_gbs(bytes, 1, 3);
  const double many = measure_read_bandwidth_gbs(bytes, threads, 5);
  EXPECT_LE(many, 3.0 * cores * one) << threads << " threads on " << cores << " cores against one thread's " << one
                                     << " GB/s";
}

}  // namespace
}  // namespace kvscope
