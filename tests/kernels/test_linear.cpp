// Every linear kernel, on every ISA path this CPU runs, against the scalar dequantization with
// double accumulation: odd row counts, several column counts per format, strided (w13) views.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kernel_test_util.h"
#include "kernels/backend.h"
#include "kernels/linear.h"
#include "tensor/error.h"

namespace inkling::test {
namespace {

using kernels::Isa;

// Max error relative to the output RMS. Everything accumulates in f32 against a double
// reference; the 1088-column rows and the affine bias term bound this.
constexpr double kTolerance = 2e-5;

std::vector<FormatSpec> all_formats() {
  std::vector<FormatSpec> specs = {{WeightFormat::F32},
                                   {WeightFormat::BF16},
                                   {WeightFormat::F16},
                                   {WeightFormat::NvFp4, 4, 16, DType::F8_E4M3}};
  for (int bits : {4, 8})
    for (int group : {32, 64, 128})
      for (DType dtype : {DType::BF16, DType::F16, DType::F32})
        specs.push_back({WeightFormat::Affine, bits, group, dtype});
  specs.push_back({WeightFormat::Affine, 4, 16, DType::BF16});   // group not a vector multiple
  specs.push_back({WeightFormat::Affine, 4, 256, DType::BF16});  // group wider than a chunk
  return specs;
}

std::vector<int64_t> cols_for(const FormatSpec& spec) {
  switch (spec.format) {
    case WeightFormat::Affine:
      // Multiples of 128 take the AVX-512 nibble-lane path, the others the 32-column one.
      if (spec.group_size == 256) return {256, 768};
      if (spec.group_size == 128) return {128, 384, 1152};
      return {64, 192, 256, 1088};
    case WeightFormat::NvFp4: return {64, 192, 256, 1088, 1104};  // 1104: a 16-column tail
    default: return {64, 67, 100, 192, 1088};  // 67: a partial vector; 100: 64 + 32 + a partial vector
  }
}

class LinearTest : public ::testing::TestWithParam<FormatSpec> {};

TEST_P(LinearTest, MatvecAndMatmulMatchReference) {
  IsaGuard guard;
  PrecisionGuard exact(kernels::MatmulPrecision::Exact);
  std::mt19937 rng(1234);
  for (int64_t rows : {1, 3, 17, 130}) {
    for (int64_t cols : cols_for(GetParam())) {
      // Stack of two: view(1) is the odd rows, a strided matrix like `up` in w13.
      TestMatrix matrix(GetParam(), rows, cols, 2, rng);
      const WeightMatrix w = matrix.view(1);
      const int64_t max_n = 33;
      std::vector<float> x = random_vector(max_n * cols, rng);
      for (int64_t n : {1, 2, 5, 33}) {
        std::vector<double> want = reference_matmul(w, x.data(), n);
        for (Isa isa : testable_isas()) {
          SCOPED_TRACE(std::string(kernels::isa_name(isa)) + " rows=" + std::to_string(rows) +
                       " cols=" + std::to_string(cols) + " n=" + std::to_string(n));
          kernels::set_isa(isa);
          std::vector<float> got(size_t(n * rows), NAN);
          kernels::matmul(w, x.data(), n, got.data());
          EXPECT_LT(relative_error(got, want), kTolerance);
          if (n == 1) {
            std::vector<float> got_matvec(size_t(rows), NAN);
            kernels::matvec(w, x.data(), got_matvec.data());
            EXPECT_LT(relative_error(got_matvec, want), kTolerance);
          }
        }
      }
    }
  }
}

TEST_P(LinearTest, SwigluMatchesComposedReference) {
  IsaGuard guard;
  PrecisionGuard exact(kernels::MatmulPrecision::Exact);
  std::mt19937 rng(99);
  for (int64_t rows : {1, 17, 130}) {
    const int64_t cols = cols_for(GetParam()).back();
    TestMatrix w13(GetParam(), rows, cols, 2, rng);
    const WeightMatrix gate = w13.view(0), up = w13.view(1);
    std::vector<float> x = random_vector(33 * cols, rng);
    for (int64_t n : {1, 5, 33}) {  // 33: past the decode batches, the prefill path
      std::vector<double> g = reference_matmul(gate, x.data(), n);
      std::vector<double> u = reference_matmul(up, x.data(), n);
      std::vector<double> want(g.size());
      for (size_t i = 0; i < g.size(); ++i) want[i] = silu(g[i]) * u[i];
      for (Isa isa : testable_isas()) {
        SCOPED_TRACE(std::string(kernels::isa_name(isa)) + " rows=" + std::to_string(rows) +
                     " n=" + std::to_string(n));
        kernels::set_isa(isa);
        std::vector<float> got(size_t(n * rows), NAN);
        if (n == 1)
          kernels::swiglu_matvec(gate, up, x.data(), got.data());
        else
          kernels::swiglu_matmul(gate, up, x.data(), n, got.data());
        EXPECT_LT(relative_error(got, want), 5 * kTolerance);
      }
    }
  }
}

// MatmulPrecision::Bf16Activations: matmul past kDecodeBatchMaxTokens may round X to bf16
// (vdpbf16ps), the 4-bit matvec (and so decode batches) may quantize x to int8 (VNNI, AVX2).
// Same shapes as above.
// Errors are relative to the larger of the output RMS and term_rms (see kernel_test_util.h).
// bf16: RMS error under 6e-3 (measured ~1.5e-3 bf16 weights, up to 4.2e-3 affine). Worst output: under 1e-2 when only X is rounded (bf16 and NVFP4
// weights are exact in bf16); affine weights are rounded too (centred, see
// linear_avx512bf16.cpp) and measure up to 1.3e-2 on these sizes, hence 1.5e-2.
constexpr double kBf16RmsTolerance = 6e-3;
constexpr double kBf16Tolerance = 1.5e-2;
// VNNI: x as int8 per 8 columns, the error class of llama.cpp's q8 activations: RMS measured
// 3.8e-3 of the output RMS (theory: (max|x| / 127) / sqrt(12) per element ~ 0.4% of |x|), worst
// of 512 outputs 1.3e-2.
constexpr double kVnniRmsTolerance = 6e-3;
constexpr double kVnniTolerance = 2.5e-2;

TEST_P(LinearTest, Bf16ActivationsMatchReference) {
  IsaGuard guard;
  PrecisionGuard fast(kernels::MatmulPrecision::Bf16Activations);
  std::mt19937 rng(4321);
  for (int64_t rows : {1, 3, 17, 130}) {
    for (int64_t cols : cols_for(GetParam())) {
      TestMatrix matrix(GetParam(), rows, cols, 2, rng);
      const WeightMatrix w = matrix.view(1);
      std::vector<float> x = random_vector(33 * cols, rng);
      for (int64_t n : {1, 4, 5, 33}) {
        std::vector<double> want = reference_matmul(w, x.data(), n);
        std::vector<float> dummy(want.size(), 0.0f);
        const double scale =
            std::max(term_rms(w, x.data(), n), rms_error_over(dummy, want, 1.0));
        for (Isa isa : testable_isas()) {
          SCOPED_TRACE(std::string(kernels::isa_name(isa)) + " rows=" + std::to_string(rows) +
                       " cols=" + std::to_string(cols) + " n=" + std::to_string(n));
          kernels::set_isa(isa);
          std::vector<float> got(size_t(n * rows), NAN);
          kernels::matmul(w, x.data(), n, got.data());
          // Decode batches are matvecs (test_decode_batch.cpp), larger n the bf16 prefill.
          const bool decode = n <= kernels::kDecodeBatchMaxTokens;
          EXPECT_LT(max_error_over(got, want, scale), decode ? kVnniTolerance : kBf16Tolerance);
          if (n * rows >= 100) {  // an RMS over a few outputs is just their worst
            EXPECT_LT(rms_error_over(got, want, scale), decode ? kVnniRmsTolerance : kBf16RmsTolerance);
          }
        }
      }
    }
  }
}

TEST_P(LinearTest, Bf16ActivationsSwiglu) {
  IsaGuard guard;
  PrecisionGuard fast(kernels::MatmulPrecision::Bf16Activations);
  std::mt19937 rng(98);
  for (int64_t rows : {17, 130}) {  // one output is no measure of relative error
    const int64_t cols = cols_for(GetParam()).back();
    for (int64_t c : {cols, cols_for(GetParam()).front()}) {
      TestMatrix w13(GetParam(), rows, c, 2, rng);
      const WeightMatrix gate = w13.view(0), up = w13.view(1);
      std::vector<float> x = random_vector(33 * c, rng);
      for (int64_t n : {1, 5, 33}) {
        std::vector<double> g = reference_matmul(gate, x.data(), n);
        std::vector<double> u = reference_matmul(up, x.data(), n);
        std::vector<double> want(g.size());
        for (size_t i = 0; i < g.size(); ++i) want[i] = silu(g[i]) * u[i];
        for (Isa isa : testable_isas()) {
          SCOPED_TRACE(std::string(kernels::isa_name(isa)) + " rows=" + std::to_string(rows) +
                       " cols=" + std::to_string(c) + " n=" + std::to_string(n));
          kernels::set_isa(isa);
          std::vector<float> got(size_t(n * rows), NAN);
          if (n == 1)
            kernels::swiglu_matvec(gate, up, x.data(), got.data());
          else
            kernels::swiglu_matmul(gate, up, x.data(), n, got.data());
          EXPECT_LT(relative_error(got, want),
                    n <= kernels::kDecodeBatchMaxTokens ? 5 * kVnniTolerance : 4 * kBf16Tolerance);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllFormats, LinearTest, ::testing::ValuesIn(all_formats()),
                         [](const auto& info) { return info.param.name(); });

// Large enough that matvec / matmul fork onto every thread: checks the row split.
TEST(LinearThreads, LargeMatrixSplitsCorrectly) {
  IsaGuard guard;
  PrecisionGuard exact(kernels::MatmulPrecision::Exact);
  std::mt19937 rng(7);
  const FormatSpec spec{WeightFormat::Affine, 4, 64, DType::BF16};
  TestMatrix matrix(spec, 1027, 1024, 1, rng);
  const WeightMatrix w = matrix.view(0);
  std::vector<float> x = random_vector(7 * 1024, rng);
  for (int64_t n : {1, 7}) {
    std::vector<double> want = reference_matmul(w, x.data(), n);
    for (Isa isa : testable_isas()) {
      SCOPED_TRACE(kernels::isa_name(isa));
      kernels::set_isa(isa);
      std::vector<float> got(size_t(n * w.rows), NAN);
      kernels::matmul(w, x.data(), n, got.data());
      EXPECT_LT(relative_error(got, want), kTolerance);
    }
  }
}

// matvec caches what it derives from x; rewriting x in place, or switching matrices with other
// group sizes on the same x, must not reuse stale data.
TEST(LinearCache, SameActivationPointerWithNewContents) {
  IsaGuard guard;
  PrecisionGuard exact(kernels::MatmulPrecision::Exact);
  std::mt19937 rng(11);
  TestMatrix q4_g32({WeightFormat::Affine, 4, 32, DType::BF16}, 9, 256, 1, rng);
  TestMatrix q4_g64({WeightFormat::Affine, 4, 64, DType::F16}, 9, 256, 1, rng);
  TestMatrix fp4({WeightFormat::NvFp4, 4, 16, DType::F8_E4M3}, 9, 256, 1, rng);
  std::vector<float> x = random_vector(256, rng);
  for (Isa isa : testable_isas()) {
    SCOPED_TRACE(kernels::isa_name(isa));
    kernels::set_isa(isa);
    for (int round = 0; round < 3; ++round) {
      for (const TestMatrix* matrix : {&q4_g32, &q4_g64, &fp4}) {
        const WeightMatrix w = matrix->view(0);
        std::vector<double> want = reference_matmul(w, x.data(), 1);
        std::vector<float> got(9, NAN);
        kernels::matvec(w, x.data(), got.data());
        EXPECT_LT(relative_error(got, want), kTolerance);
      }
      for (float& v : x) v = v * 0.5f + 0.25f;  // same buffer, new values
    }
  }
}

// A batch checks its caches against x once for all its products, and products with different
// group sizes on one x must each get their own group sums.
TEST(LinearCache, BatchOnOneActivationRewrittenInPlace) {
  IsaGuard guard;
  std::mt19937 rng(12);
  TestMatrix q4_g32({WeightFormat::Affine, 4, 32, DType::BF16}, 9, 256, 1, rng);
  TestMatrix q4_g64({WeightFormat::Affine, 4, 64, DType::F16}, 9, 256, 1, rng);
  TestMatrix fp4({WeightFormat::NvFp4, 4, 16, DType::F8_E4M3}, 9, 256, 1, rng);
  const WeightMatrix ws[] = {q4_g32.view(0), q4_g64.view(0), fp4.view(0)};
  for (auto precision : {kernels::MatmulPrecision::Exact, kernels::MatmulPrecision::Bf16Activations}) {
    PrecisionGuard batch_precision(precision);
    for (Isa isa : testable_isas()) {
      SCOPED_TRACE(kernels::isa_name(isa));
      kernels::set_isa(isa);
      std::vector<float> x = random_vector(256, rng);
      for (int round = 0; round < 3; ++round) {
        std::vector<std::vector<float>> got(3, std::vector<float>(9, NAN));
        const kernels::MatvecProduct batch[] = {
            {&ws[0], x.data(), got[0].data()}, {&ws[1], x.data(), got[1].data()}, {&ws[2], x.data(), got[2].data()}};
        kernels::matvec_batch(batch);
        // Stale sums or digits are off by O(1); int8 activations (fast) by ~1e-2 on 256 columns.
        const double tolerance = precision == kernels::MatmulPrecision::Exact ? kTolerance : 5e-2;
        for (int i = 0; i < 3; ++i)
          EXPECT_LT(relative_error(got[size_t(i)], reference_matmul(ws[i], x.data(), 1)), tolerance)
              << "round " << round << ", product " << i;
        for (float& v : x) v = v * 0.5f + 0.25f;  // same buffer, new values
      }
    }
  }
}

// Batches with many distinct x (a layer's expert down projections) derive them on all threads:
// every product must still get its own x, also when the buffers are rewritten in place.
TEST(LinearCache, BatchOfManyActivations) {
  IsaGuard guard;
  std::mt19937 rng(13);
  std::vector<TestMatrix> matrices;
  for (int i = 0; i < 6; ++i)
    matrices.emplace_back(i % 2 ? FormatSpec{WeightFormat::NvFp4, 4, 16, DType::F8_E4M3}
                                : FormatSpec{WeightFormat::Affine, 4, 64, DType::BF16},
                          40, 512, 1, rng);
  std::vector<WeightMatrix> ws;
  for (TestMatrix& m : matrices) ws.push_back(m.view(0));
  // Products 0..4 have an x each; product 5 shares product 0's.
  std::vector<std::vector<float>> xs;
  for (int i = 0; i < 5; ++i) xs.push_back(random_vector(512, rng));
  for (auto precision : {kernels::MatmulPrecision::Exact, kernels::MatmulPrecision::Bf16Activations}) {
    PrecisionGuard batch_precision(precision);
    const double tolerance = precision == kernels::MatmulPrecision::Exact ? kTolerance : 5e-2;
    for (Isa isa : testable_isas()) {
      SCOPED_TRACE(kernels::isa_name(isa));
      kernels::set_isa(isa);
      for (int round = 0; round < 3; ++round) {
        std::vector<std::vector<float>> got(6, std::vector<float>(40, NAN));
        std::vector<kernels::MatvecProduct> batch;
        for (int i = 0; i < 6; ++i) batch.push_back({&ws[size_t(i)], xs[size_t(i % 5)].data(), got[size_t(i)].data()});
        kernels::matvec_batch(batch);
        for (int i = 0; i < 6; ++i)
          EXPECT_LT(relative_error(got[size_t(i)], reference_matmul(ws[size_t(i)], batch[size_t(i)].x, 1)), tolerance)
              << "round " << round << ", product " << i;
        for (auto& x : xs)
          for (float& v : x) v = v * -0.75f + 0.125f;  // same buffers, new values
      }
    }
  }
}

// The precision switch is an API: default Bf16Activations (INKLING_EXACT unset), settable.
TEST(LinearPrecision, SetAndGet) {
  PrecisionGuard guard(kernels::matmul_precision());
  kernels::set_matmul_precision(kernels::MatmulPrecision::Exact);
  EXPECT_EQ(kernels::matmul_precision(), kernels::MatmulPrecision::Exact);
  kernels::set_matmul_precision(kernels::MatmulPrecision::Bf16Activations);
  EXPECT_EQ(kernels::matmul_precision(), kernels::MatmulPrecision::Bf16Activations);
}

// The 4-bit expert formats of the releases (MLX affine g64, NVFP4), tested on the bench shape.
const FormatSpec kExpertFormats[] = {{WeightFormat::Affine, 4, 64, DType::BF16},
                                     {WeightFormat::NvFp4, 4, 16, DType::F8_E4M3}};

// The VNNI matvec on the bench shape: random x, 4-bit weights, error vs the output RMS over
// many rows (the accuracy contract of --fast decode on 4-bit weights).
TEST(LinearPrecision, VnniMatvecAccuracyAtScale) {
  IsaGuard guard;
  PrecisionGuard fast(kernels::MatmulPrecision::Bf16Activations);
  std::mt19937 rng(5);
  for (FormatSpec spec : kExpertFormats) {
    TestMatrix matrix(spec, 512, 2048, 1, rng);
    const WeightMatrix w = matrix.view(0);
    std::vector<float> x = random_vector(2048, rng);
    std::vector<double> want = reference_matmul(w, x.data(), 1);
    for (Isa isa : testable_isas()) {
      SCOPED_TRACE(spec.name() + " " + kernels::isa_name(isa));
      kernels::set_isa(isa);
      std::vector<float> got(512, NAN);
      kernels::matvec(w, x.data(), got.data());
      EXPECT_LT(relative_error(got, want), kVnniTolerance);
      std::vector<float> zero(want.size(), 0.0f);
      EXPECT_LT(rms_error_over(got, want, rms_error_over(zero, want, 1.0)), kVnniRmsTolerance);
    }
  }
}

// Exact precision: the 4-bit decode of the VNNI and AVX2 paths takes x as 24-bit integers per 8
// columns (three int8 digits) and sums exactly in int32, so its error must stay in the class of
// f32 arithmetic: measured against the scalar path's f32 products on the bench shape.
TEST(LinearPrecision, ExactIntegerMatvecStaysF32Class) {
  IsaGuard guard;
  PrecisionGuard exact(kernels::MatmulPrecision::Exact);
  std::mt19937 rng(8);
  std::vector<Isa> integer_isas;
  if (kernels::isa_supported(Isa::Avx512) && kernels::detail::cpu_has_avx512_vnni()) integer_isas.push_back(Isa::Avx512);
  if (kernels::isa_supported(Isa::Avx2)) integer_isas.push_back(Isa::Avx2);
  if (integer_isas.empty()) GTEST_SKIP() << "this CPU has neither AVX512_VNNI nor AVX2";
  for (FormatSpec spec : kExpertFormats) {
    TestMatrix matrix(spec, 512, 2048, 1, rng);
    const WeightMatrix w = matrix.view(0);
    std::vector<float> x = random_vector(2048, rng);
    x[7] *= 300.0f;  // an outlier next to ordinary values in one 8-column lane
    std::vector<double> want = reference_matmul(w, x.data(), 1);
    std::vector<float> zero(want.size(), 0.0f);
    const double output_rms = rms_error_over(zero, want, 1.0);
    std::vector<float> f32(512, NAN);
    kernels::set_isa(Isa::Scalar);
    kernels::matvec(w, x.data(), f32.data());
    const double f32_error = rms_error_over(f32, want, output_rms);
    for (Isa isa : integer_isas) {
      std::vector<float> got(512, NAN);
      kernels::set_isa(isa);
      kernels::matvec(w, x.data(), got.data());
      const double error = rms_error_over(got, want, output_rms);
      std::printf("[ measured ] %s exact, %s: RMS error / output RMS: 24-bit integer %.2g, scalar f32 %.2g\n",
                  spec.name().c_str(), kernels::isa_name(isa), error, f32_error);
      EXPECT_LT(error, std::max(4.0 * f32_error, 1e-7)) << spec.name() << " " << kernels::isa_name(isa);
    }
  }
}

// The two VNNI nibble decoders (vpermb where the CPU has AVX512_VBMI; AND / shift / vpshufb
// otherwise) feed the same integers to the same float operations: bit-identical outputs, both
// within the VNNI bounds, for every group size the VNNI path takes.
TEST(LinearPrecision, VnniVariantsAgreeBitwise) {
  if (!kernels::isa_supported(Isa::Avx512) || !kernels::detail::cpu_has_avx512_vnni())
    GTEST_SKIP() << "this CPU has no AVX512_VNNI";
  IsaGuard guard;
  PrecisionGuard restore(kernels::matmul_precision());
  const bool saved_vbmi = kernels::detail::vnni_vbmi();
  kernels::set_isa(Isa::Avx512);
  std::mt19937 rng(99);
  std::vector<FormatSpec> specs = {{WeightFormat::NvFp4, 4, 16, DType::F8_E4M3}};
  for (int group : {8, 16, 32, 64, 128}) specs.push_back({WeightFormat::Affine, 4, group, DType::BF16});
  specs.push_back({WeightFormat::Affine, 4, 64, DType::F16});
  // Fast: one int8 digit of x; exact: three (checked against the exact-path tolerance).
  for (auto precision : {kernels::MatmulPrecision::Bf16Activations, kernels::MatmulPrecision::Exact}) {
    kernels::set_matmul_precision(precision);
    const bool fast = precision == kernels::MatmulPrecision::Bf16Activations;
    for (const FormatSpec& spec : specs) {
      for (int64_t cols : {128, 384, 2176}) {  // 2176: a partial block of 16 scales for g >= 16
        SCOPED_TRACE(spec.name() + " cols=" + std::to_string(cols) + (fast ? " fast" : " exact"));
        TestMatrix matrix(spec, 37, cols, 2, rng);
        const WeightMatrix w = matrix.view(1);
        ASSERT_TRUE(kernels::detail::vnni_matvec_shape(w));
        std::vector<float> x = random_vector(cols, rng);
        std::vector<double> want = reference_matmul(w, x.data(), 1);
        std::vector<float> zero(want.size(), 0.0f);
        const double output_rms = rms_error_over(zero, want, 1.0);
        std::vector<std::vector<float>> outputs;
        for (bool vbmi : {false, true}) {
          if (vbmi && !kernels::detail::cpu_has_avx512_vbmi()) continue;
          kernels::detail::set_vnni_vbmi(vbmi);
          ASSERT_EQ(kernels::detail::vnni_vbmi(), vbmi);
          std::vector<float> got(size_t(w.rows), NAN);
          kernels::matvec(w, x.data(), got.data());
          EXPECT_LT(relative_error(got, want), fast ? kVnniTolerance : kTolerance) << "vbmi=" << vbmi;
          if (fast) {
            EXPECT_LT(rms_error_over(got, want, output_rms), kVnniRmsTolerance) << "vbmi=" << vbmi;
          }
          outputs.push_back(std::move(got));
        }
        for (size_t i = 1; i < outputs.size(); ++i)
          for (size_t r = 0; r < outputs[0].size(); ++r)
            ASSERT_EQ(outputs[0][r], outputs[i][r]) << "row " << r;
      }
    }
  }
  kernels::detail::set_vnni_vbmi(saved_vbmi);
}

// Threads and chunks split a matrix's rows at arbitrary points: a row's VNNI output must not
// depend on where its range starts or how long it is (the kernels prefetch a range's first rows'
// scales, and reducing rows in groups was tried), and no range may write past its last row. Each
// view below starts `skip` rows later and must give the full matrix's outputs bit for bit.
TEST(LinearPrecision, VnniRowsIndependentOfRangeStart) {
  if (!kernels::isa_supported(Isa::Avx512) || !kernels::detail::cpu_has_avx512_vnni())
    GTEST_SKIP() << "this CPU has no AVX512_VNNI";
  IsaGuard guard;
  PrecisionGuard restore(kernels::matmul_precision());
  kernels::set_isa(Isa::Avx512);
  std::mt19937 rng(5);
  for (const FormatSpec& spec : kExpertFormats) {
    for (auto precision : {kernels::MatmulPrecision::Bf16Activations, kernels::MatmulPrecision::Exact}) {
      kernels::set_matmul_precision(precision);
      TestMatrix matrix(spec, 23, 256, 1, rng);
      const WeightMatrix full = matrix.view(0);
      std::vector<float> x = random_vector(256, rng);
      std::vector<float> want(size_t(full.rows), NAN);
      kernels::matvec(full, x.data(), want.data());
      for (int64_t skip = 1; skip <= 7; ++skip) {
        SCOPED_TRACE(spec.name() + " skip=" + std::to_string(skip));
        WeightMatrix w = full;
        w.rows -= skip;
        w.data += skip * w.row_stride;
        w.scales += skip * w.scales_row_stride;
        if (w.biases) w.biases += skip * w.biases_row_stride;
        for (int64_t rows : {w.rows, int64_t(1), int64_t(2), int64_t(3), int64_t(5)}) {
          WeightMatrix part = w;
          part.rows = rows;
          std::vector<float> got(size_t(rows) + 1, NAN);
          kernels::matvec(part, x.data(), got.data());
          for (int64_t r = 0; r < rows; ++r) ASSERT_EQ(got[size_t(r)], want[size_t(r + skip)]) << "row " << r << " of " << rows;
          ASSERT_TRUE(std::isnan(got[size_t(rows)])) << "wrote past the last of " << rows << " rows";
        }
      }
    }
  }
}

// The VNNI NVFP4 kernel decodes block scales with a shift when a row's are all non-negative and
// finite (every real checkpoint), and in full otherwise: negative scales must still count as
// negative and a NaN scale must reach its row's output (and only its row's), on every path.
TEST(LinearPrecision, Nvfp4SignedAndNanScales) {
  IsaGuard guard;
  PrecisionGuard restore(kernels::matmul_precision());
  std::mt19937 rng(23);
  const FormatSpec spec{WeightFormat::NvFp4, 4, 16, DType::F8_E4M3};
  for (int64_t cols : {128, 2176}) {  // 2176: 17 chunks, the last pair a single chunk
    TestMatrix matrix(spec, 37, cols, 2, rng);
    const int64_t scales_per_row = cols / 16;
    for (int64_t i = 0; i < scales_per_row; ++i) *(matrix.scales_of_row(1, 3) + i) |= 0x80;  // all negative
    *(matrix.scales_of_row(1, 10) + scales_per_row - 1) |= 0x80;  // one, in the last block
    *(matrix.scales_of_row(1, 36) + 0) |= 0x80;                   // one, in the last row
    const int64_t nan_row = 20;
    *(matrix.scales_of_row(1, nan_row) + scales_per_row / 2) = 0x7f;
    const WeightMatrix w = matrix.view(1);
    std::vector<float> x = random_vector(cols, rng);
    std::vector<double> want = reference_matmul(w, x.data(), 1);
    ASSERT_TRUE(std::isnan(want[size_t(nan_row)]));
    want[size_t(nan_row)] = 0.0;
    for (auto precision : {kernels::MatmulPrecision::Bf16Activations, kernels::MatmulPrecision::Exact}) {
      kernels::set_matmul_precision(precision);
      const bool fast = precision == kernels::MatmulPrecision::Bf16Activations;
      for (Isa isa : testable_isas()) {
        SCOPED_TRACE(std::string(kernels::isa_name(isa)) + " cols=" + std::to_string(cols) + (fast ? " fast" : " exact"));
        kernels::set_isa(isa);
        std::vector<float> got(size_t(w.rows), 0.0f);
        kernels::matvec(w, x.data(), got.data());
        EXPECT_TRUE(std::isnan(got[size_t(nan_row)]));
        got[size_t(nan_row)] = 0.0f;
        EXPECT_LT(relative_error(got, want), fast ? kVnniTolerance : kTolerance);
      }
    }
  }
}

// A matrix marked scales_nonnegative_finite (the binder's scan) skips the per-row check of its
// NVFP4 scales. Fused gate / up (one w13 stream) may skip it only when both halves are marked:
// here the gate is marked, and up's negative scales must still count as negative.
TEST(LinearPrecision, Nvfp4MarkedScalesAndFusedW13) {
  IsaGuard guard;
  PrecisionGuard restore(kernels::matmul_precision());
  std::mt19937 rng(29);
  const FormatSpec spec{WeightFormat::NvFp4, 4, 16, DType::F8_E4M3};
  const int64_t rows = 37, cols = 2176;
  TestMatrix w13(spec, rows, cols, 2, rng);
  for (int64_t r : {0, 5, 36}) *(w13.scales_of_row(1, r) + 3) |= 0x80;  // up rows with a negative scale
  WeightMatrix gate = w13.view(0);
  const WeightMatrix up = w13.view(1);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < cols / 16; ++i) ASSERT_LE(*(w13.scales_of_row(0, r) + i), 0x7e);
  gate.scales_nonnegative_finite = true;
  std::vector<float> x = random_vector(cols, rng);
  const std::vector<double> g = reference_matmul(gate, x.data(), 1), u = reference_matmul(up, x.data(), 1);
  std::vector<double> want(g.size());
  for (size_t i = 0; i < g.size(); ++i) want[i] = silu(g[i]) * u[i];
  for (auto precision : {kernels::MatmulPrecision::Bf16Activations, kernels::MatmulPrecision::Exact}) {
    kernels::set_matmul_precision(precision);
    const bool fast = precision == kernels::MatmulPrecision::Bf16Activations;
    for (Isa isa : testable_isas()) {
      SCOPED_TRACE(std::string(kernels::isa_name(isa)) + (fast ? " fast" : " exact"));
      kernels::set_isa(isa);
      std::vector<float> got(size_t(rows), NAN);
      kernels::matvec(gate, x.data(), got.data());
      EXPECT_LT(relative_error(got, g), fast ? kVnniTolerance : kTolerance);
      kernels::swiglu_matvec(gate, up, x.data(), got.data());
      EXPECT_LT(relative_error(got, want), fast ? 5 * kVnniTolerance : 5 * kTolerance);
    }
  }
}

// Each backend's quantize_q8 (the AVX-512 one vectorised) must write the scalar one's bytes: the
// ISAs' 4-bit decodes are compared against each other on the same digits.
TEST(LinearPrepare, QuantizeQ8SameOnEveryIsa) {
  std::mt19937 rng(31);
  const int64_t chunks = 17, cols = 128 * chunks;
  std::vector<float> x = random_vector(cols, rng);
  for (int j = 0; j < 8; ++j) x[size_t(8 + j)] = 0.0f;       // a lane of zeros
  x[20] = -0.0f;
  x[40] = 3.0e38f;                                          // near the top of f32
  x[41] = -1.0e-40f;                                        // subnormal
  for (int j = 0; j < 8; ++j) x[size_t(64 + j)] = 1.0e-42f * float(j - 3);  // a lane of subnormals
  x[100] = 127.0f;                                          // ties at .5 after scaling
  x[101] = 0.5f;
  x[102] = 1.5f;
  x[103] = -2.5f;
  for (int parts : {1, 3}) {
    auto run = [&](const kernels::detail::Backend& backend, std::vector<int8_t>& digits, std::vector<float>& scales,
                   std::vector<int32_t>& offsets, std::vector<float>& x_hat) {
      digits.assign(size_t(cols * parts), 0);
      scales.assign(size_t(chunks * 16), 0.0f);
      offsets.assign(size_t(chunks * 16), 0);
      x_hat.assign(size_t(cols), 0.0f);
      return backend.quantize_q8(x.data(), chunks, parts, {digits.data(), scales.data(), offsets.data(), x_hat.data()});
    };
    std::vector<int8_t> want_digits, digits;
    std::vector<float> want_scales, scales, want_hat, x_hat;
    std::vector<int32_t> want_offsets, offsets;
    ASSERT_TRUE(run(kernels::detail::scalar_backend(), want_digits, want_scales, want_offsets, want_hat));
    for (Isa isa : testable_isas()) {
      SCOPED_TRACE(std::string(kernels::isa_name(isa)) + " parts=" + std::to_string(parts));
      ASSERT_TRUE(run(kernels::detail::backend_for(isa), digits, scales, offsets, x_hat));
      EXPECT_EQ(digits, want_digits);
      EXPECT_EQ(0, std::memcmp(scales.data(), want_scales.data(), scales.size() * 4));
      EXPECT_EQ(offsets, want_offsets);
      EXPECT_EQ(0, std::memcmp(x_hat.data(), want_hat.data(), x_hat.size() * 4));
    }
  }
  // A NaN or an inf anywhere ends the quantization on every ISA.
  for (float bad : {NAN, INFINITY, -INFINITY}) {
    for (int64_t at : {int64_t(0), int64_t(77), cols - 1}) {
      std::vector<float> y = x;
      y[size_t(at)] = bad;
      for (Isa isa : testable_isas()) {
        std::vector<int8_t> digits(static_cast<size_t>(cols));
        std::vector<float> scales(static_cast<size_t>(chunks * 16)), x_hat(static_cast<size_t>(cols));
        std::vector<int32_t> offsets(static_cast<size_t>(chunks * 16));
        EXPECT_FALSE(kernels::detail::backend_for(isa).quantize_q8(y.data(), chunks, 1,
                                                                    {digits.data(), scales.data(), offsets.data(), x_hat.data()}))
            << kernels::isa_name(isa) << " value " << bad << " at " << at;
      }
    }
  }
}

// An inf or NaN in x reaches the outputs of the 4-bit decode in both precisions, as it does in
// f32 arithmetic (the integer paths fall back to the f32 kernels for such an x).
TEST(LinearPrecision, NonFiniteActivationsPropagate) {
  IsaGuard guard;
  PrecisionGuard restore(kernels::matmul_precision());
  std::mt19937 rng(37);
  for (FormatSpec spec : kExpertFormats) {
    TestMatrix matrix(spec, 9, 256, 1, rng);
    const WeightMatrix w = matrix.view(0);
    for (float bad : {NAN, INFINITY}) {
      std::vector<float> x = random_vector(256, rng);
      x[130] = bad;
      for (auto precision : {kernels::MatmulPrecision::Bf16Activations, kernels::MatmulPrecision::Exact}) {
        kernels::set_matmul_precision(precision);
        for (Isa isa : testable_isas()) {
          SCOPED_TRACE(spec.name() + " " + kernels::isa_name(isa) + " value " + std::to_string(bad));
          kernels::set_isa(isa);
          std::vector<float> got(9, 0.0f);
          kernels::matvec(w, x.data(), got.data());
          for (float v : got) EXPECT_FALSE(std::isfinite(v));
        }
      }
    }
  }
}

// AVX2's 4-bit decode (vpmaddubsw) takes the same int8 digits of x as the VNNI path (one in fast
// precision, three in exact) and its integer dots are exact too, so the two may differ only by
// f32 rounding in how lanes are summed: a wrong lane scale, nibble or digit shift anywhere shows
// far above that, even where it would hide inside the tolerance against the reference.
TEST(LinearPrecision, Avx2IntegerDecodeAgreesWithVnni) {
  if (!kernels::isa_supported(Isa::Avx512) || !kernels::detail::cpu_has_avx512_vnni())
    GTEST_SKIP() << "this CPU has no AVX512_VNNI";
  IsaGuard guard;
  PrecisionGuard restore(kernels::matmul_precision());
  std::mt19937 rng(17);
  std::vector<FormatSpec> specs = {{WeightFormat::NvFp4, 4, 16, DType::F8_E4M3}};
  for (int group : {8, 16, 32, 64, 128}) specs.push_back({WeightFormat::Affine, 4, group, DType::BF16});
  specs.push_back({WeightFormat::Affine, 4, 64, DType::F16});
  specs.push_back({WeightFormat::Affine, 4, 32, DType::F32});
  for (auto precision : {kernels::MatmulPrecision::Bf16Activations, kernels::MatmulPrecision::Exact}) {
    kernels::set_matmul_precision(precision);
    const bool fast = precision == kernels::MatmulPrecision::Bf16Activations;
    for (const FormatSpec& spec : specs) {
      for (int64_t cols : {128, 384, 2176}) {
        SCOPED_TRACE(spec.name() + " cols=" + std::to_string(cols) + (fast ? " fast" : " exact"));
        TestMatrix matrix(spec, 37, cols, 2, rng);
        const WeightMatrix w = matrix.view(1);
        std::vector<float> x = random_vector(cols, rng);
        std::vector<float> vnni(size_t(w.rows), NAN), avx2(size_t(w.rows), NAN);
        kernels::set_isa(Isa::Avx512);
        kernels::matvec(w, x.data(), vnni.data());
        kernels::set_isa(Isa::Avx2);
        kernels::matvec(w, x.data(), avx2.data());
        std::vector<double> vnni_wide(vnni.begin(), vnni.end());
        std::vector<float> zero(vnni.size(), 0.0f);
        const double output_rms = rms_error_over(zero, vnni_wide, 1.0);
        EXPECT_LT(rms_error_over(avx2, vnni_wide, output_rms), 1e-6);
      }
    }
  }
}

// The batched decode entry points against the reference, with products large enough to be
// split across threads and chunks, sharing x or not, in every format family.
TEST(LinearBatch, BatchesMatchReference) {
  IsaGuard guard;
  PrecisionGuard exact(kernels::MatmulPrecision::Exact);
  std::mt19937 rng(77);
  const FormatSpec specs[] = {{WeightFormat::BF16},
                              {WeightFormat::Affine, 4, 64, DType::BF16},
                              {WeightFormat::NvFp4, 4, 16, DType::F8_E4M3}};
  std::vector<TestMatrix> matrices;
  for (const FormatSpec& spec : specs) {
    matrices.emplace_back(spec, 301, 1024, 2, rng);
    matrices.emplace_back(spec, 64, 1024, 2, rng);
  }
  std::vector<float> x_shared = random_vector(1024, rng), x_other = random_vector(1024, rng);
  for (Isa isa : testable_isas()) {
    SCOPED_TRACE(kernels::isa_name(isa));
    kernels::set_isa(isa);
    std::vector<std::vector<float>> outputs(matrices.size());
    std::vector<WeightMatrix> views;
    std::vector<kernels::MatvecProduct> products;
    for (size_t i = 0; i < matrices.size(); ++i) views.push_back(matrices[i].view(0));
    for (size_t i = 0; i < matrices.size(); ++i) {
      outputs[i].assign(size_t(views[i].rows), NAN);
      products.push_back({&views[i], i % 3 == 2 ? x_other.data() : x_shared.data(), outputs[i].data()});
    }
    kernels::matvec_batch(products);
    for (size_t i = 0; i < matrices.size(); ++i)
      EXPECT_LT(relative_error(outputs[i], reference_matmul(views[i], products[i].x, 1)), kTolerance)
          << "product " << i;

    std::vector<WeightMatrix> gates, ups;
    for (TestMatrix& m : matrices) gates.push_back(m.view(0)), ups.push_back(m.view(1));
    std::vector<kernels::SwigluProduct> fronts;
    for (size_t i = 0; i < matrices.size(); ++i) {
      outputs[i].assign(size_t(gates[i].rows), NAN);
      fronts.push_back({&gates[i], &ups[i], i % 2 ? x_other.data() : x_shared.data(), outputs[i].data()});
    }
    // Gate and up in different formats on one x (affine 301 x 1024 and NVFP4 301 x 1024).
    outputs.emplace_back(size_t(gates[2].rows), NAN);
    fronts.push_back({&gates[2], &ups[4], x_shared.data(), outputs.back().data()});
    kernels::swiglu_matvec_batch(fronts);
    for (size_t i = 0; i < fronts.size(); ++i) {
      std::vector<double> g = reference_matmul(*fronts[i].gate, fronts[i].x, 1),
                          u = reference_matmul(*fronts[i].up, fronts[i].x, 1);
      std::vector<double> want(g.size());
      for (size_t r = 0; r < g.size(); ++r) want[r] = silu(g[r]) * u[r];
      EXPECT_LT(relative_error(outputs[i], want), 5 * kTolerance) << "swiglu product " << i;
    }
  }
  const WeightMatrix first = matrices[0].view(0);
  kernels::MatvecProduct null_input{&first, nullptr, nullptr};
  EXPECT_THROW(kernels::matvec_batch(std::span<const kernels::MatvecProduct>(&null_input, 1)), Error);
}

// The stream prefetch hint (NTA on AMD, T0 elsewhere) is a cache hint only: every decode kernel
// gives the same bits under both, and both match the reference.
TEST(LinearPrefetch, HintsGiveIdenticalResults) {
  IsaGuard guard;
  const kernels::StreamPrefetch initial = kernels::active_stream_prefetch();
  EXPECT_EQ(kernels::parse_stream_prefetch("nta"), kernels::StreamPrefetch::NonTemporal);
  EXPECT_EQ(kernels::parse_stream_prefetch("t0"), kernels::StreamPrefetch::T0);
  EXPECT_FALSE(kernels::parse_stream_prefetch("t1").has_value());
  std::mt19937 rng(909);
  const FormatSpec specs[] = {{WeightFormat::F32},
                              {WeightFormat::BF16},
                              {WeightFormat::Affine, 4, 64, DType::BF16},
                              {WeightFormat::NvFp4, 4, 16, DType::F8_E4M3}};
  for (const FormatSpec& spec : specs) {
    // 257 rows of 4096 columns: the last rows prefetch past the matrix's end.
    TestMatrix matrix(spec, 257, 4096, 1, rng);
    const WeightMatrix w = matrix.view(0);
    std::vector<float> x = random_vector(4 * 4096, rng);
    const std::vector<double> want = reference_matmul(w, x.data(), 4);
    for (kernels::MatmulPrecision precision : {kernels::MatmulPrecision::Exact, kernels::MatmulPrecision::Bf16Activations}) {
      PrecisionGuard guard_precision(precision);
      for (Isa isa : testable_isas()) {
        SCOPED_TRACE(spec.name() + " " + kernels::isa_name(isa) +
                     (precision == kernels::MatmulPrecision::Bf16Activations ? " fast" : " exact"));
        kernels::set_isa(isa);
        std::vector<float> by_hint[2];
        for (kernels::StreamPrefetch hint : {kernels::StreamPrefetch::NonTemporal, kernels::StreamPrefetch::T0}) {
          kernels::set_stream_prefetch(hint);
          std::vector<float>& got = by_hint[hint == kernels::StreamPrefetch::T0];
          got.assign(size_t(4 * w.rows), NAN);
          kernels::matvec(w, x.data(), got.data());
          kernels::matmul(w, x.data() + 4096, 3, got.data() + w.rows);
        }
        EXPECT_EQ(0, std::memcmp(by_hint[0].data(), by_hint[1].data(), by_hint[0].size() * sizeof(float)));
        EXPECT_LT(relative_error(by_hint[1], want), precision == kernels::MatmulPrecision::Exact ? kTolerance : kVnniTolerance);
      }
    }
  }
  kernels::set_stream_prefetch(initial);
}

TEST(LinearErrors, RejectsInconsistentShapes) {
  std::mt19937 rng(1);
  TestMatrix matrix({WeightFormat::Affine, 4, 64, DType::BF16}, 4, 128, 1, rng);
  WeightMatrix w = matrix.view(0);
  std::vector<float> x(256), y(8);
  w.cols = 96;  // not a multiple of the group size
  EXPECT_THROW(kernels::matvec(w, x.data(), y.data()), Error);
  w = matrix.view(0);
  w.bits = 3;
  EXPECT_THROW(kernels::matmul(w, x.data(), 2, y.data()), Error);
  WeightMatrix other = matrix.view(0);
  other.rows = 3;
  EXPECT_THROW(kernels::swiglu_matvec(matrix.view(0), other, x.data(), y.data()), Error);
}

}  // namespace
}  // namespace inkling::test
