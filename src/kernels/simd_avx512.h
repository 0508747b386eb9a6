// Internal: AVX-512 helpers shared by the _avx512*.cpp files. Included inside an anonymous
// namespace, after simd_common.h, by files compiled with AVX-512 flags only (see simd_common.h).

inline __mmask16 tail_mask(int64_t count) { return __mmask16((1u << count) - 1u); }

// permutex2var indices that zip the 16 low-nibble values (even columns) with the 16 high-nibble
// values (odd columns) of 16 packed bytes back into column order: columns 0-15, then 16-31.
inline __m512i nibble_zip_lo() {
  return _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
}
inline __m512i nibble_zip_hi() {
  return _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
}

// 16 affine parameters (groups g .. g+15, fewer under `mask`) as f32.
inline __m512 load_params16(const uint8_t* p, DType dtype, int64_t g, __mmask16 mask) {
  if (dtype == DType::BF16) {
    __m256i bits = _mm256_maskz_loadu_epi16(mask, p + 2 * g);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
  }
  if (dtype == DType::F16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, p + 2 * g));
  return _mm512_maskz_loadu_ps(mask, reinterpret_cast<const float*>(p) + g);
}

// sum_g bias[g] * sum(x over group g): the bias half of the affine dot product.
inline float affine_bias_dot(const uint8_t* biases, DType dtype, const float* group_sums,
                             int64_t groups) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; g += 16) {
    __mmask16 mask = groups - g >= 16 ? __mmask16(0xffff) : tail_mask(groups - g);
    acc = _mm512_fmadd_ps(load_params16(biases, dtype, g, mask),
                          _mm512_maskz_loadu_ps(mask, group_sums + g), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

// 16 E4M3 bytes (fewer under `mask`) to f32 in registers: exponent and mantissa move to their
// f32 positions and one multiply by 2^120 re-biases, subnormals included.
inline __m512 e4m3x16_to_f32(const uint8_t* bytes, __mmask16 mask) {
  const __m512i d = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(mask, bytes));
  const __m512i magnitude = _mm512_and_si512(d, _mm512_set1_epi32(0x7f));
  __m512 value = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(magnitude, 20)),
                               _mm512_set1_ps(0x1p120f));
  const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(d, _mm512_set1_epi32(0x80)), 24);
  value = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(value), sign));
  const __mmask16 nan = _mm512_cmpeq_epi32_mask(magnitude, _mm512_set1_epi32(0x7f));
  return _mm512_mask_mov_ps(value, nan, _mm512_set1_ps(__builtin_nanf("")));
}

// e4m3x16_to_f32 for bytes in [0, 0x7E] (no sign, no NaN; vnni_rows.h checks each row for it):
// 3 vector ops instead of 9.
inline __m512 e4m3x16_nonnegative_to_f32(const uint8_t* bytes, __mmask16 mask) {
  const __m512i d = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(mask, bytes));
  return _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(d, 20)), _mm512_set1_ps(0x1p120f));
}
