// AVX2 decode kernels for the ggml block types of the common llama.cpp files (Q4_K_M: Q4_K,
// Q6_K, Q8_0 (and Q5_K in Q5_K_M); IQ4_XS): row . x with each block decoded in registers.
//
// The arithmetic is the scalar reference's (ggml_dequantize.cpp) regrouped: a sub-block with one
// scale s and offset m contributes s * (codes . x) - m * sum(x) instead of sum((s * code - m) * x),
// in f32 with FMAs and 8 lanes. Activations stay f32 (llama.cpp quantizes them to 8 bits instead),
// so the results differ from the reference's dequantize-then-dot only by float reassociation.
#include <immintrin.h>

#include "kernels/backend.h"

namespace inkling::kernels::detail {
namespace {

#include "kernels/simd_common.h"
#include "kernels/simd_avx2.h"

inline float half_at(const uint8_t* at) { return _cvtsh_ss(uint16_t(at[0] | at[1] << 8)); }

inline __m128i load8_bytes(const uint8_t* p) { return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)); }

// 8 signed bytes as floats.
inline __m256 i8_to_f32(__m128i bytes) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)); }

// The weight stream is read once per matvec: fetch a few KiB ahead, past the caches it would
// only evict from.
inline void prefetch_block(const uint8_t* block, int bytes) {
  for (int line = 0; line < bytes; line += 64)
    prefetch_stream(reinterpret_cast<const char*>(block) + kRowPrefetchBytes + line);
}

// Q8_0: d (f16), 32 signed codes.
float dot_q8_0(const uint8_t* row, const float* x, int64_t blocks) {
  constexpr int kBytes = 34;
  __m256 total = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b, x += 32) {
    const uint8_t* block = row + b * kBytes;
    if (b % 2 == 0) prefetch_block(block, 2 * kBytes);
    const uint8_t* codes = block + 2;
    __m256 acc = _mm256_mul_ps(i8_to_f32(load8_bytes(codes)), _mm256_loadu_ps(x));
    acc = _mm256_fmadd_ps(i8_to_f32(load8_bytes(codes + 8)), _mm256_loadu_ps(x + 8), acc);
    acc = _mm256_fmadd_ps(i8_to_f32(load8_bytes(codes + 16)), _mm256_loadu_ps(x + 16), acc);
    acc = _mm256_fmadd_ps(i8_to_f32(load8_bytes(codes + 24)), _mm256_loadu_ps(x + 24), acc);
    total = _mm256_fmadd_ps(_mm256_set1_ps(half_at(block)), acc, total);
  }
  return reduce(total);
}

inline __m256 sum32(const float* x) {
  return _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(x), _mm256_loadu_ps(x + 8)),
                       _mm256_add_ps(_mm256_loadu_ps(x + 16), _mm256_loadu_ps(x + 24)));
}

// Q4_K (kHighBits = false) and Q5_K (true): d, dmin (f16), 12 bytes of 6-bit scales and mins,
// [Q5_K: 32 bytes of fifth bits,] 128 bytes of nibbles; sub-block g (32 elements) takes nibble
// g % 2 of bytes 32 (g / 2) .. + 31 [and bit g of the fifth-bit bytes].
template <bool kHighBits>
float dot_q45_k(const uint8_t* row, const float* x, int64_t blocks) {
  constexpr int kBytes = kHighBits ? 176 : 144;
  const __m256i low_nibble = _mm256_set1_epi32(15), one = _mm256_set1_epi32(1);
  __m256 scaled = _mm256_setzero_ps(), offsets = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b, x += 256) {
    const uint8_t* block = row + b * kBytes;
    prefetch_block(block, kBytes);
    const float d = half_at(block), dmin = half_at(block + 2);
    const uint8_t* high = block + 16;
    const uint8_t* qs = block + (kHighBits ? 48 : 16);
    for (int pair = 0; pair < 4; ++pair) {
      const int g = 2 * pair;
      __m256 low_dot = _mm256_setzero_ps(), high_dot = _mm256_setzero_ps();
#pragma GCC unroll 4
      for (int p = 0; p < 32; p += 8) {
        const __m256i bytes = _mm256_cvtepu8_epi32(load8_bytes(qs + 32 * pair + p));
        __m256i low = _mm256_and_si256(bytes, low_nibble), up = _mm256_srli_epi32(bytes, 4);
        if constexpr (kHighBits) {
          const __m256i bits = _mm256_cvtepu8_epi32(load8_bytes(high + p));
          low = _mm256_or_si256(low, _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(bits, g), one), 4));
          up = _mm256_or_si256(up, _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(bits, g + 1), one), 4));
        }
        low_dot = _mm256_fmadd_ps(_mm256_cvtepi32_ps(low), _mm256_loadu_ps(x + 32 * g + p), low_dot);
        high_dot = _mm256_fmadd_ps(_mm256_cvtepi32_ps(up), _mm256_loadu_ps(x + 32 * (g + 1) + p), high_dot);
      }
      int scale, min;
      k_scale_min(block + 4, g, scale, min);
      scaled = _mm256_fmadd_ps(_mm256_set1_ps(d * float(scale)), low_dot, scaled);
      offsets = _mm256_fmadd_ps(_mm256_set1_ps(dmin * float(min)), sum32(x + 32 * g), offsets);
      k_scale_min(block + 4, g + 1, scale, min);
      scaled = _mm256_fmadd_ps(_mm256_set1_ps(d * float(scale)), high_dot, scaled);
      offsets = _mm256_fmadd_ps(_mm256_set1_ps(dmin * float(min)), sum32(x + 32 * (g + 1)), offsets);
    }
  }
  return reduce(_mm256_sub_ps(scaled, offsets));
}

// Q6_K: 128 bytes of low nibbles, 64 of 2-bit high pairs, 16 signed scales (one per 16
// elements), d (f16). In half h of 128 elements, element i takes nibble i / 64 of low byte
// 64 h + i % 64 and pair i / 32 of high byte 32 h + i % 32; its value is d * scale * (code - 32).
float dot_q6_k(const uint8_t* row, const float* x, int64_t blocks) {
  constexpr int kBytes = 210;
  const __m256i low_nibble = _mm256_set1_epi32(15), two_bits = _mm256_set1_epi32(3), bias = _mm256_set1_epi32(32);
  __m256 total = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* block = row + b * kBytes;
    prefetch_block(block, kBytes);
    const int8_t* scales = reinterpret_cast<const int8_t*>(block + 192);
    const float d = half_at(block + 208);
    for (int half = 0; half < 2; ++half) {
      const uint8_t* low = block + 64 * half;
      const uint8_t* high = block + 128 + 32 * half;
      const float* xh = x + 256 * b + 128 * half;
#pragma GCC unroll 2
      for (int group = 0; group < 8; ++group) {  // 16 elements each
        __m256 acc = _mm256_setzero_ps();
#pragma GCC unroll 2
        for (int i = 16 * group; i < 16 * group + 16; i += 8) {
          const __m256i low_codes = _mm256_and_si256(
              _mm256_srli_epi32(_mm256_cvtepu8_epi32(load8_bytes(low + i % 64)), 4 * (i / 64)), low_nibble);
          const __m256i high_codes = _mm256_and_si256(
              _mm256_srli_epi32(_mm256_cvtepu8_epi32(load8_bytes(high + i % 32)), 2 * (i / 32)), two_bits);
          const __m256i codes = _mm256_sub_epi32(_mm256_or_si256(low_codes, _mm256_slli_epi32(high_codes, 4)), bias);
          acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(codes), _mm256_loadu_ps(xh + i), acc);
        }
        total = _mm256_fmadd_ps(_mm256_set1_ps(d * float(scales[8 * half + group])), acc, total);
      }
    }
  }
  return reduce(total);
}

// IQ4_XS: d (f16), 16 bits of scale tops (2 per 32 elements), 4 bytes of scale nibbles, 128
// bytes of IQ4 codes (per 32 elements, 16 bytes: low nibbles are elements 0-15, high 16-31).
// A code becomes its grid value with one byte shuffle of 16 codes.
float dot_iq4_xs(const uint8_t* row, const float* x, int64_t blocks) {
  constexpr int kBytes = 136;
  const __m128i grid = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4Values));
  const __m128i low_nibble = _mm_set1_epi8(15);
  __m256 total = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b, x += 256) {
    const uint8_t* block = row + b * kBytes;
    prefetch_block(block, kBytes);
    const float d = half_at(block);
    const uint16_t tops = uint16_t(block[2] | block[3] << 8);
    for (int ib = 0; ib < 8; ++ib) {
      const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 8 + 16 * ib));
      const __m128i first = _mm_shuffle_epi8(grid, _mm_and_si128(codes, low_nibble));
      const __m128i second = _mm_shuffle_epi8(grid, _mm_and_si128(_mm_srli_epi16(codes, 4), low_nibble));
      const float* xb = x + 32 * ib;
      __m256 acc = _mm256_mul_ps(i8_to_f32(first), _mm256_loadu_ps(xb));
      acc = _mm256_fmadd_ps(i8_to_f32(_mm_srli_si128(first, 8)), _mm256_loadu_ps(xb + 8), acc);
      acc = _mm256_fmadd_ps(i8_to_f32(second), _mm256_loadu_ps(xb + 16), acc);
      acc = _mm256_fmadd_ps(i8_to_f32(_mm_srli_si128(second, 8)), _mm256_loadu_ps(xb + 24), acc);
      const int scale = ((block[4 + ib / 2] >> (4 * (ib % 2))) & 15) | ((tops >> (2 * ib)) & 3) << 4;
      total = _mm256_fmadd_ps(_mm256_set1_ps(d * float(scale - 32)), acc, total);
    }
  }
  return reduce(total);
}

}  // namespace

GgmlRowDot ggml_row_dot_avx2(GgmlType type) {
  switch (type) {
    case GgmlType::Q8_0: return dot_q8_0;
    case GgmlType::Q4_K: return dot_q45_k<false>;
    case GgmlType::Q5_K: return dot_q45_k<true>;
    case GgmlType::Q6_K: return dot_q6_k;
    case GgmlType::IQ4_XS: return dot_iq4_xs;
    default: return nullptr;
  }
}

}  // namespace inkling::kernels::detail
