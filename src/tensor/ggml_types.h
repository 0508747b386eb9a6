// The tensor types of ggml (the element encodings GGUF files store): codes, block geometry,
// names, and the scalar dequantization every kernel for them is checked against.
//
// A ggml row of n elements is n / block_elements blocks of block_bytes each, stored back to back;
// a block is self-contained (its scales travel with its codes). The codes are those of ggml's
// `enum ggml_type`, which GGUF files write as a uint32.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace inkling {

enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
};

struct GgmlTypeInfo {
  std::string_view name;  // as ggml spells it: "Q4_K", "IQ2_XXS", ...
  int64_t block_elements = 0;
  int64_t block_bytes = 0;
  // Whether dequantize_ggml_row handles it: the float and quantized weight types. The others
  // (integer tensors, the activation-only Q8_1 / Q8_K, ternary and MXFP4 types) are known so a
  // file holding them parses, but no Inkling weight can use them.
  bool dequantizable = false;
};

// The type a GGUF code names; nullopt for a code ggml does not define (or no longer does:
// the removed Q4_2 / Q4_3 and the repacked Q4_0_4_4 family, 4, 5 and 31-33).
std::optional<GgmlType> ggml_type_from_code(uint32_t code);
const GgmlTypeInfo& ggml_type_info(GgmlType type);
inline std::string_view ggml_type_name(GgmlType type) { return ggml_type_info(type).name; }

// Bytes of a row of `elements` values; nullopt when `elements` is not a whole number of blocks
// or the size does not fit 64 bits.
std::optional<uint64_t> ggml_row_bytes(GgmlType type, int64_t elements);

// Decodes `elements` values (a whole number of blocks) starting at `blocks` into out[elements],
// bit for bit as ggml's reference dequantizers do. Precondition: ggml_type_info(type).dequantizable.
void dequantize_ggml_row(GgmlType type, const uint8_t* blocks, float* out, int64_t elements);

// The values a 4-bit IQ4_NL / IQ4_XS code stands for (ggml's kvalues_iq4nl): a non-uniform grid.
inline constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// Q4_K / Q5_K: 8 scales and 8 mins of 6 bits packed in 12 bytes: for sub-block j < 4, the low 6
// bits of bytes j and j + 4; for j >= 4, a nibble of byte j + 4 plus the two top bits of bytes
// j - 4 and j.
inline void k_scale_min(const uint8_t* packed, int j, int& scale, int& min) {
  if (j < 4) {
    scale = packed[j] & 63;
    min = packed[j + 4] & 63;
  } else {
    scale = (packed[j + 4] & 15) | (packed[j - 4] >> 6) << 4;
    min = (packed[j + 4] >> 4) | (packed[j] >> 6) << 4;
  }
}

// The inverse of k_scale_min: stores sub-block j's 6-bit scale and min into `packed`, which must
// start zeroed (the top bits of sub-blocks 4..7 are or-ed into bytes 0..7).
inline void k_pack_scale_min(uint8_t* packed, int j, int scale, int min) {
  if (j < 4) {
    packed[j] = uint8_t(packed[j] | scale);
    packed[j + 4] = uint8_t(packed[j + 4] | min);
  } else {
    packed[j + 4] = uint8_t((scale & 15) | (min & 15) << 4);
    packed[j - 4] = uint8_t(packed[j - 4] | (scale >> 4) << 6);
    packed[j] = uint8_t(packed[j] | (min >> 4) << 6);
  }
}

}  // namespace inkling
