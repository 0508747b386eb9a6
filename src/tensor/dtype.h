// Element types found in Inkling checkpoints and the scalar codecs for them.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace inkling {

enum class DType : uint8_t { F32, F16, BF16, U8, I8, I16, U16, I32, U32, I64, F8_E4M3 };

// Bytes per element.
size_t dtype_size(DType dtype);
// The safetensors spelling ("F32", "BF16", "F8_E4M3", ...).
std::string_view dtype_name(DType dtype);
// Parses the safetensors spelling; nullopt for anything we do not support.
std::optional<DType> parse_dtype(std::string_view name);

inline float bf16_to_f32(uint16_t bits) {
  uint32_t widened = uint32_t(bits) << 16;
  float value;
  std::memcpy(&value, &widened, 4);
  return value;
}

// Round to nearest even, NaN kept quiet (matches torch / numpy ml_dtypes).
inline uint16_t f32_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}

inline float round_to_bf16(float value) { return bf16_to_f32(f32_to_bf16(value)); }

float f16_to_f32(uint16_t bits);
uint16_t f32_to_f16(float value);

// OCP FP8 E4M3 (finite-only "fn" variant: no infinities, 0x7f/0xff are NaN, max 448).
float e4m3_to_f32(uint8_t bits);
// Round to nearest even with saturation to +-448.
uint8_t f32_to_e4m3(float value);

// FP4 E2M1 as used by NVFP4: values {0, .5, 1, 1.5, 2, 3, 4, 6} with a sign bit.
inline float fp4_e2m1_to_f32(uint8_t nibble) {
  static constexpr float kMagnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  float magnitude = kMagnitudes[nibble & 7];
  return (nibble & 8) ? -magnitude : magnitude;
}
// Nearest E2M1 code (ties to even code), saturating at +-6.
uint8_t f32_to_fp4_e2m1(float value);

// Reads element `index` of a buffer of the given float-like dtype as f32.
float load_as_f32(const void* data, DType dtype, size_t index);

}  // namespace inkling
