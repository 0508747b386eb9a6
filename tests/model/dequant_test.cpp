// Dequantization of the stored formats against values worked out by hand from the format specs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "model/checkpoint_writer.h"
#include "tensor/dtype.h"
#include "tensor/weight_matrix.h"

namespace inkling {
namespace {

TEST(Codecs, E4m3AndFp4Tables) {
  EXPECT_EQ(e4m3_to_f32(0x38), 1.0f);          // exponent 7 (bias 7), mantissa 0
  EXPECT_EQ(e4m3_to_f32(0x7e), 448.0f);        // largest finite
  EXPECT_EQ(e4m3_to_f32(0x01), 1.0f / 512.0f); // smallest subnormal 2^-9
  EXPECT_EQ(e4m3_to_f32(0xb8), -1.0f);
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7f)));
  for (int code = 0; code < 0x7f; ++code) EXPECT_EQ(f32_to_e4m3(e4m3_to_f32(uint8_t(code))), code) << code;
  const float fp4[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int code = 0; code < 8; ++code) {
    EXPECT_EQ(fp4_e2m1_to_f32(uint8_t(code)), fp4[code]);
    EXPECT_EQ(fp4_e2m1_to_f32(uint8_t(code | 8)), -fp4[code]);
    EXPECT_EQ(f32_to_fp4_e2m1(fp4[code]), code);
  }
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 1.0f / 256.0f)), 1.0f);  // ties to even
  EXPECT_EQ(f16_to_f32(f32_to_f16(65504.0f)), 65504.0f);
}

TEST(Dequantize, NvFp4BlockAndGlobalScales) {
  // One row of 32 values: two blocks of 16. Byte k holds element 2k (low nibble) and 2k+1 (high).
  uint8_t codes[16];
  for (int k = 0; k < 16; ++k) codes[k] = uint8_t(0x3 | (0xA << 4));  // 1.5 and -1.0
  uint8_t scales[2] = {0x38, 0x40};  // 1.0 and 2.0
  WeightMatrix m;
  m.format = WeightFormat::NvFp4;
  m.rows = 1;
  m.cols = 32;
  m.data = codes;
  m.row_stride = 16;
  m.scales = scales;
  m.scales_row_stride = 2;
  m.scale_dtype = DType::F8_E4M3;
  m.group_size = 16;
  m.global_scale = 0.25f;
  float out[32];
  dequantize_row(m, 0, out);
  for (int c = 0; c < 32; ++c) {
    float value = (c % 2 == 0) ? 1.5f : -1.0f;
    float block = c < 16 ? 1.0f : 2.0f;
    EXPECT_EQ(out[c], value * block * 0.25f) << c;
  }
}

TEST(Dequantize, MlxAffineWordPacking) {
  // 4-bit: uint32 word w holds codes j = 0..7 at bits [4j, 4j + 4) -> little-endian bytes, low nibble first.
  uint32_t words[8];
  for (int w = 0; w < 8; ++w) {
    words[w] = 0;
    for (int j = 0; j < 8; ++j) words[w] |= uint32_t((w * 8 + j) % 16) << (4 * j);
  }
  uint16_t scales[1] = {f32_to_bf16(0.5f)}, biases[1] = {f32_to_bf16(-2.0f)};
  WeightMatrix m;
  m.format = WeightFormat::Affine;
  m.rows = 1;
  m.cols = 64;
  m.bits = 4;
  m.group_size = 64;
  m.data = reinterpret_cast<const uint8_t*>(words);
  m.row_stride = 32;
  m.scale_dtype = DType::BF16;
  m.scales = reinterpret_cast<const uint8_t*>(scales);
  m.biases = reinterpret_cast<const uint8_t*>(biases);
  float out[64];
  dequantize_row(m, 0, out);
  for (int c = 0; c < 64; ++c) EXPECT_EQ(out[c], 0.5f * float(c % 16) - 2.0f) << c;
  // 8-bit: four codes per word, byte order.
  uint32_t words8[16];
  for (int w = 0; w < 16; ++w) words8[w] = uint32_t(4 * w) | uint32_t(4 * w + 1) << 8 | uint32_t(4 * w + 2) << 16 | uint32_t(4 * w + 3) << 24;
  m.bits = 8;
  m.data = reinterpret_cast<const uint8_t*>(words8);
  m.row_stride = 64;
  dequantize_row(m, 0, out);
  for (int c = 0; c < 64; ++c) EXPECT_EQ(out[c], 0.5f * float(c) - 2.0f) << c;
}

TEST(Quantize, EncodersRoundTripWithinFormatError) {
  std::vector<float> values(128);
  for (size_t i = 0; i < values.size(); ++i) values[i] = std::sin(float(i) * 0.37f) * (1.0f + float(i % 7));
  uint8_t codes[64];
  uint16_t scales[2], biases[2];
  quantize_affine_row(values.data(), 128, 4, 64, codes, scales, biases);
  WeightMatrix m;
  m.format = WeightFormat::Affine;
  m.rows = 1;
  m.cols = 128;
  m.bits = 4;
  m.group_size = 64;
  m.data = codes;
  m.scale_dtype = DType::BF16;
  m.scales = reinterpret_cast<const uint8_t*>(scales);
  m.biases = reinterpret_cast<const uint8_t*>(biases);
  float out[128];
  dequantize_row(m, 0, out);
  for (int c = 0; c < 128; ++c) EXPECT_LE(std::fabs(out[c] - values[size_t(c)]), 0.51f * bf16_to_f32(scales[c / 64]) + 0.02f) << c;
  uint8_t fp4[64], block_scales[8];
  float scale2 = 7.0f / (6.0f * 448.0f);
  quantize_nvfp4_row(values.data(), 128, scale2, fp4, block_scales);
  WeightMatrix n;
  n.format = WeightFormat::NvFp4;
  n.rows = 1;
  n.cols = 128;
  n.data = fp4;
  n.scales = block_scales;
  n.scale_dtype = DType::F8_E4M3;
  n.group_size = 16;
  n.global_scale = scale2;
  dequantize_row(n, 0, out);
  for (int c = 0; c < 128; ++c) {
    float step = e4m3_to_f32(block_scales[c / 16]) * scale2;  // spacing of the E2M1 grid is at most 2 steps
    EXPECT_LE(std::fabs(out[c] - values[size_t(c)]), 1.01f * step + 1e-6f) << c;
  }
}

}  // namespace
}  // namespace inkling
