// The AVX2 build of the GGUF integer decode kernels (ggml_q8_rows.h), and the quantization of x
// they read: int8 per 32 columns, as llama.cpp's Q8_0.
#include "kernels/ggml_q8_rows.h"

#include "kernels/isa.h"

namespace inkling::kernels::detail {

bool ggml_quantize_x_avx2(const float* x, int64_t cols, const GgmlQ8Buffers& out) {
  const __m256 sign = _mm256_set1_ps(-0.0f), largest_finite = _mm256_set1_ps(0x1.fffffep127f);
  for (int64_t b = 0; b < cols / 32; ++b) {
    const float* xb = x + 32 * b;
    __m256 v[4], max_abs = _mm256_setzero_ps(), finite = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(xb + 8 * i);
      const __m256 magnitude = _mm256_andnot_ps(sign, v[i]);
      finite = _mm256_and_ps(finite, _mm256_cmp_ps(magnitude, largest_finite, _CMP_LE_OQ));
      max_abs = _mm256_max_ps(max_abs, magnitude);
    }
    if (_mm256_movemask_ps(finite) != 0xff) return false;  // an inf or NaN
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(max_abs), _mm256_extractf128_ps(max_abs, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    float largest = _mm_cvtss_f32(m);
    if (largest < kQ8SmallestLaneMax) largest = 0.0f;
    const float scale = largest / 127.0f;
    const __m256 inverse = _mm256_set1_ps(largest > 0.0f ? 127.0f / largest : 0.0f);
    __m256i q[4];
    for (int i = 0; i < 4; ++i)
      q[i] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[i], inverse), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    // packs interleave 128-bit lanes: bytes come out as columns 0-3, 8-11, 16-19, 24-27, 4-7, ...;
    // the dword permute puts them back in order.
    const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.digits + 32 * b),
                        _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    const int first = hsum_i32(_mm256_add_epi32(q[0], q[1])), second = hsum_i32(_mm256_add_epi32(q[2], q[3]));
    out.scales[b] = scale;
    out.sums16[2 * b] = scale * float(first);
    out.sums16[2 * b + 1] = scale * float(second);
    out.sums32[b] = scale * float(first + second);
  }
  ggml_x_eighths(cols, out);
  return true;
}

GgmlRowsQ8 ggml_rows_q8_avx2(GgmlType type) { return rows_q8_of<false>(type); }
GgmlRowsQ8 ggml_rows_q8_avx2_gathers(GgmlType type) { return rows_q8_of<true>(type); }

namespace {

// The types whose integer dots are vpdpbusd in the VNNI build: the 32-element blocks, Q4_K, Q5_K,
// Q6_K and IQ4_XS. The others (Q2_K, Q3_K and the IQ1 / IQ2 / IQ3 grids) dot through vpmaddubsw
// in both builds, and gcc's AVX-512 build of their grid loads is the slower one (IQ3_S 1.5x,
// IQ3_XXS 1.2x on Zen 4; docs/gguf.md), so they take the AVX2 build.
bool dots_through_vnni(GgmlType type) {
  switch (type) {
    case GgmlType::Q8_0:
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::IQ4_NL:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::IQ4_XS: return true;
    default: return false;
  }
}

// Gathers of the grid entries lose to scalar loads on Zen 4 (IQ3_S equal, IQ2_XXS and IQ3_XXS
// slower) and win on Intel, whose one shuffle port the scalar loads' inserts keep busy: on the
// Emerald Rapids guest, bench_kernels ggml_matvec on 2 threads, IQ3_S 5.7 -> 10.2 GiB/s,
// IQ3_XXS 5.4 -> 6.7, IQ2_XXS 4.0 -> 4.7, IQ2_XS 3.8 -> 4.5, IQ2_S 6.1 -> 7.2, IQ1_S 4.0 -> 4.4,
// IQ1_M level (docs/gguf.md).
bool grid_gathers() {
  static const bool intel_like = (__builtin_cpu_init(), !__builtin_cpu_is("amd"));
  return intel_like;
}

}  // namespace

GgmlRowsQ8 ggml_rows_q8(GgmlType type) {
  if (active_isa() == Isa::Avx512 && cpu_has_avx512_vnni() && dots_through_vnni(type))
    return cpu_has_avx512_vbmi() ? ggml_rows_q8_avx512vbmi(type) : ggml_rows_q8_avx512vnni(type);
  return grid_gathers() ? ggml_rows_q8_avx2_gathers(type) : ggml_rows_q8_avx2(type);
}

}  // namespace inkling::kernels::detail
