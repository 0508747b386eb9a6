// Internal: AVX2 helpers shared by the _avx2.cpp files. Included inside an anonymous namespace,
// after simd_common.h, by files compiled with AVX2 flags only (see simd_common.h).

// The sum of the 8 lanes, always in the same order (a row's result must not depend on the file
// that computed it).
__attribute__((always_inline)) inline float reduce(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
