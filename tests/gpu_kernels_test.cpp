// The decoder's CUDA kernels against their CPU operations (model/ops.h,
// model/matvec.h) on random inputs. Tolerances, per operation:
//   embed, kv_write, add      exact (copies; one f32 add)
//   rmsnorm                   1e-5 relative (the CPU sums squares in double, the GPU in f32)
//   rope                      1e-5 absolute on values in [-1, 1) (same angles; sinf/cosf within 2 ulp of exact)
//   swiglu                    1e-6 relative (expf versus std::exp)
//   matvec, matmul f32/bf16   1e-5 x sum |w x| (f32 sums in another order; bf16 widened exactly on both)
#include <cstring>
#include <tuple>

#include "gpu_test.h"

#ifdef KVSCOPE_HAVE_CUDA
#include "model/bf16.h"
#include "model/matvec.h"
#include "model/ops.h"

namespace kvscope {
namespace {

using test::DeviceArray;
using test::random_floats;

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = f32_to_bf16(v[i]);
  return out;
}

TEST(GpuKernels, EmbedGathersRowsExactly) {
  KVSCOPE_REQUIRE_GPU();
  const int vocab = 50, d = 72, T = 9;
  const std::vector<float> table = random_floats(size_t(vocab) * d, 1);
  const std::vector<uint16_t> table16 = to_bf16(table);
  const std::vector<int> tokens = {3, 0, 49, 7, 7, 12, 30, 1, 48};
  for (bool bf16 : {false, true}) {
    const Matrix m{bf16 ? DType::BF16 : DType::F32, vocab, d, bf16 ? static_cast<const void*>(table16.data()) : table.data()};
    std::vector<float> want(size_t(T) * d);
    embed(want.data(), m, tokens.data(), T);
    DeviceArray<float> out(want.size());
    DeviceArray<int> d_tokens;
    d_tokens.upload(tokens);
    DeviceArray<char> d_table;
    d_table.upload(static_cast<const char*>(m.data), m.bytes());
    cuda::embed(out.get(), d_table.get(), bf16 ? cuda::WeightType::BF16 : cuda::WeightType::F32, d_tokens.get(), T, d);
    EXPECT_EQ(out.to_host(want.size()), want) << (bf16 ? "bf16" : "f32");
  }
}

TEST(GpuKernels, RmsNormRowsAndHeads) {
  KVSCOPE_REQUIRE_GPU();
  // The last rows are small enough (mean square ~3e-7) that eps = 1e-6 changes them by half.
  for (auto [rows, n, scale] : {std::tuple{5, 1024, 3.0f}, std::tuple{24, 128, 3.0f}, std::tuple{7, 32, 3.0f},
                                std::tuple{3, 100, 3.0f}, std::tuple{4, 64, 1e-3f}}) {
    const std::vector<float> x = random_floats(size_t(rows) * n, 2, scale), w = random_floats(size_t(n), 3);
    std::vector<float> want(x.size());
    rmsnorm(want.data(), x.data(), w.data(), rows, n, 1e-6f);
    DeviceArray<float> d_x, d_w;
    d_x.upload(x);
    d_w.upload(w);
    cuda::rmsnorm(d_x.get(), d_x.get(), d_w.get(), rows, n, 1e-6f);  // in place, as for q_norm / k_norm
    const std::vector<float> got = d_x.to_host(x.size());
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-5f * std::max(1.0f, std::abs(want[i]))) << rows << "x" << n << " at " << i;
  }
}

TEST(GpuKernels, RopeRotatesHalvesLikeTheCpu) {
  KVSCOPE_REQUIRE_GPU();
  const int T = 6, heads = 5, hd = 128;  // 1,920 pairs: the last of 8 thread blocks of 256 is part-full
  const double theta = 1e6;
  const std::vector<int> pos = {0, 1, 17, 511, 4096, 100000};
  const std::vector<float> x = random_floats(size_t(T) * heads * hd, 4);
  std::vector<float> want = x;
  for (int t = 0; t < T; ++t) rope(want.data() + size_t(t) * heads * hd, heads, hd, pos[t], theta);
  std::vector<float> inv_freq(hd / 2);
  for (int i = 0; i < hd / 2; ++i) inv_freq[i] = 1.0f / std::pow(float(theta), float(2 * i) / float(hd));
  DeviceArray<float> d_x, d_freq;
  DeviceArray<int> d_pos;
  d_x.upload(x);
  d_freq.upload(inv_freq);
  d_pos.upload(pos);
  cuda::rope(d_x.get(), d_pos.get(), d_freq.get(), T, heads, hd);
  EXPECT_LE(max_abs_diff(d_x.to_host(x.size()), want), 1e-5f);
}

TEST(GpuKernels, KvWriteFollowsTheSlotMapping) {
  KVSCOPE_REQUIRE_GPU();
  const int slots = 40, kv_dim = 96, T = 5;
  const std::vector<int> mapping = {7, 0, 39, 16, 8};
  const std::vector<float> k = random_floats(size_t(T) * kv_dim, 5), v = random_floats(size_t(T) * kv_dim, 6);
  std::vector<float> want_k(size_t(slots) * kv_dim, 0.0f), want_v = want_k;
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < kv_dim; ++i) {
      want_k[size_t(mapping[t]) * kv_dim + i] = k[size_t(t) * kv_dim + i];
      want_v[size_t(mapping[t]) * kv_dim + i] = v[size_t(t) * kv_dim + i];
    }
  DeviceArray<float> k_cache(want_k.size()), v_cache(want_v.size()), d_k, d_v;
  k_cache.zero(want_k.size());
  v_cache.zero(want_v.size());
  d_k.upload(k);
  d_v.upload(v);
  DeviceArray<int> d_map;
  d_map.upload(mapping);
  cuda::kv_write(k_cache.get(), v_cache.get(), d_k.get(), d_v.get(), d_map.get(), T, kv_dim);
  EXPECT_EQ(k_cache.to_host(want_k.size()), want_k);
  EXPECT_EQ(v_cache.to_host(want_v.size()), want_v);
}

TEST(GpuKernels, SwiGluAndResidualAdd) {
  KVSCOPE_REQUIRE_GPU();
  const size_t n = 3000;
  const std::vector<float> g = random_floats(n, 7, 8.0f), u = random_floats(n, 8, 2.0f);
  std::vector<float> want(n), sum = g;
  swiglu(want.data(), g.data(), u.data(), n);
  add_inplace(sum.data(), u.data(), n);
  DeviceArray<float> d_g, d_u, d_out(n);
  d_g.upload(g);
  d_u.upload(u);
  cuda::swiglu(d_out.get(), d_g.get(), d_u.get(), n);
  const std::vector<float> got = d_out.to_host(n);
  for (size_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], want[i], 1e-6f * std::max(1.0f, std::abs(want[i]))) << i;
  cuda::add_inplace(d_g.get(), d_u.get(), n);
  EXPECT_EQ(d_g.to_host(n), sum);
}

enum class Linear { Gemv, Gemm };

// y = W x for T vectors on the GPU, by the decode GEMV (matvec, T vectors in one pass
// per kMaxVectors) or by cuBLAS (matmul), against the CPU's matmul. W starts `w_shift`
// bytes and x `x_shift` floats past a cudaMalloc'ed (256-byte aligned) address.
void check_linear(Linear path, DType dtype, int T, int rows, int cols, int w_shift = 0, int x_shift = 0) {
  const std::vector<float> w = random_floats(size_t(rows) * cols, 9), x = random_floats(size_t(T) * cols, 10);
  const std::vector<uint16_t> w16 = to_bf16(w);
  const bool bf16 = dtype == DType::BF16;
  const Matrix m{dtype, rows, cols, bf16 ? static_cast<const void*>(w16.data()) : w.data()};
  std::vector<float> want(size_t(T) * rows);
  matmul(want.data(), x.data(), m, T);
  // The bound: 1e-5 of the sum of |w x| of each output.
  std::vector<float> bound(want.size(), 0.0f);
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) {
        const float wv = bf16 ? bf16_to_f32(w16[size_t(r) * cols + c]) : w[size_t(r) * cols + c];
        bound[size_t(t) * rows + r] += 1e-5f * std::abs(wv * x[size_t(t) * cols + c]);
      }

  std::vector<char> w_bytes(size_t(w_shift) + m.bytes());
  std::memcpy(w_bytes.data() + w_shift, m.data, m.bytes());
  std::vector<float> x_floats(size_t(x_shift), 0.0f);
  x_floats.insert(x_floats.end(), x.begin(), x.end());
  DeviceArray<char> d_w;
  d_w.upload(w_bytes);
  DeviceArray<float> d_x, d_y(want.size()), scratch(size_t(cols) * 7);  // a small scratch: several bf16 bands
  d_x.upload(x_floats);
  const void* w_at = d_w.get() + w_shift;
  const float* x_at = d_x.get() + x_shift;
  const cuda::WeightType type = bf16 ? cuda::WeightType::BF16 : cuda::WeightType::F32;
  if (path == Linear::Gemv)
    cuda::matvec(d_y.get(), w_at, type, x_at, rows, cols, T);
  else
    cuda::matmul(d_y.get(), x_at, w_at, type, T, rows, cols, scratch.get(), scratch.size());
  const std::vector<float> got = d_y.to_host(want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], bound[i]) << (bf16 ? "bf16 " : "f32 ") << T << "x" << rows << "x" << cols << " at " << i;
}

TEST(GpuKernels, MatvecF32) {
  KVSCOPE_REQUIRE_GPU();
  check_linear(Linear::Gemv, DType::F32, 1, 300, 1024);  // 16-byte chunks
  check_linear(Linear::Gemv, DType::F32, 1, 33, 250);    // the scalar path (cols not a multiple of 4)
}

TEST(GpuKernels, MatvecBf16) {
  KVSCOPE_REQUIRE_GPU();
  check_linear(Linear::Gemv, DType::BF16, 1, 300, 1024);  // 8 weights per 16-byte chunk
  check_linear(Linear::Gemv, DType::BF16, 1, 33, 252);    // the scalar path (cols not a multiple of 8)
}

// Several vectors in one pass (a batched decode step): 3, exactly one pass of 8, and 11
// (a pass of 8, then one of 3), on both the chunked and the scalar path.
TEST(GpuKernels, MatvecSeveralVectors) {
  KVSCOPE_REQUIRE_GPU();
  for (int n : {3, 8, 11}) {
    check_linear(Linear::Gemv, DType::F32, n, 300, 1024);
    check_linear(Linear::Gemv, DType::F32, n, 33, 250);
    check_linear(Linear::Gemv, DType::BF16, n, 300, 1024);
    check_linear(Linear::Gemv, DType::BF16, n, 33, 252);
  }
}

// Row lengths that allow 16-byte chunks, but W or x not on a 16-byte boundary: the
// scalar path, with the same result. (A 16-byte load from such an address faults on a
// GPU; on the CPU stand-in, UBSan's alignment check catches it.)
TEST(GpuKernels, MatvecOffSixteenByteBoundaries) {
  KVSCOPE_REQUIRE_GPU();
  for (int n : {1, 3}) {
    check_linear(Linear::Gemv, DType::F32, n, 300, 1024, /*w_shift=*/4, 0);
    check_linear(Linear::Gemv, DType::F32, n, 300, 1024, 0, /*x_shift=*/1);
    check_linear(Linear::Gemv, DType::BF16, n, 300, 1024, /*w_shift=*/2, 0);
    check_linear(Linear::Gemv, DType::BF16, n, 300, 1024, 0, /*x_shift=*/2);
  }
}

TEST(GpuKernels, MatmulF32AndBf16) {
  KVSCOPE_REQUIRE_GPU();
  check_linear(Linear::Gemm, DType::F32, 17, 200, 96);
  check_linear(Linear::Gemm, DType::BF16, 17, 200, 96);  // 29 bands of 7 rows widened in turn
}

// A partial last block (n not a multiple of 256) must not write past element n-1.
TEST(GpuKernels, ElementwiseKernelsWriteOnlyTheirElements) {
  KVSCOPE_REQUIRE_GPU();
  const size_t n = 3000, pad = 300;
  const float sentinel = 12345.0f;
  std::vector<float> x = random_floats(n, 30);
  x.resize(n + pad, sentinel);
  const std::vector<float> y = random_floats(n + pad, 31), filled(n + pad, sentinel);
  DeviceArray<float> d_x, d_y, d_out;
  d_x.upload(x);
  d_y.upload(y);
  d_out.upload(filled);
  cuda::add_inplace(d_x.get(), d_y.get(), n);
  cuda::swiglu(d_out.get(), d_x.get(), d_y.get(), n);
  const std::vector<float> gx = d_x.to_host(n + pad), go = d_out.to_host(n + pad);
  for (size_t i = n; i < n + pad; ++i) {
    ASSERT_EQ(gx[i], sentinel) << "add_inplace wrote x[" << i << "]";
    ASSERT_EQ(go[i], sentinel) << "swiglu wrote out[" << i << "]";
  }
}

}  // namespace
}  // namespace kvscope

#else  // built without CUDA: the suite is here, and says why it does not run
TEST(GpuKernels, BuiltWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#endif
