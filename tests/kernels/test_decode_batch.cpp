// Decode batches (matmul / swiglu_matmul with 2 <= n <= kDecodeBatchMaxTokens): row t of the result
// must be bit for bit what matvec / swiglu_matvec give for token t alone, on every ISA path and in
// both precisions, so a sequence in a batched server step computes exactly what it would alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernel_test_util.h"
#include "kernels/isa.h"
#include "kernels/linear.h"
#include "tensor/error.h"

namespace inkling::test {
namespace {

using kernels::Isa;
using kernels::MatmulPrecision;

constexpr int64_t kMaxTokens = kernels::kDecodeBatchMaxTokens;
const int64_t kTokenCounts[] = {1, 2, 3, 4, 5, 8, 13, 16, kMaxTokens};

std::vector<FormatSpec> batch_formats() {
  return {{WeightFormat::F32},
          {WeightFormat::BF16},
          {WeightFormat::F16},
          {WeightFormat::Affine, 4, 64, DType::BF16},
          {WeightFormat::Affine, 4, 32, DType::BF16},
          {WeightFormat::Affine, 4, 128, DType::F16},
          {WeightFormat::Affine, 4, 64, DType::F32},
          {WeightFormat::Affine, 4, 16, DType::BF16},
          {WeightFormat::Affine, 8, 64, DType::BF16},
          {WeightFormat::NvFp4, 4, 16, DType::F8_E4M3}};
}

// Multiples of 128 take the integer 4-bit decode (AVX2 / VNNI), the others the f32 one.
std::vector<int64_t> batch_cols(const FormatSpec& spec) {
  switch (spec.format) {
    case WeightFormat::Affine: return spec.group_size == 128 ? std::vector<int64_t>{128, 384, 2048}
                                                             : std::vector<int64_t>{192, 256, 1088, 2048};
    case WeightFormat::NvFp4: return {192, 256, 1104, 2048};  // 1104: a 16-column tail
    default: return {67, 100, 256, 1088};
  }
}

std::string precision_name(MatmulPrecision precision) {
  return precision == MatmulPrecision::Exact ? "exact" : "fast";
}

// Tokens of different sequences differ in scale as well as in direction.
std::vector<float> token_rows(int64_t n, int64_t cols, std::mt19937& rng) {
  std::vector<float> x = random_vector(n * cols, rng);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < cols; ++c) x[size_t(t * cols + c)] *= 0.25f + 0.5f * float(t % 5);
  return x;
}

// The first output whose bits differ, if any (floats compared as bits: NaN too, -0 against +0).
void expect_same_bits(const float* got, const float* want, int64_t count, const std::string& what) {
  for (int64_t i = 0; i < count; ++i) {
    uint32_t a, b;
    std::memcpy(&a, got + i, 4);
    std::memcpy(&b, want + i, 4);
    if (a != b) {
      ADD_FAILURE() << what << ": output " << i << " is " << got[i] << " (0x" << std::hex << a
                    << "), alone " << want[i] << " (0x" << b << ")" << std::dec;
      return;
    }
  }
}

// Each token's matvec, then matmul of the first n tokens for every n, compared row by row.
void check_matmul_against_matvec(const WeightMatrix& w, const std::vector<float>& x, const std::string& what) {
  const int64_t rows = w.rows, cols = w.cols;
  std::vector<float> alone(size_t(kMaxTokens * rows), NAN);
  for (int64_t t = 0; t < kMaxTokens; ++t)
    kernels::matvec(w, x.data() + t * cols, alone.data() + t * rows);
  for (int64_t n : kTokenCounts) {
    std::vector<float> batch(size_t(n * rows), NAN);
    kernels::matmul(w, x.data(), n, batch.data());
    for (int64_t t = 0; t < n; ++t)
      expect_same_bits(batch.data() + t * rows, alone.data() + t * rows, rows,
                       what + " n=" + std::to_string(n) + " token " + std::to_string(t));
  }
}

class DecodeBatchTest : public ::testing::TestWithParam<FormatSpec> {};

TEST_P(DecodeBatchTest, MatmulRowsAreMatvecBitwise) {
  IsaGuard guard;
  PrecisionGuard restore(kernels::matmul_precision());
  std::mt19937 rng(2024);
  for (int64_t rows : {5, 130}) {
    for (int64_t cols : batch_cols(GetParam())) {
      // Stack of two: view(1) is the odd rows, a strided matrix like `up` in w13.
      TestMatrix matrix(GetParam(), rows, cols, 2, rng);
      const WeightMatrix w = matrix.view(1);
      const std::vector<float> x = token_rows(kMaxTokens, cols, rng);
      for (MatmulPrecision precision : {MatmulPrecision::Exact, MatmulPrecision::Bf16Activations}) {
        kernels::set_matmul_precision(precision);
        for (Isa isa : testable_isas()) {
          kernels::set_isa(isa);
          check_matmul_against_matvec(w, x,
                                      std::string(kernels::isa_name(isa)) + " " + precision_name(precision) +
                                          " rows=" + std::to_string(rows) + " cols=" + std::to_string(cols));
        }
      }
    }
  }
}

// swiglu_matmul against swiglu_matvec per token: gate and up as the interleaved rows of one w13
// tensor (read as one matrix) and as two separate matrices.
TEST_P(DecodeBatchTest, SwigluRowsAreSwigluMatvecBitwise) {
  IsaGuard guard;
  PrecisionGuard restore(kernels::matmul_precision());
  std::mt19937 rng(2025);
  for (int64_t rows : {7, 130}) {
    const int64_t cols = batch_cols(GetParam()).back();
    TestMatrix w13(GetParam(), rows, cols, 2, rng);
    TestMatrix gate_alone(GetParam(), rows, cols, 1, rng), up_alone(GetParam(), rows, cols, 1, rng);
    const std::vector<float> x = token_rows(kMaxTokens, cols, rng);
    for (bool fused : {true, false}) {
      const WeightMatrix gate = fused ? w13.view(0) : gate_alone.view(0);
      const WeightMatrix up = fused ? w13.view(1) : up_alone.view(0);
      for (MatmulPrecision precision : {MatmulPrecision::Exact, MatmulPrecision::Bf16Activations}) {
        kernels::set_matmul_precision(precision);
        for (Isa isa : testable_isas()) {
          kernels::set_isa(isa);
          const std::string what = std::string(kernels::isa_name(isa)) + " " + precision_name(precision) +
                                   (fused ? " w13" : " separate") + " rows=" + std::to_string(rows);
          std::vector<float> alone(size_t(kMaxTokens * rows), NAN);
          for (int64_t t = 0; t < kMaxTokens; ++t)
            kernels::swiglu_matvec(gate, up, x.data() + t * cols, alone.data() + t * rows);
          for (int64_t n : kTokenCounts) {
            std::vector<float> batch(size_t(n * rows), NAN);
            kernels::swiglu_matmul(gate, up, x.data(), n, batch.data());
            for (int64_t t = 0; t < n; ++t)
              expect_same_bits(batch.data() + t * rows, alone.data() + t * rows, rows,
                               what + " n=" + std::to_string(n) + " token " + std::to_string(t));
          }
        }
      }
    }
  }
}

// Batch invariance: products of more tokens than a decode batch (prefill) give every row its
// matvec's bits too, matmul and swiglu_matmul, fused w13 or not.
TEST_P(DecodeBatchTest, BatchInvariantPrefillRowsAreMatvecBitwise) {
  IsaGuard guard;
  PrecisionGuard restore(kernels::matmul_precision());
  struct InvariantGuard {
    ~InvariantGuard() { kernels::set_batch_invariant(false); }
  } invariant_off;
  kernels::set_batch_invariant(true);
  std::mt19937 rng(2026);
  constexpr int64_t kTokens = 2 * kMaxTokens + 5, rows = 70;
  const int64_t cols = batch_cols(GetParam()).front();
  TestMatrix w13(GetParam(), rows, cols, 2, rng);
  const std::vector<float> x = token_rows(kTokens, cols, rng);
  for (MatmulPrecision precision : {MatmulPrecision::Exact, MatmulPrecision::Bf16Activations}) {
    kernels::set_matmul_precision(precision);
    for (Isa isa : testable_isas()) {
      kernels::set_isa(isa);
      const std::string what = std::string(kernels::isa_name(isa)) + " " + precision_name(precision);
      const WeightMatrix gate = w13.view(0), up = w13.view(1);
      std::vector<float> alone(size_t(kTokens * rows)), swiglu_alone(alone.size());
      for (int64_t t = 0; t < kTokens; ++t) {
        kernels::matvec(up, x.data() + t * cols, alone.data() + t * rows);
        kernels::swiglu_matvec(gate, up, x.data() + t * cols, swiglu_alone.data() + t * rows);
      }
      for (int64_t n : {kMaxTokens + 1, kTokens}) {
        std::vector<float> batch(size_t(n * rows), NAN), swiglu_batch(batch.size(), NAN);
        kernels::matmul(up, x.data(), n, batch.data());
        kernels::swiglu_matmul(gate, up, x.data(), n, swiglu_batch.data());
        expect_same_bits(batch.data(), alone.data(), n * rows, what + " matmul n=" + std::to_string(n));
        expect_same_bits(swiglu_batch.data(), swiglu_alone.data(), n * rows,
                         what + " swiglu_matmul n=" + std::to_string(n));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, DecodeBatchTest, ::testing::ValuesIn(batch_formats()),
                         [](const auto& info) { return info.param.name(); });

// Matrices large enough that both the matvecs and the batch fork onto every thread and cut their
// rows into many chunks, on the decode shapes of the models.
TEST(DecodeBatch, LargeMatricesSplitAcrossThreads) {
  IsaGuard guard;
  PrecisionGuard restore(kernels::matmul_precision());
  std::mt19937 rng(2026);
  const FormatSpec specs[] = {{WeightFormat::BF16},
                              {WeightFormat::Affine, 4, 64, DType::BF16},
                              {WeightFormat::NvFp4, 4, 16, DType::F8_E4M3}};
  for (const FormatSpec& spec : specs) {
    TestMatrix matrix(spec, 1027, 2048, 1, rng);
    const WeightMatrix w = matrix.view(0);
    const std::vector<float> x = token_rows(kMaxTokens, 2048, rng);
    for (MatmulPrecision precision : {MatmulPrecision::Exact, MatmulPrecision::Bf16Activations}) {
      kernels::set_matmul_precision(precision);
      for (Isa isa : testable_isas()) {
        kernels::set_isa(isa);
        check_matmul_against_matvec(w, x, spec.name() + " " + kernels::isa_name(isa) + " " + precision_name(precision));
      }
    }
  }
}

// bf16 weights in fast precision on CPUs with AMX: the tile path (every bf16 matvec and decode
// batch with columns a multiple of 32) and the vdpbf16ps one are each batch invariant, across
// thread splits, tail rows (1027 = 64 pairs of tiles + 3), strided rows and token counts past one
// and two tile groups; they agree to f32 summation order, and both with the f64 reference.
TEST(DecodeBatch, AmxAndVdpbf16AreEachBatchInvariantAndAgree) {
  if (!kernels::amx_supported()) GTEST_SKIP() << "no AMX-BF16 on this CPU (or Linux withholds the tile state)";
  IsaGuard guard;
  PrecisionGuard restore(MatmulPrecision::Bf16Activations);
  struct AmxGuard {
    bool saved = kernels::amx_active();
    ~AmxGuard() { kernels::set_amx(saved); }
  } amx_guard;
  kernels::set_isa(Isa::Avx512);
  std::mt19937 rng(2031);
  struct Shape {
    int64_t rows, cols;
    int stack;
  };
  for (const Shape& shape : {Shape{1027, 2048, 1}, Shape{45, 256, 2}, Shape{16, 96, 1}, Shape{17, 4096, 1}}) {
    TestMatrix matrix({WeightFormat::BF16}, shape.rows, shape.cols, shape.stack, rng);
    const WeightMatrix w = matrix.view(shape.stack - 1);
    const std::vector<float> x = token_rows(kMaxTokens, shape.cols, rng);
    const std::vector<double> want = reference_matmul(w, x.data(), kMaxTokens);
    std::vector<float> by_path[2];
    for (bool amx : {true, false}) {
      kernels::set_amx(amx);
      ASSERT_EQ(kernels::amx_active(), amx);
      const std::string what = std::string(amx ? "amx" : "vdpbf16ps") + " rows=" + std::to_string(shape.rows) +
                               " cols=" + std::to_string(shape.cols);
      check_matmul_against_matvec(w, x, what);
      std::vector<float>& got = by_path[amx];
      got.assign(size_t(kMaxTokens * w.rows), NAN);
      kernels::matmul(w, x.data(), kMaxTokens, got.data());
      // x rounded to bf16 on both paths: the reference's error is bf16's, the same for both.
      EXPECT_LT(relative_error(got, want), 2.5e-2) << what;
    }
    double worst = 0.0, scale = 0.0;
    for (size_t i = 0; i < by_path[0].size(); ++i) {
      worst = std::max(worst, double(std::fabs(by_path[0][i] - by_path[1][i])));
      scale = std::max(scale, std::fabs(want[i]));
    }
    // The same bf16 products summed in another order: a few f32 roundings of the largest output.
    EXPECT_LT(worst, 1e-5 * scale) << "rows=" << shape.rows << " cols=" << shape.cols;
    EXPECT_GT(worst, 0.0) << "the two paths gave identical bits: is AMX really taken?";
  }
}

// A token whose x has an inf or NaN takes the f32 kernels while the others of its batch keep the
// integer decode: each must still get its own matvec's result.
TEST(DecodeBatch, NonFiniteTokenAmongFiniteOnes) {
  IsaGuard guard;
  PrecisionGuard restore(kernels::matmul_precision());
  std::mt19937 rng(2027);
  const FormatSpec specs[] = {{WeightFormat::Affine, 4, 64, DType::BF16}, {WeightFormat::NvFp4, 4, 16, DType::F8_E4M3}};
  for (const FormatSpec& spec : specs) {
    TestMatrix matrix(spec, 37, 256, 1, rng);
    const WeightMatrix w = matrix.view(0);
    std::vector<float> x = token_rows(kMaxTokens, 256, rng);
    x[size_t(1 * 256 + 100)] = NAN;
    x[size_t(6 * 256 + 3)] = INFINITY;
    for (MatmulPrecision precision : {MatmulPrecision::Exact, MatmulPrecision::Bf16Activations}) {
      kernels::set_matmul_precision(precision);
      for (Isa isa : testable_isas()) {
        kernels::set_isa(isa);
        check_matmul_against_matvec(w, x, spec.name() + " " + kernels::isa_name(isa) + " " + precision_name(precision));
      }
    }
  }
}

// The same buffer of tokens rewritten in place between batches (as the model's activations are):
// no token may reuse what was derived from its old values. The batch runs first, so the caches
// it meets are the previous round's.
TEST(DecodeBatch, TokensRewrittenInPlace) {
  IsaGuard guard;
  PrecisionGuard restore(kernels::matmul_precision());
  std::mt19937 rng(2028);
  // bf16: the AMX path keeps its packing of a batch's tokens between calls on the same x buffers.
  for (const FormatSpec& spec : {FormatSpec{WeightFormat::Affine, 4, 64, DType::BF16}, FormatSpec{WeightFormat::BF16}}) {
    TestMatrix matrix(spec, 41, 512, 1, rng);
    const WeightMatrix w = matrix.view(0);
    std::vector<float> x = token_rows(kMaxTokens, 512, rng);
    for (MatmulPrecision precision : {MatmulPrecision::Exact, MatmulPrecision::Bf16Activations}) {
      kernels::set_matmul_precision(precision);
      for (Isa isa : testable_isas()) {
        kernels::set_isa(isa);
        for (int round = 0; round < 3; ++round) {
          std::vector<float> batch(size_t(kMaxTokens * w.rows), NAN), alone(size_t(w.rows), NAN);
          kernels::matmul(w, x.data(), kMaxTokens, batch.data());
          for (int64_t t = 0; t < kMaxTokens; ++t) {
            kernels::matvec(w, x.data() + t * w.cols, alone.data());
            expect_same_bits(batch.data() + t * w.rows, alone.data(), w.rows,
                             spec.name() + " " + kernels::isa_name(isa) + " " + precision_name(precision) +
                                 " round " + std::to_string(round) + " token " + std::to_string(t));
          }
          for (float& v : x) v = v * -0.5f + 0.125f;
        }
      }
    }
  }
}

// matmul_mixed / swiglu_matmul_mixed: the decode rows of a step give their matvecs, the prompt
// rows the prefill kernels' bits whatever shares the call, for every way of splitting a step
// (prompt chunks longer than a decode batch or not, more decode rows than one batch holds).
TEST(DecodeBatch, MixedStepsSplitDecodeAndPromptRows) {
  IsaGuard guard;
  PrecisionGuard restore(kernels::matmul_precision());
  std::mt19937 rng(2029);
  const FormatSpec specs[] = {{WeightFormat::BF16},
                              {WeightFormat::Affine, 4, 64, DType::BF16},
                              {WeightFormat::NvFp4, 4, 16, DType::F8_E4M3}};
  const struct {
    int64_t n, decode_rows;
  } steps[] = {{1, 1}, {3, 1}, {3, 0}, {40, 5}, {40, 35}, {70, 70}, {50, 0}, {kMaxTokens + 1, kMaxTokens}};
  for (const FormatSpec& spec : specs) {
    TestMatrix w13(spec, 33, 256, 2, rng);
    const WeightMatrix gate = w13.view(0), up = w13.view(1);
    const std::vector<float> x = token_rows(70, 256, rng);
    for (MatmulPrecision precision : {MatmulPrecision::Exact, MatmulPrecision::Bf16Activations}) {
      kernels::set_matmul_precision(precision);
      for (Isa isa : testable_isas()) {
        kernels::set_isa(isa);
        for (const auto& step : steps) {
          const std::string what = spec.name() + " " + kernels::isa_name(isa) + " " + precision_name(precision) +
                                   " n=" + std::to_string(step.n) + " decode=" + std::to_string(step.decode_rows);
          const int64_t rows = gate.rows, d = step.decode_rows, prompt = step.n - d;
          std::vector<float> mixed(size_t(step.n * rows), NAN), swiglu(mixed.size(), NAN);
          kernels::matmul_mixed(up, x.data(), step.n, d, mixed.data());
          kernels::swiglu_matmul_mixed(gate, up, x.data(), step.n, d, swiglu.data());
          std::vector<float> alone(size_t(rows), NAN);
          for (int64_t t = 0; t < d; ++t) {
            kernels::matvec(up, x.data() + t * 256, alone.data());
            expect_same_bits(mixed.data() + t * rows, alone.data(), rows, what + " matvec row " + std::to_string(t));
            kernels::swiglu_matvec(gate, up, x.data() + t * 256, alone.data());
            expect_same_bits(swiglu.data() + t * rows, alone.data(), rows, what + " swiglu row " + std::to_string(t));
          }
          if (prompt == 0) continue;
          // Prompt rows take the prefill kernels however few they are, and each gets the bits it
          // gets in any other company: alone, or the chunk without the decode rows.
          std::vector<float> chunk(size_t(prompt * rows), NAN);
          kernels::matmul_mixed(up, x.data() + d * 256, prompt, 0, chunk.data());
          expect_same_bits(mixed.data() + d * rows, chunk.data(), prompt * rows, what + " prompt rows");
          kernels::swiglu_matmul_mixed(gate, up, x.data() + d * 256, prompt, 0, chunk.data());
          expect_same_bits(swiglu.data() + d * rows, chunk.data(), prompt * rows, what + " swiglu prompt rows");
          const int64_t last = step.n - 1;
          kernels::matmul_mixed(up, x.data() + last * 256, 1, 0, alone.data());
          expect_same_bits(mixed.data() + last * rows, alone.data(), rows, what + " last prompt row alone");
          kernels::swiglu_matmul_mixed(gate, up, x.data() + last * 256, 1, 0, alone.data());
          expect_same_bits(swiglu.data() + last * rows, alone.data(), rows, what + " swiglu last prompt row alone");
          if (prompt > kMaxTokens) {  // the chunk as plain matmul computes it (tiled at this size)
            kernels::matmul(up, x.data() + d * 256, prompt, chunk.data());
            expect_same_bits(mixed.data() + d * rows, chunk.data(), prompt * rows, what + " matmul prompt rows");
          }
        }
      }
    }
  }
  TestMatrix matrix(specs[1], 4, 256, 1, rng);
  std::vector<float> x(2 * 256), y(2 * 4);
  EXPECT_THROW(kernels::matmul_mixed(matrix.view(0), x.data(), 1, 2, y.data()), Error);
  EXPECT_THROW(kernels::swiglu_matmul_mixed(matrix.view(0), matrix.view(0), x.data(), 2, -1, y.data()), Error);
}

}  // namespace
}  // namespace inkling::test
