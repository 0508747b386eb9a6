// Portable kernels: the fallback on CPUs without AVX2, and the path for shapes the SIMD kernels
// do not special-case (e.g. affine group sizes that are not a multiple of the vector width).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/backend.h"
#include "tensor/dtype.h"

namespace inkling::kernels::detail {
namespace {

float dot(const float* a, const float* b, int64_t n) {
  // Eight partial sums: more accurate than one running sum and lets the compiler pipeline.
  float partial[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) partial[j] += a[i + j] * b[i + j];
  float sum = 0.0f;
  for (; i < n; ++i) sum += a[i] * b[i];
  for (float p : partial) sum += p;
  return sum;
}

float load_param(const uint8_t* p, DType dtype, int64_t index) {
  uint16_t bits;
  switch (dtype) {
    case DType::BF16: std::memcpy(&bits, p + 2 * index, 2); return bf16_to_f32(bits);
    case DType::F16: std::memcpy(&bits, p + 2 * index, 2); return f16_to_f32(bits);
    default: {
      float value;
      std::memcpy(&value, p + 4 * index, 4);
      return value;
    }
  }
}

// dequantize_row with the per-element dispatch hoisted: same values, several times faster.
void decode_row(const WeightMatrix& w, int64_t r, float* out) {
  const uint8_t* src = w.data + r * w.row_stride;
  switch (w.format) {
    case WeightFormat::BF16:
      for (int64_t c = 0; c < w.cols; ++c) {
        uint16_t bits;
        std::memcpy(&bits, src + 2 * c, 2);
        out[c] = bf16_to_f32(bits);
      }
      return;
    case WeightFormat::Affine: {
      const uint8_t* scales = w.scales + r * w.scales_row_stride;
      const uint8_t* biases = w.biases + r * w.biases_row_stride;
      for (int64_t g = 0; g < w.cols / w.group_size; ++g) {
        const float scale = load_param(scales, w.scale_dtype, g);
        const float bias = load_param(biases, w.scale_dtype, g);
        const int64_t begin = g * w.group_size, end = begin + w.group_size;
        if (w.bits == 8) {
          for (int64_t c = begin; c < end; ++c) out[c] = scale * float(src[c]) + bias;
        } else {  // group_size is even (checked), so a group starts on a byte
          for (int64_t c = begin; c < end; c += 2) {
            out[c] = scale * float(src[c / 2] & 15) + bias;
            out[c + 1] = scale * float(src[c / 2] >> 4) + bias;
          }
        }
      }
      return;
    }
    case WeightFormat::NvFp4: {
      const uint8_t* scales = w.scales + r * w.scales_row_stride;
      const float* table = e4m3_table();
      static constexpr float kValues[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,
                                            4.0f,  6.0f,  -0.0f, -0.5f, -1.0f, -1.5f,
                                            -2.0f, -3.0f, -4.0f, -6.0f};
      for (int64_t block = 0; block < w.cols / 16; ++block) {
        const float scale = table[scales[block]];
        for (int64_t c = 16 * block; c < 16 * block + 16; c += 2) {
          const uint8_t byte = src[c / 2];
          out[c] = kValues[byte & 15] * scale * w.global_scale;
          out[c + 1] = kValues[byte >> 4] * scale * w.global_scale;
        }
      }
      return;
    }
    default: dequantize_row(w, r, out);
  }
}

void matvec_rows(const WeightMatrix& w, const PreparedX& px, int64_t row_begin, int64_t row_end,
                 float* y) {
  std::vector<float> row(size_t(w.cols));
  for (int64_t r = row_begin; r < row_end; ++r) {
    const float* values = row.data();
    if (w.format == WeightFormat::F32 && (w.row_stride & 3) == 0 &&
        (reinterpret_cast<uintptr_t>(w.data) & 3) == 0)
      values = reinterpret_cast<const float*>(w.data + r * w.row_stride);
    else
      decode_row(w, r, row.data());
    y[r - row_begin] = dot(values, px.x, w.cols);
  }
}

// Each row decoded once for all tokens; every token's dot is matvec_rows' own (dot of the same
// decoded values), so the results match it bit for bit.
void matvec_rows_multi(const WeightMatrix& w, const PreparedX* xs, int n, int64_t row_begin, int64_t row_end,
                       float* y, int64_t ldy) {
  std::vector<float> row(size_t(w.cols));
  for (int64_t r = row_begin; r < row_end; ++r) {
    decode_row(w, r, row.data());
    for (int t = 0; t < n; ++t) y[t * ldy + r - row_begin] = dot(row.data(), xs[t].x, w.cols);
  }
}

void matmul_rows(const WeightMatrix& w, const float* x, int64_t n, int64_t row_begin,
                 int64_t row_end, float* y, int64_t ldy) {
  std::vector<float> row(size_t(w.cols));
  for (int64_t r = row_begin; r < row_end; ++r) {
    decode_row(w, r, row.data());
    for (int64_t t = 0; t < n; ++t) y[t * ldy + r - row_begin] = dot(row.data(), x + t * w.cols, w.cols);
  }
}

float sum_squares(const float* x, int64_t n) { return dot(x, x, n); }

void axpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

double fma_burn(int64_t iterations, float* sink) {
  constexpr int kChains = 8;
  float acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = float(i);
  for (int64_t it = 0; it < iterations; ++it)
    for (int i = 0; i < kChains; ++i) acc[i] = std::fma(acc[i], 0.999999f, 1e-7f);
  float total = 0.0f;
  for (float a : acc) total += a;
  *sink = total;
  return double(iterations) * kChains * 2;
}

uint64_t stream_sum(const uint64_t* data, size_t words) {
  uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  for (size_t i = 0; i + 4 <= words; i += 4) {
    a0 += data[i];
    a1 += data[i + 1];
    a2 += data[i + 2];
    a3 += data[i + 3];
  }
  return a0 + a1 + a2 + a3;
}

}  // namespace

bool quantize_q8_scalar(const float* x, int64_t chunks, int parts, const Q8Buffers& out) {
  // |Q| <= 127 * 256^(parts - 1): the top digit of the balanced base-256 expansion stays in int8.
  const float levels = parts == 1 ? 127.0f : 127.0f * 65536.0f;
  for (int64_t ch = 0; ch < chunks; ++ch) {
    int8_t* q = out.digits + 128 * parts * ch;
    for (int lane = 0; lane < 16; ++lane) {
      const int64_t c0 = 128 * ch + 8 * lane;
      float max_abs = 0.0f;
      for (int j = 0; j < 8; ++j) {
        // std::max would pass a NaN over; it must end the quantization instead.
        if (!std::isfinite(x[c0 + j])) return false;
        max_abs = std::max(max_abs, std::fabs(x[c0 + j]));
      }
      // A lane this small would overflow levels / max_abs: it becomes zeros (its values are below
      // 2^-100, far under the f32 rounding of any product they enter).
      if (max_abs < kQ8SmallestLaneMax) max_abs = 0.0f;
      const float scale = max_abs / levels, inverse = max_abs > 0.0f ? levels / max_abs : 0.0f;
      int32_t sum = 0;
      for (int j = 0; j < 8; ++j) {
        // Integers below 2^24 are exact in f32, so Q is the nearest level.
        const int32_t level = int32_t(std::min(levels, std::max(-levels, std::nearbyint(x[c0 + j] * inverse))));
        // Byte b of the even / odd halves of each part is column 2 b / 2 b + 1 of the chunk; the
        // last part holds the lowest digit.
        int32_t rest = level;
        for (int part = parts - 1; part >= 0; --part) {
          const int8_t digit = int8_t(uint8_t(rest & 0xff));  // in [-128, 127]
          q[128 * part + 64 * (j & 1) + (8 * lane + j) / 2] = digit;
          rest = (rest - digit) / 256;
        }
        sum += level;
        out.x_hat[c0 + j] = scale * float(level);
      }
      out.scales[16 * ch + lane] = scale;
      out.nvfp4_offsets[16 * ch + lane] = -12 * sum;
    }
  }
  return true;
}

const Backend& scalar_backend() {
  static const Backend backend{Isa::Scalar, 0,           0,        1,        matvec_rows,
                               matvec_rows_multi, matmul_rows, dot,  axpy,     sum_squares,
                               fma_burn,    stream_sum,  quantize_q8_scalar};
  return backend;
}

const Backend& backend_for(Isa isa) {
  switch (isa) {
    case Isa::Avx512: return avx512_backend();
    case Isa::Avx2: return avx2_backend();
    case Isa::Scalar: break;
  }
  return scalar_backend();
}

const float* e4m3_table() {
  static const std::vector<float> table = [] {
    std::vector<float> values(256);
    for (int i = 0; i < 256; ++i) values[size_t(i)] = e4m3_to_f32(uint8_t(i));
    return values;
  }();
  return table.data();
}

}  // namespace inkling::kernels::detail
