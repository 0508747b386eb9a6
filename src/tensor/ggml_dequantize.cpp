// Scalar dequantization of the ggml block types, written from their block layouts.
//
// Each decoder turns one block into its block_elements floats with the same float operations,
// in the same order, as ggml's reference (and gguf-py's numpy one): a scale is formed first (a
// product of the f16 super-scale and a small integer), then each value is scale * code, minus
// or plus an offset where the type has one. No fused multiply-adds: CMake builds this file with
// -ffp-contract=off, so the results are bit for bit ggml's on every compiler and ISA flag.
#include <cstring>

#include "tensor/dtype.h"
#include "tensor/ggml_types.h"

namespace inkling {
namespace {

#include "tensor/ggml_iq_grids.inc"

constexpr int kSuper = 256;  // elements of a K / IQ super-block

constexpr float kIq1Delta = 0.125f;

inline float half_at(const uint8_t* at) { return f16_to_f32(uint16_t(at[0] | at[1] << 8)); }
inline uint16_t u16_at(const uint8_t* at) { return uint16_t(at[0] | at[1] << 8); }
inline uint32_t u32_at(const uint8_t* at) {
  uint32_t value;
  std::memcpy(&value, at, 4);
  return value;
}

// The IQ2 / IQ3 sign bytes: 7 stored sign bits, the eighth chosen so the eight have even parity
// (ggml's ksigns_iq2xs table, computed instead of copied).
inline uint8_t sign_byte(uint32_t seven_bits) {
  const uint32_t bits = seven_bits & 127;
  return uint8_t(bits | (uint32_t(__builtin_parity(bits)) << 7));
}
inline float signed_by(float value, uint8_t signs, int bit) { return (signs >> bit) & 1 ? -value : value; }

// Byte j of a grid entry, as unsigned (IQ2 / IQ3 magnitudes) or signed (IQ1's -1 / 0 / 1).
inline float grid_byte(uint64_t entry, int j) { return float(uint8_t(entry >> (8 * j))); }
inline float grid_signed_byte(uint64_t entry, int j) { return float(int8_t(uint8_t(entry >> (8 * j)))); }

// ---- 32-element blocks ----

void q4_0(const uint8_t* b, float* y) {  // d, 16 bytes of nibbles (low: 0-15, high: 16-31), code - 8
  const float d = half_at(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * float((qs[j] & 15) - 8);
    y[j + 16] = d * float((qs[j] >> 4) - 8);
  }
}

void q4_1(const uint8_t* b, float* y) {  // d, m, nibbles: d * code + m
  const float d = half_at(b), m = half_at(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * float(qs[j] & 15) + m;
    y[j + 16] = d * float(qs[j] >> 4) + m;
  }
}

// Q5: the fifth bit of element j is bit j of a 32-bit word stored before the nibbles.
void q5_0(const uint8_t* b, float* y) {
  const float d = half_at(b);
  const uint32_t high = u32_at(b + 2);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    const int low_code = (qs[j] & 15) | int((high >> j) & 1) << 4;
    const int high_code = (qs[j] >> 4) | int((high >> (j + 16)) & 1) << 4;
    y[j] = d * float(low_code - 16);
    y[j + 16] = d * float(high_code - 16);
  }
}

void q5_1(const uint8_t* b, float* y) {
  const float d = half_at(b), m = half_at(b + 2);
  const uint32_t high = u32_at(b + 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 16; ++j) {
    const int low_code = (qs[j] & 15) | int((high >> j) & 1) << 4;
    const int high_code = (qs[j] >> 4) | int((high >> (j + 16)) & 1) << 4;
    y[j] = d * float(low_code) + m;
    y[j + 16] = d * float(high_code) + m;
  }
}

void q8_0(const uint8_t* b, float* y) {
  const float d = half_at(b);
  for (int j = 0; j < 32; ++j) y[j] = float(int8_t(b[2 + j])) * d;
}

void iq4_nl(const uint8_t* b, float* y) {
  const float d = half_at(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * float(kIq4Values[qs[j] & 15]);
    y[j + 16] = d * float(kIq4Values[qs[j] >> 4]);
  }
}

// ---- K quants: 256 elements in 16 or 8 sub-blocks, each with its own small scale ----

// Q2_K: 16 scale bytes (low nibble: scale, high: min), 64 bytes of 2-bit codes, d, dmin. The
// codes of 128 elements share 32 bytes: element 32 s + p of that half is bits 2s..2s+1 of byte p.
void q2_k(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* qs = b + 16;
  const float d = half_at(b + 80), dmin = half_at(b + 82);
  for (int e = 0; e < kSuper; ++e) {
    const int half = e / 128, shift = 2 * ((e % 128) / 32), byte = 32 * half + e % 32;
    const uint8_t scale = scales[e / 16];
    const float dl = d * float(scale & 15), ml = dmin * float(scale >> 4);
    y[e] = dl * float((qs[byte] >> shift) & 3) - ml;
  }
}

// Q3_K: a 32-byte mask of high bits (element e: bit e / 32 of byte e % 32; a clear bit subtracts 4),
// 2-bit codes laid out as Q2_K's, 16 signed 6-bit scales in 12 bytes (low nibbles in bytes 0-7,
// the two high bits in bytes 8-11), d.
void q3_k(const uint8_t* b, float* y) {
  const uint8_t* mask = b;
  const uint8_t* qs = b + 32;
  const uint8_t* packed = b + 96;
  const float d = half_at(b + 108);
  float dl[16];
  for (int k = 0; k < 16; ++k) {
    const int low = (packed[k % 8] >> (4 * (k / 8))) & 15;
    const int high = (packed[8 + k % 4] >> (2 * (k / 4))) & 3;
    dl[k] = d * float((low | high << 4) - 32);
  }
  for (int e = 0; e < kSuper; ++e) {
    const int half = e / 128, shift = 2 * ((e % 128) / 32), byte = 32 * half + e % 32;
    const int code = (qs[byte] >> shift) & 3;
    const int high_bit = (mask[e % 32] >> (e / 32)) & 1;
    y[e] = dl[e / 16] * float(code - (high_bit ? 0 : 4));
  }
}

// Elements of sub-block g (32 of them) take nibble g % 2 of bytes 32 (g / 2) .. + 31.
void q4_k(const uint8_t* b, float* y) {
  const float d = half_at(b), dmin = half_at(b + 2);
  const uint8_t* qs = b + 16;
  for (int g = 0; g < 8; ++g) {
    int scale, min;
    k_scale_min(b + 4, g, scale, min);
    const float dl = d * float(scale), ml = dmin * float(min);
    for (int p = 0; p < 32; ++p) y[32 * g + p] = dl * float((qs[32 * (g / 2) + p] >> (4 * (g % 2))) & 15) - ml;
  }
}

// Q5_K adds a 32-byte plane of fifth bits: element p of sub-block g has bit g of byte p.
void q5_k(const uint8_t* b, float* y) {
  const float d = half_at(b), dmin = half_at(b + 2);
  const uint8_t* high = b + 16;
  const uint8_t* qs = b + 48;
  for (int g = 0; g < 8; ++g) {
    int scale, min;
    k_scale_min(b + 4, g, scale, min);
    const float dl = d * float(scale), ml = dmin * float(min);
    for (int p = 0; p < 32; ++p) {
      const int code = ((qs[32 * (g / 2) + p] >> (4 * (g % 2))) & 15) | ((high[p] >> g) & 1) << 4;
      y[32 * g + p] = dl * float(code) - ml;
    }
  }
}

// Q6_K: 128 bytes of low nibbles, 64 of high 2-bit pairs, 16 signed 8-bit scales, d. In each half
// of 128 elements, element i takes nibble i / 64 of low byte i % 64 and pair i / 32 of high byte i % 32.
void q6_k(const uint8_t* b, float* y) {
  const uint8_t* low = b;
  const uint8_t* high = b + 128;
  const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192);
  const float d = half_at(b + 208);
  for (int e = 0; e < kSuper; ++e) {
    const int half = e / 128, i = e % 128;
    const int code_low = (low[64 * half + i % 64] >> (4 * (i / 64))) & 15;
    const int code_high = (high[32 * half + i % 32] >> (2 * (i / 32))) & 3;
    y[e] = d * float(scales[e / 16]) * float((code_low | code_high << 4) - 32);
  }
}

// ---- IQ types: codes index fixed grids of 8 (or 4) magnitudes, with separate signs ----

// IQ2_XXS: per 32 elements, 8 bytes: four grid indices, then a word of four 7-bit sign groups
// and a 4-bit scale in its top bits.
void iq2_xxs(const uint8_t* b, float* y) {
  const float d = half_at(b);
  for (int ib = 0; ib < 8; ++ib, y += 32) {
    const uint8_t* group = b + 2 + 8 * ib;
    const uint32_t meta = u32_at(group + 4);
    const float db = d * (0.5f + float(meta >> 28)) * 0.25f;
    for (int l = 0; l < 4; ++l) {
      const uint64_t entry = kIq2xxsGrid[group[l]];
      const uint8_t signs = sign_byte(meta >> (7 * l));
      for (int j = 0; j < 8; ++j) y[8 * l + j] = signed_by(db * grid_byte(entry, j), signs, j);
    }
  }
}

// IQ2_XS: 32 16-bit codes (9-bit grid index, 7 sign bits), then 8 bytes of two 4-bit scales.
void iq2_xs(const uint8_t* b, float* y) {
  const float d = half_at(b);
  const uint8_t* scales = b + 66;
  for (int ib = 0; ib < 8; ++ib, y += 32) {
    const float db[2] = {d * (0.5f + float(scales[ib] & 15)) * 0.25f, d * (0.5f + float(scales[ib] >> 4)) * 0.25f};
    for (int l = 0; l < 4; ++l) {
      const uint16_t code = u16_at(b + 2 + 2 * (4 * ib + l));
      const uint64_t entry = kIq2xsGrid[code & 511];
      const uint8_t signs = sign_byte(code >> 9);
      for (int j = 0; j < 8; ++j) y[8 * l + j] = signed_by(db[l / 2] * grid_byte(entry, j), signs, j);
    }
  }
}

// IQ2_S: 32 low index bytes, 32 sign bytes (one per 8 elements, all 8 bits stored), 8 bytes of
// index high bits (2 per group of 8), 8 bytes of two 4-bit scales.
void iq2_s(const uint8_t* b, float* y) {
  const float d = half_at(b);
  const uint8_t* low = b + 2;
  const uint8_t* signs = b + 34;
  const uint8_t* high = b + 66;
  const uint8_t* scales = b + 74;
  for (int ib = 0; ib < 8; ++ib, y += 32) {
    const float db[2] = {d * (0.5f + float(scales[ib] & 15)) * 0.25f, d * (0.5f + float(scales[ib] >> 4)) * 0.25f};
    for (int l = 0; l < 4; ++l) {
      const int index = low[4 * ib + l] | ((high[ib] >> (2 * l)) & 3) << 8;
      const uint64_t entry = kIq2sGrid[index];
      for (int j = 0; j < 8; ++j) y[8 * l + j] = signed_by(db[l / 2] * grid_byte(entry, j), signs[4 * ib + l], j);
    }
  }
}

// IQ3_XXS: 64 grid indices (4 magnitudes each), then per 32 elements a word like IQ2_XXS's.
void iq3_xxs(const uint8_t* b, float* y) {
  const float d = half_at(b);
  const uint8_t* indices = b + 2;
  for (int ib = 0; ib < 8; ++ib, y += 32) {
    const uint32_t meta = u32_at(b + 66 + 4 * ib);
    const float db = d * (0.5f + float(meta >> 28)) * 0.5f;
    for (int l = 0; l < 4; ++l) {
      const uint8_t signs = sign_byte(meta >> (7 * l));
      const uint32_t first = kIq3xxsGrid[indices[8 * ib + 2 * l]], second = kIq3xxsGrid[indices[8 * ib + 2 * l + 1]];
      for (int j = 0; j < 4; ++j) {
        y[8 * l + j] = signed_by(db * grid_byte(first, j), signs, j);
        y[8 * l + 4 + j] = signed_by(db * grid_byte(second, j), signs, j + 4);
      }
    }
  }
}

// IQ3_S: 64 low index bytes, 8 bytes of ninth index bits (index k: bit k % 8 of byte k / 8),
// 32 sign bytes, 4 bytes of two 4-bit odd scales (1 + 2 s).
void iq3_s(const uint8_t* b, float* y) {
  const float d = half_at(b);
  const uint8_t* low = b + 2;
  const uint8_t* high = b + 66;
  const uint8_t* signs = b + 74;
  const uint8_t* scales = b + 106;
  for (int ib = 0; ib < 8; ++ib, y += 32) {
    const float db = d * float(1 + 2 * ((scales[ib / 2] >> (4 * (ib % 2))) & 15));
    for (int l = 0; l < 4; ++l) {
      const int k = 8 * ib + 2 * l;
      const uint32_t first = kIq3sGrid[low[k] | ((high[k / 8] >> (k % 8)) & 1) << 8];
      const uint32_t second = kIq3sGrid[low[k + 1] | ((high[(k + 1) / 8] >> ((k + 1) % 8)) & 1) << 8];
      const uint8_t sign = signs[4 * ib + l];
      for (int j = 0; j < 4; ++j) {
        y[8 * l + j] = signed_by(db * grid_byte(first, j), sign, j);
        y[8 * l + 4 + j] = signed_by(db * grid_byte(second, j), sign, j + 4);
      }
    }
  }
}

// IQ1_S: 32 low index bytes, then per 32 elements a 16-bit word: four 3-bit index tops, a 3-bit
// odd scale, and the sign of the shift (+-1/8) added to the grid's -1 / 0 / 1.
void iq1_s(const uint8_t* b, float* y) {
  const float d = half_at(b);
  const uint8_t* low = b + 2;
  for (int ib = 0; ib < 8; ++ib, y += 32) {
    const uint16_t meta = u16_at(b + 34 + 2 * ib);
    const float dl = d * float(2 * ((meta >> 12) & 7) + 1);
    const float delta = meta & 0x8000 ? -kIq1Delta : kIq1Delta;
    for (int l = 0; l < 4; ++l) {
      const uint64_t entry = kIq1sGrid[low[4 * ib + l] | ((meta >> (3 * l)) & 7) << 8];
      for (int j = 0; j < 8; ++j) y[8 * l + j] = dl * (grid_signed_byte(entry, j) + delta);
    }
  }
}

// IQ1_M: 32 low index bytes, 16 bytes of (3 index bits + a shift sign) per 8 elements, then four
// 16-bit words holding twelve 3-bit scales (two per 32 elements) and, in their top nibbles, the
// f16 super-scale.
void iq1_m(const uint8_t* b, float* y) {
  const uint8_t* low = b;
  const uint8_t* high = b + 32;
  uint16_t words[4];
  for (int i = 0; i < 4; ++i) words[i] = u16_at(b + 48 + 2 * i);
  const uint16_t d_bits = uint16_t((words[0] >> 12) | ((words[1] >> 8) & 0x00f0) | ((words[2] >> 4) & 0x0f00) |
                                   (words[3] & 0xf000));
  const float d = f16_to_f32(d_bits);
  for (int ib = 0; ib < 8; ++ib, y += 32) {
    const uint16_t word = words[ib / 2];
    const int shift = 6 * (ib % 2);
    const float dl[2] = {d * float(2 * ((word >> shift) & 7) + 1), d * float(2 * ((word >> (shift + 3)) & 7) + 1)};
    for (int l = 0; l < 4; ++l) {
      const uint8_t nibble = uint8_t(high[2 * ib + l / 2] >> (4 * (l % 2)));
      const uint64_t entry = kIq1sGrid[low[4 * ib + l] | (nibble & 7) << 8];
      const float delta = nibble & 8 ? -kIq1Delta : kIq1Delta;
      for (int j = 0; j < 8; ++j) y[8 * l + j] = dl[l / 2] * (grid_signed_byte(entry, j) + delta);
    }
  }
}

// IQ4_XS: d, 16 bits of scale tops (2 per 32 elements), 4 bytes of scale nibbles, 128 bytes of
// IQ4 codes (per 32 elements: 16 bytes, low nibbles first).
void iq4_xs(const uint8_t* b, float* y) {
  const float d = half_at(b);
  const uint16_t tops = u16_at(b + 2);
  const uint8_t* nibbles = b + 4;
  const uint8_t* qs = b + 8;
  for (int ib = 0; ib < 8; ++ib, y += 32) {
    const int scale = ((nibbles[ib / 2] >> (4 * (ib % 2))) & 15) | ((tops >> (2 * ib)) & 3) << 4;
    const float dl = d * float(scale - 32);
    for (int j = 0; j < 16; ++j) {
      y[j] = dl * float(kIq4Values[qs[16 * ib + j] & 15]);
      y[j + 16] = dl * float(kIq4Values[qs[16 * ib + j] >> 4]);
    }
  }
}

using BlockDecoder = void (*)(const uint8_t*, float*);

BlockDecoder decoder_for(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0: return q4_0;
    case GgmlType::Q4_1: return q4_1;
    case GgmlType::Q5_0: return q5_0;
    case GgmlType::Q5_1: return q5_1;
    case GgmlType::Q8_0: return q8_0;
    case GgmlType::Q2_K: return q2_k;
    case GgmlType::Q3_K: return q3_k;
    case GgmlType::Q4_K: return q4_k;
    case GgmlType::Q5_K: return q5_k;
    case GgmlType::Q6_K: return q6_k;
    case GgmlType::IQ2_XXS: return iq2_xxs;
    case GgmlType::IQ2_XS: return iq2_xs;
    case GgmlType::IQ2_S: return iq2_s;
    case GgmlType::IQ3_XXS: return iq3_xxs;
    case GgmlType::IQ3_S: return iq3_s;
    case GgmlType::IQ1_S: return iq1_s;
    case GgmlType::IQ1_M: return iq1_m;
    case GgmlType::IQ4_NL: return iq4_nl;
    case GgmlType::IQ4_XS: return iq4_xs;
    default: return nullptr;
  }
}

}  // namespace

void dequantize_ggml_row(GgmlType type, const uint8_t* blocks, float* out, int64_t elements) {
  switch (type) {
    case GgmlType::F32: std::memcpy(out, blocks, size_t(elements) * 4); return;
    case GgmlType::F16:
      for (int64_t i = 0; i < elements; ++i) out[i] = half_at(blocks + 2 * i);
      return;
    case GgmlType::BF16:
      for (int64_t i = 0; i < elements; ++i) out[i] = bf16_to_f32(u16_at(blocks + 2 * i));
      return;
    default: break;
  }
  const BlockDecoder decode = decoder_for(type);
  if (!decode) return;  // not dequantizable: the caller's precondition
  const GgmlTypeInfo& info = ggml_type_info(type);
  for (int64_t block = 0; block < elements / info.block_elements; ++block)
    decode(blocks + block * info.block_bytes, out + block * info.block_elements);
}

}  // namespace inkling
