// Products with ggml block-type weights (WeightFormat::Ggml): every dequantizable type through
// matvec, matvec_batch, the decode-batch and tiled matmul, and swiglu, against dot products in
// double of the dequantized rows, on the path the machine picks (the AVX2 decode kernels for the
// types that have one, the scalar reference for the others); and each AVX2 decode kernel alone
// against the scalar reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <iterator>
#include <random>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/backend.h"
#include "kernels/isa.h"
#include "kernels/linear.h"
#include "tensor/dtype.h"
#include "tensor/error.h"
#include "tensor/ggml_types.h"
#include "tensor/weight_matrix.h"

namespace inkling {
namespace {

// Byte offsets of each type's f16 scales within a block (IQ1_M packs its own; handled below).
std::vector<int> f16_scale_offsets(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_1:
    case GgmlType::Q5_1:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: return {0, 2};
    case GgmlType::Q2_K: return {80, 82};
    case GgmlType::Q3_K: return {108};
    case GgmlType::Q6_K: return {208};
    case GgmlType::IQ1_M:
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16: return {};
    default: return {0};
  }
}

// Random blocks whose scales are finite and modest (an f16 in [2^-8, 2^-4)), so products stay
// finite and the comparison meaningful.
std::vector<uint8_t> random_rows(GgmlType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  const GgmlTypeInfo& info = ggml_type_info(type);
  const uint64_t row_bytes = ggml_row_bytes(type, cols).value();
  std::vector<uint8_t> bytes(size_t(row_bytes * uint64_t(rows)));
  std::uniform_int_distribution<int> byte(0, 255);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  if (type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16) {
    for (int64_t i = 0; i < rows * cols; ++i) {
      const float v = normal(rng);
      if (type == GgmlType::F32) std::memcpy(&bytes[size_t(4 * i)], &v, 4);
      const uint16_t half = type == GgmlType::F16 ? f32_to_f16(v) : f32_to_bf16(v);
      if (type != GgmlType::F32) std::memcpy(&bytes[size_t(2 * i)], &half, 2);
    }
    return bytes;
  }
  for (uint8_t& b : bytes) b = uint8_t(byte(rng));
  std::uniform_real_distribution<float> scale(0x1p-8f, 0x1p-4f);
  const int64_t blocks = int64_t(bytes.size()) / info.block_bytes;
  for (int64_t k = 0; k < blocks; ++k) {
    uint8_t* block = bytes.data() + k * info.block_bytes;
    for (int offset : f16_scale_offsets(type)) {
      const uint16_t half = f32_to_f16(scale(rng));
      std::memcpy(block + offset, &half, 2);
    }
    if (type == GgmlType::IQ1_M) {
      // The f16 scale is the top nibbles of the four words at bytes 48-55.
      const uint16_t half = f32_to_f16(scale(rng));
      for (int w = 0; w < 4; ++w) {
        uint16_t word;
        std::memcpy(&word, block + 48 + 2 * w, 2);
        word = uint16_t((word & 0x0fff) | (((half >> (4 * w)) & 15) << 12));
        std::memcpy(block + 48 + 2 * w, &word, 2);
      }
    }
  }
  return bytes;
}

WeightMatrix ggml_matrix(GgmlType type, const std::vector<uint8_t>& bytes, int64_t rows, int64_t cols) {
  WeightMatrix m;
  m.format = WeightFormat::Ggml;
  m.ggml_type = type;
  m.rows = rows;
  m.cols = cols;
  m.data = bytes.data();
  m.row_stride = int64_t(ggml_row_bytes(type, cols).value());
  return m;
}

std::vector<double> reference_product(const WeightMatrix& m, const float* x, int64_t n) {
  std::vector<double> out(size_t(n * m.rows));
  std::vector<float> row(size_t(m.cols));
  for (int64_t r = 0; r < m.rows; ++r) {
    dequantize_row(m, r, row.data());
    for (int64_t t = 0; t < n; ++t) {
      double sum = 0;
      for (int64_t c = 0; c < m.cols; ++c) sum += double(row[size_t(c)]) * x[t * m.cols + c];
      out[size_t(t * m.rows + r)] = sum;
    }
  }
  return out;
}

class GgmlLinear : public ::testing::TestWithParam<GgmlType> {};

std::vector<GgmlType> dequantizable_types() {
  std::vector<GgmlType> out;
  for (uint32_t code = 0; code < 64; ++code)
    if (auto type = ggml_type_from_code(code); type && ggml_type_info(*type).dequantizable) out.push_back(*type);
  return out;
}

TEST(GgmlTypes, EveryTypeTheIssueListsIsDequantizable) {
  EXPECT_EQ(dequantizable_types().size(), 22u);
  for (const char* name : {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
                           "Q6_K", "IQ4_NL", "IQ4_XS", "IQ3_XXS", "IQ3_S", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ1_S", "IQ1_M"}) {
    bool found = false;
    for (GgmlType type : dequantizable_types()) found |= ggml_type_name(type) == name;
    EXPECT_TRUE(found) << name;
  }
}

// Exact precision: f32 activations on every path (the fast integer decode is tested below
// against the same reference on its quantized x).
TEST_P(GgmlLinear, ProductsMatchTheDequantizedReference) {
  const GgmlType type = GetParam();
  const test::PrecisionGuard exact(kernels::MatmulPrecision::Exact);
  std::mt19937 rng(uint32_t(type) + 1);
  const int64_t rows = 37, cols = 512;  // odd rows: thread ranges and tiles end mid-block
  const std::vector<uint8_t> bytes = random_rows(type, rows, cols, rng);
  const WeightMatrix w = ggml_matrix(type, bytes, rows, cols);
  EXPECT_EQ(w.bytes_read(), int64_t(bytes.size()));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t n : {1, 3, 40}) {  // matvec, a decode batch, the tiled prefill path
    std::vector<float> x(static_cast<size_t>(n * cols));
    for (float& v : x) v = normal(rng);
    std::vector<float> y(static_cast<size_t>(n * rows));
    kernels::matmul(w, x.data(), n, y.data());
    const std::vector<double> want = reference_product(w, x.data(), n);
    double scale = 0;
    for (double v : want) scale = std::max(scale, std::fabs(v));
    for (size_t i = 0; i < y.size(); ++i)
      ASSERT_NEAR(y[i], want[i], 1e-5 * scale + 1e-30) << ggml_type_name(type) << " n=" << n << " at " << i;
  }
}

TEST_P(GgmlLinear, SwigluAndBatchesMatchTheirParts) {
  const GgmlType type = GetParam();
  std::mt19937 rng(uint32_t(type) + 100);
  const int64_t rows = 19, cols = 256;
  const std::vector<uint8_t> gate_bytes = random_rows(type, rows, cols, rng), up_bytes = random_rows(type, rows, cols, rng);
  const WeightMatrix gate = ggml_matrix(type, gate_bytes, rows, cols), up = ggml_matrix(type, up_bytes, rows, cols);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(cols));
  for (float& v : x) v = normal(rng);
  std::vector<float> g(static_cast<size_t>(rows)), u(static_cast<size_t>(rows)), fused(static_cast<size_t>(rows));
  kernels::matvec(gate, x.data(), g.data());
  kernels::matvec(up, x.data(), u.data());
  kernels::swiglu_matvec(gate, up, x.data(), fused.data());
  for (int64_t r = 0; r < rows; ++r) {
    const float silu = g[size_t(r)] / (1.0f + std::exp(-g[size_t(r)]));
    EXPECT_NEAR(fused[size_t(r)], silu * u[size_t(r)], 1e-5f * (std::fabs(silu * u[size_t(r)]) + 1e-3f)) << r;
  }
  // A batch mixing a ggml matrix with an f32 one gives each its own matvec's values.
  std::vector<float> dense(static_cast<size_t>(rows * cols));
  for (float& v : dense) v = normal(rng);
  WeightMatrix f32;
  f32.rows = rows;
  f32.cols = cols;
  f32.data = reinterpret_cast<const uint8_t*>(dense.data());
  f32.row_stride = cols * 4;
  std::vector<float> alone(static_cast<size_t>(rows)), in_batch_gate(static_cast<size_t>(rows)), in_batch_f32(static_cast<size_t>(rows));
  kernels::matvec(f32, x.data(), alone.data());
  const kernels::MatvecProduct products[] = {{&gate, x.data(), in_batch_gate.data()}, {&f32, x.data(), in_batch_f32.data()}};
  kernels::matvec_batch(products);
  EXPECT_EQ(in_batch_gate, g);
  for (int64_t r = 0; r < rows; ++r) EXPECT_NEAR(in_batch_f32[size_t(r)], alone[size_t(r)], 1e-4f) << r;
}

INSTANTIATE_TEST_SUITE_P(Types, GgmlLinear, ::testing::ValuesIn(dequantizable_types()),
                         [](const ::testing::TestParamInfo<GgmlType>& info) {
                           return std::string(ggml_type_name(info.param));
                         });

// The AVX2 decode kernels regroup the reference's sum (a sub-block's scale times its codes' dot,
// not each weight times x; 8 lanes, FMAs), so they agree with the double-precision dot of the
// reference's dequantized row to within float reassociation: at most 64 f32 epsilons of
// sum |w_i x_i| (the errors measured here are ~1 epsilon; a wrong code, scale or element order
// is off by a sizeable fraction of the sum).
constexpr double kReassociationTolerance = 64 * double(FLT_EPSILON);

TEST(GgmlAvx2Dot, EachKernelMatchesTheScalarReference) {
  if (!kernels::isa_supported(kernels::Isa::Avx2)) GTEST_SKIP() << "no AVX2 on this CPU";
  for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_XS}) {
    const kernels::detail::GgmlRowDot dot = kernels::detail::ggml_row_dot_avx2(type);
    ASSERT_NE(dot, nullptr) << ggml_type_name(type) << " should have an AVX2 decode kernel";
    const int64_t block = ggml_type_info(type).block_elements;
    std::mt19937 rng(uint32_t(type) + 7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int64_t blocks : {1, 3, 5, 9}) {  // odd column counts, each a whole number of blocks
      const int64_t cols = blocks * block;
      for (int64_t rows : {1, 4, 7}) {
        const std::vector<uint8_t> bytes = random_rows(type, rows, cols, rng);
        const WeightMatrix w = ggml_matrix(type, bytes, rows, cols);
        std::vector<float> x(static_cast<size_t>(cols)), row(static_cast<size_t>(cols));
        for (float& v : x) v = normal(rng);
        for (int64_t r = 0; r < rows; ++r) {
          dequantize_row(w, r, row.data());
          double want = 0, magnitude = 0;
          for (int64_t c = 0; c < cols; ++c) {
            want += double(row[size_t(c)]) * x[size_t(c)];
            magnitude += std::fabs(double(row[size_t(c)]) * x[size_t(c)]);
          }
          const float got = dot(w.data + r * w.row_stride, x.data(), blocks);
          ASSERT_NEAR(got, want, kReassociationTolerance * magnitude)
              << ggml_type_name(type) << ": " << rows << " rows of " << cols << " columns, row " << r;
        }
      }
    }
  }
}

// x quantized for the integer decode: per 32 columns, scale = max|x| / 127 and x_g8 = x / scale
// rounded to nearest (so |x - scale x_g8| <= scale / 2 and the largest |x_g8| is 127), sums of
// scale * x_g8 per 16 and 32 columns; all-zero and tiny blocks quantize to zeros, an inf or NaN
// anywhere is refused.
struct Q8X {
  std::vector<int8_t> digits;
  std::vector<float> scales, sums16, sums32;
  // The 512-bit Q4_K / IQ4_XS kernels' layout (backend.h, PreparedX::x_g8_eighths).
  std::vector<int8_t> eighths;
  std::vector<float> eighths_scale, eighths_scale_high16, eighths_sum32;
  std::vector<int32_t> eighths_offsets;
  explicit Q8X(int64_t cols)
      : digits(size_t(cols)),
        scales(size_t(cols / 32)),
        sums16(size_t(cols / 16)),
        sums32(size_t(cols / 32)),
        eighths(size_t(cols / 256 * 256)),
        eighths_scale(size_t(cols / 256 * 16)),
        eighths_scale_high16(size_t(cols / 256 * 16)),
        eighths_sum32(size_t(cols / 256 * 16)),
        eighths_offsets(size_t(cols / 256 * 16)) {}
  kernels::detail::GgmlQ8Buffers buffers() {
    return {digits.data(),         scales.data(),          sums16.data(),
            sums32.data(),         eighths.data(),         eighths_scale.data(),
            eighths_scale_high16.data(), eighths_sum32.data(), eighths_offsets.data()};
  }
  kernels::detail::PreparedX prepared(const float* x) const {
    kernels::detail::PreparedX px;
    px.x = x;
    px.x_g8 = digits.data();
    px.x_g8_scale = scales.data();
    px.x_g8_sum16 = sums16.data();
    px.x_g8_sum32 = sums32.data();
    px.x_g8_eighths = eighths.data();
    px.x_g8_eighths_scale = eighths_scale.data();
    px.x_g8_eighths_scale_high16 = eighths_scale_high16.data();
    px.x_g8_eighths_sum32 = eighths_sum32.data();
    px.x_g8_eighths_offsets = eighths_offsets.data();
    return px;
  }
  float x_hat(int64_t c) const { return scales[size_t(c / 32)] * float(digits[size_t(c)]); }
  // Per 256 columns: 64 bytes for each eighth k holding group j's columns 8 k .. 8 k + 7 in qword
  // j; per lane 2 j + h, group j's scale (a sixteenth of it for odd j in _high16), its sum32 for h
  // = 1 (0 for h = 0), and -128 times the digits of its columns 8 k + 4 h .. + 3 over the four k.
  void expect_eighths() const {
    ASSERT_EQ(eighths.size(), digits.size() / 256 * 256);
    for (size_t b = 0; b < digits.size() / 256; ++b) {
      for (size_t k = 0; k < 4; ++k)
        for (size_t j = 0; j < 8; ++j)
          for (size_t i = 0; i < 8; ++i)
            ASSERT_EQ(eighths[256 * b + 64 * k + 8 * j + i], digits[256 * b + 32 * j + 8 * k + i]) << b << k << j << i;
      for (size_t lane = 0; lane < 16; ++lane) {
        const size_t j = lane / 2, h = lane % 2;
        int32_t sum = 0;
        for (size_t k = 0; k < 4; ++k)
          for (size_t i = 0; i < 4; ++i) sum += digits[256 * b + 32 * j + 8 * k + 4 * h + i];
        EXPECT_EQ(eighths_offsets[16 * b + lane], -128 * sum) << b << " " << lane;
        EXPECT_EQ(eighths_scale[16 * b + lane], scales[8 * b + j]) << b << " " << lane;
        EXPECT_EQ(eighths_scale_high16[16 * b + lane], j % 2 ? scales[8 * b + j] / 16 : scales[8 * b + j]);
        EXPECT_EQ(eighths_sum32[16 * b + lane], h ? sums32[8 * b + j] : 0.0f) << b << " " << lane;
      }
    }
  }
};

// The types with an integer decode kernel (ggml_q8_rows.h): every block type.
constexpr GgmlType kIntegerTypes[] = {
    GgmlType::Q8_0,   GgmlType::Q4_0,    GgmlType::Q4_1,   GgmlType::Q5_0,    GgmlType::Q5_1,  GgmlType::IQ4_NL,
    GgmlType::Q2_K,   GgmlType::Q3_K,    GgmlType::Q4_K,   GgmlType::Q5_K,    GgmlType::Q6_K,  GgmlType::IQ4_XS,
    GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S,  GgmlType::IQ3_XXS, GgmlType::IQ3_S, GgmlType::IQ1_S,
    GgmlType::IQ1_M};

TEST(GgmlQ8, ActivationsQuantizePerThirtyTwoColumns) {
  if (!kernels::isa_supported(kernels::Isa::Avx2)) GTEST_SKIP() << "no AVX2 on this CPU";
  const int64_t cols = 32 * 9;  // one super-block for the eighths, and a tail
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(cols));
  for (float& v : x) v = normal(rng) * 3.0f;
  for (int64_t c = 32; c < 64; ++c) x[size_t(c)] = 0.0f;     // block 1: zeros
  for (int64_t c = 64; c < 96; ++c) x[size_t(c)] *= 1e-32f;  // block 2: below kQ8SmallestLaneMax
  x[100] = -40.0f;                                           // block 3: a negative extreme
  Q8X q(cols);
  ASSERT_TRUE(kernels::detail::ggml_quantize_x_avx2(x.data(), cols, q.buffers()));
  q.expect_eighths();
  for (int64_t b = 0; b < cols / 32; ++b) {
    float largest = 0;
    int biggest = 0;
    int64_t sums[2] = {0, 0};
    for (int64_t c = 32 * b; c < 32 * b + 32; ++c) {
      largest = std::max(largest, std::fabs(x[size_t(c)]));
      biggest = std::max(biggest, std::abs(int(q.digits[size_t(c)])));
      sums[(c % 32) / 16] += q.digits[size_t(c)];
    }
    const float scale = q.scales[size_t(b)];
    if (b == 1 || b == 2) {
      EXPECT_EQ(scale, 0.0f) << b;
      EXPECT_EQ(biggest, 0) << b;
      continue;
    }
    EXPECT_FLOAT_EQ(scale, largest / 127.0f) << b;
    EXPECT_EQ(biggest, 127) << b;
    for (int64_t c = 32 * b; c < 32 * b + 32; ++c)
      EXPECT_LE(std::fabs(x[size_t(c)] - q.x_hat(c)), 0.5f * scale * (1 + 1e-5f)) << c;
    EXPECT_FLOAT_EQ(q.sums16[size_t(2 * b)], scale * float(sums[0])) << b;
    EXPECT_FLOAT_EQ(q.sums16[size_t(2 * b + 1)], scale * float(sums[1])) << b;
    EXPECT_FLOAT_EQ(q.sums32[size_t(b)], scale * float(sums[0] + sums[1])) << b;
  }
  EXPECT_EQ(q.digits[100], -127);
  for (float bad : {INFINITY, -INFINITY, NAN}) {
    std::vector<float> y = x;
    y[size_t(cols - 1)] = bad;
    EXPECT_FALSE(kernels::detail::ggml_quantize_x_avx2(y.data(), cols, q.buffers())) << bad;
  }
}

// Each integer decode kernel against the scalar reference on the same quantized x: the double
// dot of the dequantized row with x^ = scale * x_g8. The integer dots are exact, so the kernels
// differ from it only by the f32 rounding of their per-block factors and sums: at most 64 f32
// epsilons of sum_c M_c |x^_c|, M_c the largest |w| of c's 16 elements (which bounds the offset
// terms the kernels subtract as well: a Q6_K code's 32 d scale, a Q4_K min). A wrong code,
// scale, min or element order is off by a sizeable fraction of that.
// The builds of the integer decode kernels this CPU runs: AVX2, and AVX-512 VNNI where present.
struct KernelBuild {
  const char* name;
  kernels::detail::GgmlRowsQ8 (*rows_of)(GgmlType);
};
std::vector<KernelBuild> kernel_builds() {
  std::vector<KernelBuild> builds = {{"avx2", kernels::detail::ggml_rows_q8_avx2},
                                     {"avx2 with grid gathers", kernels::detail::ggml_rows_q8_avx2_gathers}};
  if (kernels::detail::cpu_has_avx512_vnni() && kernels::isa_supported(kernels::Isa::Avx512))
    builds.push_back({"avx512vnni", kernels::detail::ggml_rows_q8_avx512vnni});
  if (kernels::detail::cpu_has_avx512_vnni() && kernels::detail::cpu_has_avx512_vbmi() &&
      kernels::isa_supported(kernels::Isa::Avx512))
    builds.push_back({"avx512vnni+vbmi", kernels::detail::ggml_rows_q8_avx512vbmi});
  return builds;
}

TEST(GgmlQ8, EachKernelMatchesTheScalarReferenceOnItsQuantizedX) {
  if (!kernels::isa_supported(kernels::Isa::Avx2)) GTEST_SKIP() << "no AVX2 on this CPU";
  for (const KernelBuild& build : kernel_builds()) {
    for (GgmlType type : kIntegerTypes) {
      SCOPED_TRACE(build.name);
      const kernels::detail::GgmlRowsQ8 rows_q8 = build.rows_of(type);
      ASSERT_NE(rows_q8, nullptr) << ggml_type_name(type) << " should have an integer decode kernel";
      const int64_t block = ggml_type_info(type).block_elements;
      std::mt19937 rng(uint32_t(type) + 11);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (int64_t blocks : {1, 3, 9}) {
        const int64_t cols = blocks * block, rows = 5;
        const std::vector<uint8_t> bytes = random_rows(type, rows, cols, rng);
        const WeightMatrix w = ggml_matrix(type, bytes, rows, cols);
        std::vector<float> x(static_cast<size_t>(cols)), row(static_cast<size_t>(cols)), y(static_cast<size_t>(rows));
        for (float& v : x) v = normal(rng);
        Q8X q(cols);
        ASSERT_TRUE(kernels::detail::ggml_quantize_x_avx2(x.data(), cols, q.buffers()));
        const kernels::detail::PreparedX px = q.prepared(x.data());
        rows_q8(w, &px, 1, 0, rows, y.data(), 0);
        for (int64_t r = 0; r < rows; ++r) {
          dequantize_row(w, r, row.data());
          double want = 0, magnitude = 0;
          for (int64_t c = 0; c < cols; ++c) {
            want += double(row[size_t(c)]) * q.x_hat(c);
            float largest = 0;
            for (int64_t k = c / 16 * 16; k < c / 16 * 16 + 16; ++k) largest = std::max(largest, std::fabs(row[size_t(k)]));
            magnitude += double(largest) * std::fabs(q.x_hat(c));
          }
          ASSERT_NEAR(y[size_t(r)], want, kReassociationTolerance * magnitude)
              << ggml_type_name(type) << ": " << cols << " columns, row " << r;
        }
      }
    }
  }
}

// n tokens of x (n * cols values, token after token) quantized for the integer kernels; ok is
// false when a token could not be (an inf or NaN).
struct QuantizedTokens {
  QuantizedTokens(const std::vector<float>& x, int64_t n, int64_t cols) {
    for (int64_t t = 0; t < n; ++t) {
      quantized.emplace_back(cols);
      ok = ok && kernels::detail::ggml_quantize_x_avx2(x.data() + t * cols, cols, quantized.back().buffers());
    }
    for (int64_t t = 0; t < n; ++t) prepared.push_back(quantized[size_t(t)].prepared(x.data() + t * cols));
  }
  std::vector<Q8X> quantized;
  std::vector<kernels::detail::PreparedX> prepared;
  bool ok = true;
};

// The VNNI build's dots are exact as the AVX2 build's, and gathered grid entries are the loaded
// ones: every build gives the AVX2 build's results bit for bit, for one token and for a decode
// batch, on rows whose codes reach every type's extremes. Except four types in the VNNI build,
// each in its faster form there, which differ from the AVX2 build by f32 rounding (both stand
// against the scalar reference above): Q6_K multiplies its 16-element scales into the f32 lane
// factors (AVX2: into the integer dots); Q4_K, Q5_K and IQ4_XS sum a group's dots in the integers
// over the whole super-block (PreparedX::x_g8_eighths; AVX2: a float FMA per 32 columns).
bool rounds_as_avx2(const std::string& build, GgmlType type) {
  return !(build.starts_with("avx512vnni") && (type == GgmlType::Q6_K || type == GgmlType::Q4_K ||
                                               type == GgmlType::Q5_K || type == GgmlType::IQ4_XS));
}

TEST(GgmlQ8, EveryBuildGivesTheAvx2ResultsBitForBit) {
  if (!kernels::isa_supported(kernels::Isa::Avx2)) GTEST_SKIP() << "no AVX2 on this CPU";
  const std::vector<KernelBuild> builds = kernel_builds();
  for (GgmlType type : kIntegerTypes) {
    std::mt19937 rng(uint32_t(type) + 31);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const int64_t rows = 9, cols = 1024, n = 4;
    const std::vector<uint8_t> bytes = random_rows(type, rows, cols, rng);
    const WeightMatrix w = ggml_matrix(type, bytes, rows, cols);
    std::vector<float> x(static_cast<size_t>(n * cols));
    for (float& v : x) v = normal(rng) * 4.0f;
    const QuantizedTokens tokens_x(x, n, cols);
    ASSERT_TRUE(tokens_x.ok);
    const std::vector<kernels::detail::PreparedX>& pxs = tokens_x.prepared;
    for (int tokens : {1, int(n)}) {
      std::vector<float> avx2(size_t(n * rows));
      builds[0].rows_of(type)(w, pxs.data(), tokens, 0, rows, avx2.data(), rows);
      for (size_t other = 1; other < builds.size(); ++other) {
        if (!rounds_as_avx2(builds[other].name, type)) continue;
        std::vector<float> y(size_t(n * rows));
        builds[other].rows_of(type)(w, pxs.data(), tokens, 0, rows, y.data(), rows);
        EXPECT_EQ(y, avx2) << builds[other].name << ", " << ggml_type_name(type) << ", " << tokens << " tokens";
      }
      // The VBMI build is the VNNI build but for IQ4_XS's lookups: bit for bit its results.
      if (builds.size() == 4) {
        std::vector<float> vnni(size_t(n * rows)), vbmi(size_t(n * rows));
        builds[2].rows_of(type)(w, pxs.data(), tokens, 0, rows, vnni.data(), rows);
        builds[3].rows_of(type)(w, pxs.data(), tokens, 0, rows, vbmi.data(), rows);
        EXPECT_EQ(vbmi, vnni) << ggml_type_name(type) << ", " << tokens << " tokens";
      }
    }
  }
}

// A decode batch (any n, through the kernel itself and through matmul in fast precision) gives
// every token bit for bit what it gets alone; so does a prefill.
TEST(GgmlQ8, DecodeBatchesGiveEachTokenItsOwnMatvec) {
  if (!kernels::isa_supported(kernels::Isa::Avx2)) GTEST_SKIP() << "no AVX2 on this CPU";
  const test::PrecisionGuard fast(kernels::MatmulPrecision::Bf16Activations);
  for (GgmlType type : kIntegerTypes) {
    std::mt19937 rng(uint32_t(type) + 21);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const int64_t rows = 13, cols = 512, n = 7;
    const std::vector<uint8_t> bytes = random_rows(type, rows, cols, rng);
    const WeightMatrix w = ggml_matrix(type, bytes, rows, cols);
    std::vector<float> x(static_cast<size_t>(n * cols));
    for (float& v : x) v = normal(rng);
    const QuantizedTokens tokens_x(x, n, cols);
    ASSERT_TRUE(tokens_x.ok);
    const std::vector<kernels::detail::PreparedX>& pxs = tokens_x.prepared;
    std::vector<float> alone(size_t(n * rows)), batch(size_t(n * rows)), via_matmul(size_t(n * rows));
    for (int64_t t = 0; t < n; ++t)
      kernels::detail::ggml_rows_q8(type)(w, &pxs[size_t(t)], 1, 0, rows, alone.data() + t * rows, 0);
    kernels::detail::ggml_rows_q8(type)(w, pxs.data(), int(n), 0, rows, batch.data(), rows);
    EXPECT_EQ(batch, alone) << ggml_type_name(type);
    kernels::matmul(w, x.data(), n, via_matmul.data());
    std::vector<float> matvecs(size_t(n * rows));
    for (int64_t t = 0; t < n; ++t) kernels::matvec(w, x.data() + t * cols, matvecs.data() + t * rows);
    EXPECT_EQ(via_matmul, matvecs) << ggml_type_name(type);
    if (kernels::active_isa() != kernels::Isa::Scalar) {
      EXPECT_EQ(matvecs, alone) << ggml_type_name(type) << ": not the integer decode";
    }
    // Prefill (more than kDecodeBatchMaxTokens rows) takes the same kernels: each row its matvec.
    const int64_t prompt = kernels::kDecodeBatchMaxTokens + 9;
    std::vector<float> px(static_cast<size_t>(prompt * cols)), py(size_t(prompt * rows)), one(static_cast<size_t>(rows));
    for (float& v : px) v = normal(rng);
    kernels::matmul(w, px.data(), prompt, py.data());
    for (int64_t t = 0; t < prompt; t += 8) {
      kernels::matvec(w, px.data() + t * cols, one.data());
      EXPECT_TRUE(std::equal(one.begin(), one.end(), py.begin() + t * rows)) << ggml_type_name(type) << " prompt row " << t;
    }
  }
}

// --llama-rounding: x as llama.cpp's CPU kernels round it for each weight type (ggml-cpu's
// vec_dot_type: the AVX2 quantize_row_q8_0 / q8_1, quantize_row_q8_K_ref), restated here from
// ggml's definitions: Q8_0 per 32 columns, d = max|x| / 127 kept as f16, codes x * (127 / max|x|)
// rounded to nearest even; Q8_1 the same with s = f16(d * sum of codes) from the f32 d; Q8_K per
// 256, iscale = -127 / (the signed x of largest magnitude), codes nearest(iscale * x) capped at
// 127, d = 1 / iscale. Every x^ = scale * code must be that d * code exactly.
TEST(GgmlQ8, LlamaRoundingIsLlamaCppsQuantizers) {
  using kernels::detail::GgmlXRounding;
  EXPECT_EQ(kernels::detail::llama_x_rounding(GgmlType::Q4_0), GgmlXRounding::Q8_0);
  EXPECT_EQ(kernels::detail::llama_x_rounding(GgmlType::IQ4_NL), GgmlXRounding::Q8_0);
  EXPECT_EQ(kernels::detail::llama_x_rounding(GgmlType::Q5_1), GgmlXRounding::Q8_1);
  EXPECT_EQ(kernels::detail::llama_x_rounding(GgmlType::Q6_K), GgmlXRounding::Q8_K);
  EXPECT_EQ(kernels::detail::llama_x_rounding(GgmlType::IQ4_XS), GgmlXRounding::Q8_K);
  EXPECT_EQ(kernels::detail::llama_x_rounding(GgmlType::IQ2_XXS), GgmlXRounding::Q8_K);
  const int64_t cols = 256 * 4;
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(cols));
  for (float& v : x) v = normal(rng) * 2.0f;
  x[10] = 9.0f;                                              // super-block 0: a positive extreme
  x[300] = -9.5f;                                            // super-block 1: a negative one
  for (int64_t c = 512; c < 768; ++c) x[size_t(c)] = 0.0f;   // super-block 2: zeros
  x[801] = 127.0f;                                           // max|x| 127: x * 127 / max is x,
  x[800] = 0.5f;                                             // so these are ties
  x[802] = 1.5f;
  x[803] = 2.5f;
  for (GgmlXRounding rounding : {GgmlXRounding::Q8_0, GgmlXRounding::Q8_1, GgmlXRounding::Q8_K}) {
    Q8X q(cols);
    ASSERT_TRUE(kernels::detail::ggml_quantize_x_like_llama(x.data(), cols, rounding, q.buffers()));
    q.expect_eighths();
    const int64_t group = rounding == GgmlXRounding::Q8_K ? 256 : 32;
    for (int64_t b = 0; b < cols / group; ++b) {
      const float* xb = x.data() + b * group;
      float largest = 0, extreme = 0;
      for (int64_t i = 0; i < group; ++i)
        if (std::fabs(xb[i]) > largest) largest = std::fabs(xb[i]), extreme = xb[i];
      for (int64_t i = 0; i < group; ++i) {
        const int64_t c = b * group + i;
        float want;
        if (rounding == GgmlXRounding::Q8_K) {
          const float iscale = largest > 0 ? -127.0f / extreme : 0.0f;
          const float code = std::min(127.0f, std::nearbyint(iscale * xb[i]));
          want = largest > 0 ? (1.0f / iscale) * code : 0.0f;
        } else {
          const float inverse = largest > 0 ? 127.0f / largest : 0.0f;
          want = f16_to_f32(f32_to_f16(largest / 127.0f)) * std::nearbyint(xb[i] * inverse);
        }
        ASSERT_EQ(q.x_hat(c), want) << int(rounding) << " column " << c;
      }
      for (int64_t s = b * group / 32; s < (b + 1) * group / 32; ++s) {
        int sums[2] = {0, 0};
        for (int64_t c = 32 * s; c < 32 * s + 32; ++c) sums[(c % 32) / 16] += q.digits[size_t(c)];
        const float scale = q.scales[size_t(s)];
        EXPECT_GE(scale, 0.0f);
        EXPECT_EQ(q.sums16[size_t(2 * s)], scale * float(sums[0])) << s;
        EXPECT_EQ(q.sums16[size_t(2 * s + 1)], scale * float(sums[1])) << s;
        const float q8_1_sum = f16_to_f32(f32_to_f16(largest / 127.0f * float(sums[0] + sums[1])));
        EXPECT_EQ(q.sums32[size_t(s)], rounding == GgmlXRounding::Q8_1 ? q8_1_sum : scale * float(sums[0] + sums[1]))
            << s;
      }
    }
  }
  // The ties went to even (_mm256_round_ps / nearest_int, not roundf's away from zero).
  Q8X q(cols);
  ASSERT_TRUE(kernels::detail::ggml_quantize_x_like_llama(x.data(), cols, GgmlXRounding::Q8_0, q.buffers()));
  EXPECT_EQ(q.digits[800], 0);
  EXPECT_EQ(q.digits[802], 2);
  EXPECT_EQ(q.digits[803], 2);
  std::vector<float> bad = x;
  bad[7] = NAN;
  EXPECT_FALSE(kernels::detail::ggml_quantize_x_like_llama(bad.data(), cols, GgmlXRounding::Q8_K, q.buffers()));
}

// In LlamaCppActivations precision, matvec and a batch of products on one x (a Q4_K_M layer's
// Q4_K attn_q beside its Q8_0 attn_k) give each type's kernel on x rounded for that type.
TEST(GgmlQ8, LlamaRoundingReachesEachProductWithItsTypesX) {
  if (!kernels::isa_supported(kernels::Isa::Avx2)) GTEST_SKIP() << "no AVX2 on this CPU";
  const test::PrecisionGuard llama(kernels::MatmulPrecision::LlamaCppActivations);
  const int64_t rows = 9, cols = 512;
  std::mt19937 rng(23);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(cols));
  for (float& v : x) v = normal(rng);
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<WeightMatrix> matrices;
  for (GgmlType type : kIntegerTypes) bytes.push_back(random_rows(type, rows, cols, rng));
  for (size_t i = 0; i < std::size(kIntegerTypes); ++i)
    matrices.push_back(ggml_matrix(kIntegerTypes[i], bytes[i], rows, cols));
  std::vector<std::vector<float>> batched(matrices.size(), std::vector<float>(size_t(rows)));
  std::vector<kernels::MatvecProduct> products;
  for (size_t i = 0; i < matrices.size(); ++i) products.push_back({&matrices[i], x.data(), batched[i].data()});
  kernels::matvec_batch(products);
  for (size_t i = 0; i < matrices.size(); ++i) {
    const GgmlType type = kIntegerTypes[i];
    Q8X q(cols);
    ASSERT_TRUE(kernels::detail::ggml_quantize_x_like_llama(x.data(), cols, kernels::detail::llama_x_rounding(type),
                                                            q.buffers()));
    const kernels::detail::PreparedX px = q.prepared(x.data());
    std::vector<float> want(static_cast<size_t>(rows)), alone(static_cast<size_t>(rows));
    kernels::detail::ggml_rows_q8(type)(matrices[i], &px, 1, 0, rows, want.data(), 0);
    kernels::matvec(matrices[i], x.data(), alone.data());
    EXPECT_EQ(alone, want) << ggml_type_name(type);
    EXPECT_EQ(batched[i], want) << ggml_type_name(type) << " in a batch";
    // And not the default rounding's result (else the test would not tell them apart).
    Q8X ours(cols);
    ASSERT_TRUE(kernels::detail::ggml_quantize_x_avx2(x.data(), cols, ours.buffers()));
    const kernels::detail::PreparedX ours_px = ours.prepared(x.data());
    std::vector<float> default_y(static_cast<size_t>(rows));
    kernels::detail::ggml_rows_q8(type)(matrices[i], &ours_px, 1, 0, rows, default_y.data(), 0);
    EXPECT_NE(default_y, want) << ggml_type_name(type);
  }
}

TEST(GgmlAvx2Dot, TypesWithoutAKernelTakeTheReference) {
  // Exact precision: only Q8_0, Q4_K, Q5_K, Q6_K and IQ4_XS have an f32 decode kernel.
  EXPECT_EQ(kernels::detail::ggml_row_dot_avx2(GgmlType::IQ2_XXS), nullptr);
  EXPECT_EQ(kernels::detail::ggml_row_dot_avx2(GgmlType::Q4_0), nullptr);
  // Fast precision: every block type has an integer decode kernel, the float types none.
  for (GgmlType type : dequantizable_types()) {
    const bool listed = std::find(std::begin(kIntegerTypes), std::end(kIntegerTypes), type) != std::end(kIntegerTypes);
    EXPECT_EQ(kernels::detail::ggml_rows_q8_avx2(type) != nullptr, listed) << ggml_type_name(type);
    EXPECT_EQ(listed, ggml_type_info(type).block_elements > 1) << ggml_type_name(type);
  }
}

TEST(GgmlLinear, UnusableTypeIsAnError) {
  std::vector<uint8_t> bytes(64);
  WeightMatrix w;
  w.format = WeightFormat::Ggml;
  w.ggml_type = GgmlType::I32;
  w.rows = 1;
  w.cols = 16;
  w.data = bytes.data();
  w.row_stride = 64;
  std::vector<float> x(16), y(1);
  try {
    kernels::matvec(w, x.data(), y.data());
    ADD_FAILURE() << "no error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("ggml type I32 has no kernel"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace inkling
