// x rounded for a ggml block type as llama.cpp's CPU backend rounds it before that type's dot
// product (ggml-cpu's vec_dot_type; the AVX2 quantize_row_q8_0 / q8_1 and quantize_row_q8_K_ref,
// read at the Inkling branch), written in PreparedX::x_g8's layout so the integer decode kernels
// take it unchanged. Scalar on purpose: this is the agreement mode, and each call is a few
// microseconds against a matvec's milliseconds.
#include <cmath>
#include <cstdint>

#include "kernels/backend.h"
#include "tensor/dtype.h"

namespace inkling::kernels::detail {

GgmlXRounding llama_x_rounding(GgmlType type) {
  switch (type) {
    case GgmlType::Q8_0:
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::IQ4_NL: return GgmlXRounding::Q8_0;
    case GgmlType::Q4_1:
    case GgmlType::Q5_1: return GgmlXRounding::Q8_1;
    default: return GgmlXRounding::Q8_K;  // the K and the other IQ types
  }
}

namespace {

float f16_rounded(float value) { return f16_to_f32(f32_to_f16(value)); }

bool all_finite(const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return false;
  return true;
}

// Q8_0 and Q8_1: per 32 columns d = max|x| / 127 (stored as f16), codes round(x * (127 / max|x|))
// to nearest even (_mm256_round_ps); Q8_1 also keeps s = f16(d * sum of codes), with the f32 d.
void quantize_q8_0_or_1(const float* x, int64_t cols, bool with_sum, const GgmlQ8Buffers& out) {
  for (int64_t b = 0; b < cols / 32; ++b) {
    const float* xb = x + 32 * b;
    float largest = 0.0f;
    for (int i = 0; i < 32; ++i) largest = std::fmax(largest, std::fabs(xb[i]));
    const float d = largest / 127.0f;
    const float inverse = largest != 0.0f ? 127.0f / largest : 0.0f;
    int sums[2] = {0, 0};
    for (int i = 0; i < 32; ++i) {
      const int code = int(std::nearbyint(xb[i] * inverse));
      out.digits[32 * b + i] = int8_t(code);
      sums[i / 16] += code;
    }
    const float scale = f16_rounded(d);
    out.scales[b] = scale;
    out.sums16[2 * b] = scale * float(sums[0]);
    out.sums16[2 * b + 1] = scale * float(sums[1]);
    out.sums32[b] = with_sum ? f16_rounded(d * float(sums[0] + sums[1])) : scale * float(sums[0] + sums[1]);
  }
}

// Q8_K: per 256 columns iscale = -127 / (the x of largest magnitude, signed), codes
// nearest(iscale * x) (to even) capped at 127, d = 1 / iscale in f32. d is negative when that x
// is positive; the kernels take |d| with the codes negated, the same products exactly.
void quantize_q8_k(const float* x, int64_t cols, const GgmlQ8Buffers& out) {
  for (int64_t b = 0; b < cols / 256; ++b) {
    const float* xb = x + 256 * b;
    float largest = 0.0f, extreme = 0.0f;
    for (int i = 0; i < 256; ++i)
      if (std::fabs(xb[i]) > largest) {
        largest = std::fabs(xb[i]);
        extreme = xb[i];
      }
    int8_t* codes = out.digits + 256 * b;
    float d = 0.0f;
    if (largest == 0.0f) {
      for (int i = 0; i < 256; ++i) codes[i] = 0;
    } else {
      const float iscale = -127.0f / extreme;
      d = 1.0f / iscale;
      const int sign = d < 0.0f ? -1 : 1;
      for (int i = 0; i < 256; ++i) {
        int code = int(std::nearbyint(iscale * xb[i]));
        if (code > 127) code = 127;
        codes[i] = int8_t(sign * code);
      }
    }
    const float scale = std::fabs(d);
    for (int s = 0; s < 8; ++s) {
      int sums[2] = {0, 0};
      for (int i = 0; i < 32; ++i) sums[i / 16] += codes[32 * s + i];
      out.scales[8 * b + s] = scale;
      out.sums16[16 * b + 2 * s] = scale * float(sums[0]);
      out.sums16[16 * b + 2 * s + 1] = scale * float(sums[1]);
      out.sums32[8 * b + s] = scale * float(sums[0] + sums[1]);
    }
  }
}

}  // namespace

void ggml_x_eighths(int64_t cols, const GgmlQ8Buffers& out) {
  for (int64_t b = 0; b < cols / 256; ++b) {
    const int8_t* digits = out.digits + 256 * b;
    int8_t* eighths = out.eighths + 256 * b;
    for (int k = 0; k < 4; ++k)
      for (int j = 0; j < 8; ++j)
        for (int i = 0; i < 8; ++i) eighths[64 * k + 8 * j + i] = digits[32 * j + 8 * k + i];
    for (int lane = 0; lane < 16; ++lane) {
      const int j = lane / 2, h = lane % 2;
      int32_t sum = 0;
      for (int k = 0; k < 4; ++k)
        for (int i = 0; i < 4; ++i) sum += digits[32 * j + 8 * k + 4 * h + i];
      out.eighths_offsets[16 * b + lane] = -128 * sum;
      out.eighths_scale[16 * b + lane] = out.scales[8 * b + j];
      out.eighths_scale_high16[16 * b + lane] = j % 2 == 1 ? out.scales[8 * b + j] / 16 : out.scales[8 * b + j];
      out.eighths_sum32[16 * b + lane] = h == 1 ? out.sums32[8 * b + j] : 0.0f;
    }
  }
}

bool ggml_quantize_x_like_llama(const float* x, int64_t cols, GgmlXRounding rounding, const GgmlQ8Buffers& out) {
  if (!all_finite(x, cols)) return false;
  switch (rounding) {
    case GgmlXRounding::Q8_0: quantize_q8_0_or_1(x, cols, false, out); break;
    case GgmlXRounding::Q8_1: quantize_q8_0_or_1(x, cols, true, out); break;
    case GgmlXRounding::Q8_K:
      if (cols % 256 != 0) return false;
      quantize_q8_k(x, cols, out);
      break;
    case GgmlXRounding::Fine32: return false;
  }
  ggml_x_eighths(cols, out);
  return true;
}

}  // namespace inkling::kernels::detail
