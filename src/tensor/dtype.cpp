#include "tensor/dtype.h"

#include <cmath>

namespace inkling {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::U8: return 1;
    case DType::I8: return 1;
    case DType::I16: return 2;
    case DType::U16: return 2;
    case DType::I32: return 4;
    case DType::U32: return 4;
    case DType::I64: return 8;
    case DType::F8_E4M3: return 1;
  }
  return 0;
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::U8: return "U8";
    case DType::I8: return "I8";
    case DType::I16: return "I16";
    case DType::U16: return "U16";
    case DType::I32: return "I32";
    case DType::U32: return "U32";
    case DType::I64: return "I64";
    case DType::F8_E4M3: return "F8_E4M3";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view name) {
  static constexpr DType kAll[] = {DType::F32, DType::F16, DType::BF16, DType::U8,
                                   DType::I8,  DType::I16, DType::U16,  DType::I32,
                                   DType::U32, DType::I64, DType::F8_E4M3};
  for (DType dtype : kAll)
    if (dtype_name(dtype) == name) return dtype;
  return std::nullopt;
}

float f16_to_f32(uint16_t bits) {
  uint32_t sign = uint32_t(bits & 0x8000) << 16;
  uint32_t exponent = (bits >> 10) & 0x1f;
  uint32_t mantissa = bits & 0x3ff;
  uint32_t out;
  if (exponent == 0) {
    if (mantissa == 0) {
      out = sign;
    } else {  // subnormal: renormalise
      int shift = 0;
      while (!(mantissa & 0x400)) {
        mantissa <<= 1;
        ++shift;
      }
      mantissa &= 0x3ff;
      out = sign | uint32_t(127 - 15 - shift + 1) << 23 | mantissa << 13;
    }
  } else if (exponent == 31) {
    out = sign | 0x7f800000u | mantissa << 13;
  } else {
    out = sign | (exponent + 127 - 15) << 23 | mantissa << 13;
  }
  float value;
  std::memcpy(&value, &out, 4);
  return value;
}

uint16_t f32_to_f16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  uint16_t sign = uint16_t((bits >> 16) & 0x8000);
  float magnitude = std::fabs(value);
  if (std::isnan(value)) return sign | 0x7e00;
  if (magnitude >= 65520.0f) return sign | 0x7c00;
  if (magnitude < 6.103515625e-05f) {  // subnormal range: quantise to multiples of 2^-24
    float scaled = std::nearbyint(magnitude * 16777216.0f);
    return sign | uint16_t(scaled);
  }
  uint32_t abs_bits = bits & 0x7fffffffu;
  abs_bits += 0xfffu + ((abs_bits >> 13) & 1u);
  uint32_t exponent = (abs_bits >> 23) - 127 + 15;
  return sign | uint16_t(exponent << 10 | ((abs_bits >> 13) & 0x3ff));
}

float e4m3_to_f32(uint8_t bits) {
  float sign = (bits & 0x80) ? -1.0f : 1.0f;
  int exponent = (bits >> 3) & 0xf;
  int mantissa = bits & 7;
  if (exponent == 15 && mantissa == 7) return std::nanf("");
  if (exponent == 0) return sign * std::ldexp(float(mantissa), -9);  // 2^-6 * m/8
  return sign * std::ldexp(1.0f + mantissa / 8.0f, exponent - 7);
}

uint8_t f32_to_e4m3(float value) {
  if (std::isnan(value)) return 0x7f;
  uint8_t sign = std::signbit(value) ? 0x80 : 0;
  float magnitude = std::fabs(value);
  if (magnitude >= 448.0f) return sign | 0x7e;
  // Exhaustive nearest search over the 127 non-negative finite codes; ties go to the even code.
  uint8_t best = 0;
  float best_error = INFINITY;
  for (int code = 0; code <= 0x7e; ++code) {
    float error = std::fabs(e4m3_to_f32(uint8_t(code)) - magnitude);
    if (error < best_error || (error == best_error && (code & 1) == 0)) {
      best = uint8_t(code);
      best_error = error;
    }
  }
  return sign | best;
}

uint8_t f32_to_fp4_e2m1(float value) {
  uint8_t sign = std::signbit(value) ? 8 : 0;
  float magnitude = std::fabs(value);
  if (std::isnan(magnitude)) return sign | 7;
  uint8_t best = 0;
  float best_error = INFINITY;
  for (uint8_t code = 0; code < 8; ++code) {
    float error = std::fabs(fp4_e2m1_to_f32(code) - magnitude);
    if (error < best_error || (error == best_error && (code & 1) == 0)) {
      best = code;
      best_error = error;
    }
  }
  return sign | best;
}

float load_as_f32(const void* data, DType dtype, size_t index) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  switch (dtype) {
    case DType::F32: {
      float value;
      std::memcpy(&value, bytes + index * 4, 4);
      return value;
    }
    case DType::BF16: {
      uint16_t bits;
      std::memcpy(&bits, bytes + index * 2, 2);
      return bf16_to_f32(bits);
    }
    case DType::F16: {
      uint16_t bits;
      std::memcpy(&bits, bytes + index * 2, 2);
      return f16_to_f32(bits);
    }
    case DType::F8_E4M3: return e4m3_to_f32(bytes[index]);
    case DType::U8: return float(bytes[index]);
    case DType::I8: return float(int8_t(bytes[index]));
    default: {
      // Integer dtypes are not read as floats in the model; fall back to a copy for completeness.
      int64_t value = 0;
      std::memcpy(&value, bytes + index * dtype_size(dtype), dtype_size(dtype));
      return float(value);
    }
  }
}

}  // namespace inkling
