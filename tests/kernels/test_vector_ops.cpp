#include <gtest/gtest.h>

#include "kernel_test_util.h"
#include "kernels/backend.h"
#include "kernels/isa.h"
#include "kernels/vector_ops.h"
#include "tensor/aligned_vector.h"
#include "tensor/error.h"

namespace inkling::test {
namespace {

using kernels::Isa;

TEST(Isa, NamesRoundTripAndDefaultIsSupported) {
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512})
    EXPECT_EQ(kernels::parse_isa(kernels::isa_name(isa)), isa);
  EXPECT_FALSE(kernels::parse_isa("sse9").has_value());
  EXPECT_TRUE(kernels::isa_supported(kernels::active_isa()));
  EXPECT_TRUE(kernels::isa_supported(Isa::Scalar));
}

TEST(Isa, SetIsaSwitchesOrRejects) {
  IsaGuard guard;
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
    if (kernels::isa_supported(isa)) {
      kernels::set_isa(isa);
      EXPECT_EQ(kernels::active_isa(), isa);
      EXPECT_STREQ(kernels::isa_name(), kernels::isa_name(isa));
    } else {
      EXPECT_THROW(kernels::set_isa(isa), Error);
    }
  }
}

TEST(VectorOps, DotAndAxpyMatchReference) {
  IsaGuard guard;
  std::mt19937 rng(5);
  for (int64_t n : {1, 7, 16, 17, 100, 2051}) {
    std::vector<float> a = random_vector(n, rng), b = random_vector(n, rng);
    double want_dot = 0.0, norm = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      want_dot += double(a[size_t(i)]) * b[size_t(i)];
      norm += double(a[size_t(i)]) * a[size_t(i)];
    }
    for (Isa isa : testable_isas()) {
      SCOPED_TRACE(std::string(kernels::isa_name(isa)) + " n=" + std::to_string(n));
      kernels::set_isa(isa);
      // Relative to |a||b| ~ n: the scale of the rounding error of any summation order.
      EXPECT_NEAR(kernels::dot_f32(a.data(), b.data(), n), want_dot, 1e-5 * double(n));
      std::vector<float> y = b;
      kernels::axpy_f32(-0.75f, a.data(), y.data(), n);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_NEAR(y[size_t(i)], b[size_t(i)] - 0.75 * a[size_t(i)], 1e-5) << i;
    }
  }
}

TEST(VectorOps, RmsnormMatchesReferenceForEachWeightDtype) {
  IsaGuard guard;
  std::mt19937 rng(6);
  for (int64_t n : {1, 17, 2051}) {
    std::vector<float> x = random_vector(n, rng), gain = random_vector(n, rng);
    for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
      std::vector<uint8_t> stored(size_t(n) * dtype_size(dtype));
      std::vector<double> w(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        if (dtype == DType::F32) {
          std::memcpy(&stored[size_t(i * 4)], &gain[size_t(i)], 4);
        } else {
          uint16_t bits = dtype == DType::BF16 ? f32_to_bf16(gain[size_t(i)])
                                               : f32_to_f16(gain[size_t(i)]);
          std::memcpy(&stored[size_t(i * 2)], &bits, 2);
        }
        w[size_t(i)] = load_as_f32(stored.data(), dtype, size_t(i));
      }
      const float eps = 1e-5f;
      double mean_square = 0.0;
      for (float v : x) mean_square += double(v) * v;
      mean_square /= double(n);
      const double inv_rms = 1.0 / std::sqrt(mean_square + eps);
      for (Isa isa : testable_isas()) {
        SCOPED_TRACE(std::string(kernels::isa_name(isa)) + " n=" + std::to_string(n) + " " +
                     std::string(dtype_name(dtype)));
        kernels::set_isa(isa);
        std::vector<float> out(static_cast<size_t>(n));
        kernels::rmsnorm(x.data(), {stored.data(), dtype}, eps, n, out.data());
        for (int64_t i = 0; i < n; ++i) {
          double want = x[size_t(i)] * inv_rms * w[size_t(i)];
          ASSERT_NEAR(out[size_t(i)], want, 1e-5 * (1.0 + std::fabs(want))) << i;
        }
      }
    }
  }
  float x = 1.0f, out;
  EXPECT_THROW(kernels::rmsnorm(&x, {&x, DType::I32}, 1e-5f, 1, &out), Error);
}

TEST(Measure, StreamSumAddsEveryWordOnEachIsa) {
  // Unaligned start and a length that is a multiple of 32 words but not of any unroll squared.
  std::vector<uint64_t> words(32 * 37 + 1);
  std::mt19937_64 rng(7);
  for (uint64_t& w : words) w = rng();
  uint64_t want = 0;
  for (size_t i = 1; i < words.size(); ++i) want += words[i];
  for (Isa isa : testable_isas()) {
    SCOPED_TRACE(kernels::isa_name(isa));
    EXPECT_EQ(kernels::detail::backend_for(isa).stream_sum(words.data() + 1, words.size() - 1), want);
  }
}

// In place over the caller's memory: only read (the bytes stay as they were), aligned memory only.
TEST(Measure, BandwidthInPlaceOverCallerMemory) {
  AlignedVector<uint64_t> words(size_t(4) << 20);
  for (size_t i = 0; i < words.size(); ++i) words[i] = i * 0x9E3779B97F4A7C15ull;
  const std::vector<uint64_t> before(words.begin(), words.end());
  const double gbs = kernels::measure_read_bandwidth_gbs(words.data(), words.size() * 8, 2);
  EXPECT_GT(gbs, 0.5);
  EXPECT_LT(gbs, 10000.0);
  EXPECT_TRUE(std::equal(before.begin(), before.end(), words.begin()));
  EXPECT_EQ(kernels::measure_read_bandwidth_gbs(words.data(), 255, 2), 0.0);  // less than one 256-byte block
  EXPECT_THROW(kernels::measure_read_bandwidth_gbs(reinterpret_cast<const uint8_t*>(words.data()) + 8, 1 << 20, 2),
               Error);
}

TEST(Measure, BandwidthAndFmaPeakArePlausible) {
  const double gbs = kernels::measure_read_bandwidth_gbs(size_t(32) << 20, 2);
  EXPECT_GT(gbs, 0.5);
  EXPECT_LT(gbs, 10000.0);
  const double gflops = kernels::measure_fma_peak_gflops(1);
  EXPECT_GT(gflops, 0.5);
  EXPECT_LT(gflops, 100000.0);
}

}  // namespace
}  // namespace inkling::test
