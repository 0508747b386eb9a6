// AVX2 + FMA + F16C: quantize_q8 for the AVX2 backend (backend.h), reached only through
// avx2_backend() after the CPU check.
#include <immintrin.h>

#include "kernels/backend.h"

namespace inkling::kernels::detail {
namespace {

// The 8 x 8 floats of v transposed in place: v[k][l] becomes v[l][k].
inline void transpose8(__m256* v) {
  const __m256 t0 = _mm256_unpacklo_ps(v[0], v[1]), t1 = _mm256_unpackhi_ps(v[0], v[1]);
  const __m256 t2 = _mm256_unpacklo_ps(v[2], v[3]), t3 = _mm256_unpackhi_ps(v[2], v[3]);
  const __m256 t4 = _mm256_unpacklo_ps(v[4], v[5]), t5 = _mm256_unpackhi_ps(v[4], v[5]);
  const __m256 t6 = _mm256_unpacklo_ps(v[6], v[7]), t7 = _mm256_unpackhi_ps(v[6], v[7]);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  v[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  v[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  v[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  v[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  v[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  v[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  v[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  v[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// quantize_q8_scalar's buffers, bit for bit, eight lanes (64 columns) at a time: the lanes'
// columns transposed so that vector k holds column k of each lane, then the scalar's operations
// lane-wise (IEEE divisions, round to nearest even, clamps that agree on ties). A decode step
// prepares every token's x, ~10 us each in scalar code at 2048 columns.
bool quantize(const float* x, int64_t chunks, int parts, const Q8Buffers& out) {
  const float levels = parts == 1 ? 127.0f : 127.0f * 65536.0f;
  const __m256 levels_v = _mm256_set1_ps(levels), minus_levels = _mm256_set1_ps(-levels);
  const __m256 largest_finite = _mm256_set1_ps(0x1.fffffep127f), smallest = _mm256_set1_ps(kQ8SmallestLaneMax);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256i low_byte = _mm256_set1_epi32(0xff);
  for (int64_t half_chunk = 0; half_chunk < 2 * chunks; ++half_chunk) {
    const float* xs = x + 64 * half_chunk;
    __m256 column[8];
    __m256 finite = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l) {
      column[l] = _mm256_loadu_ps(xs + 8 * l);  // lane l's columns, until transposed
      finite = _mm256_and_ps(finite, _mm256_cmp_ps(_mm256_andnot_ps(sign, column[l]), largest_finite, _CMP_LE_OQ));
    }
    if (_mm256_movemask_ps(finite) != 0xff) return false;  // an inf or NaN
    transpose8(column);
    __m256 max_abs = _mm256_setzero_ps();
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) max_abs = _mm256_max_ps(max_abs, _mm256_andnot_ps(sign, column[k]));
    max_abs = _mm256_and_ps(max_abs, _mm256_cmp_ps(max_abs, smallest, _CMP_GE_OQ));
    const __m256 scale = _mm256_div_ps(max_abs, levels_v);
    const __m256 inverse = _mm256_and_ps(_mm256_div_ps(levels_v, max_abs),
                                         _mm256_cmp_ps(max_abs, _mm256_setzero_ps(), _CMP_GT_OQ));
    __m256i level[8];
    __m256 x_hat[8];
    __m256i sum = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      const __m256 nearest =
          _mm256_round_ps(_mm256_mul_ps(column[k], inverse), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      level[k] = _mm256_cvttps_epi32(_mm256_min_ps(levels_v, _mm256_max_ps(minus_levels, nearest)));
      sum = _mm256_add_epi32(sum, level[k]);
      x_hat[k] = _mm256_mul_ps(scale, _mm256_cvtepi32_ps(level[k]));
    }
    transpose8(x_hat);
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l) _mm256_storeu_ps(out.x_hat + 64 * half_chunk + 8 * l, x_hat[l]);
    // Digits, lowest first: digit = the low byte as int8, rest = (rest - digit) / 256 (exact).
    // Byte j / 2 of lane l's word in the even (odd) half is its column j for even (odd) j; this
    // half chunk's 8 lanes are bytes 32 h .. 32 h + 31 of each half.
    const int64_t ch = half_chunk / 2, h = half_chunk % 2;
    int8_t* q = out.digits + 128 * parts * ch + 32 * h;
    for (int part = parts - 1; part >= 0; --part) {
      __m256i digit[8];
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        digit[k] = _mm256_srai_epi32(_mm256_slli_epi32(level[k], 24), 24);
        level[k] = _mm256_srai_epi32(_mm256_sub_epi32(level[k], digit[k]), 8);
      }
#pragma GCC unroll 2
      for (int odd = 0; odd < 2; ++odd) {
        const __m256i bytes = _mm256_or_si256(
            _mm256_or_si256(_mm256_and_si256(digit[odd], low_byte),
                            _mm256_slli_epi32(_mm256_and_si256(digit[odd + 2], low_byte), 8)),
            _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(digit[odd + 4], low_byte), 16),
                            _mm256_slli_epi32(digit[odd + 6], 24)));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 128 * part + 64 * odd), bytes);
      }
    }
    _mm256_storeu_ps(out.scales + 8 * half_chunk, scale);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.nvfp4_offsets + 8 * half_chunk),
                        _mm256_mullo_epi32(sum, _mm256_set1_epi32(-12)));
  }
  return true;
}

}  // namespace

bool quantize_q8_avx2(const float* x, int64_t chunks, int parts, const Q8Buffers& out) {
  return quantize(x, chunks, parts, out);
}

}  // namespace inkling::kernels::detail
