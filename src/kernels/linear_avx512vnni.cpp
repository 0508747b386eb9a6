// 4-bit matvec with VNNI (vpdpbusd): AVX-512 + AVX512_VNNI, reached only after
// cpu_has_avx512_vnni() and only with PreparedX::x_q8 (built by linear.cpp's prepare()).
//
// The f32 decode of 4-bit codes costs ~3 instructions per 16 codes and caps a core at ~12 GB/s.
// Here x is pre-quantized to int8 per 8 columns (backend.h), and a 64-byte load of 128 codes
// becomes two byte vectors that vpdpbusd multiplies with x directly. 32-bit lane l of the
// accumulator holds columns 8 l .. 8 l + 7, which lie in one affine group (group_size % 8 == 0)
// or NVFP4 block, so each 128 columns end with one int -> float conversion and one FMA by
// (weight scale of the lane) * (x scale of the lane). Decode is memory-bound only if this loop
// outruns DRAM, so every instruction per 64 bytes counts (~10 for affine).
//
// Affine: W . x = sum_g scale_g * (codes_g . x^_g) + bias_g * sum(x^_g), with x^ the quantized x
// throughout, so the result is exactly W . x^ (no cancellation error from the bias split). The
// high nibbles are used in place (byte & 0xF0 = 16 * code, still an unsigned byte), and the
// exact factor 16 is shifted out of the integer dot.
// NVFP4: vpdpbusd needs unsigned weights: the nibble is looked up (vpshufb) as 2 * fp4 + 12 in
// [0, 24], and 12 * sum(q) per lane (from x_q8_sum) is subtracted.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "kernels/backend.h"

namespace inkling::kernels::detail {
namespace {

#include "kernels/simd_common.h"
#include "kernels/simd_avx512.h"

// One row at a time: each thread then reads a single stream strictly in order, which the
// prefetchers follow best. Cold (decode) matvecs stream 1.4-1.9x faster than with 4-row blocks
// (bench_kernels matvec/q4g64/expert_1024x2048: 12.0 -> 22.6 GB/s) although cache-resident
// throughput drops ~12% (x is reloaded per row).
// Software prefetch 2 KiB ahead in the code stream, and the scales (and biases) of the row two
// ahead: the hardware prefetchers restart at every 4 KiB page and at every expert matrix, and
// decode is a sequence of short streams (A/B, 8 alternating runs: expert matvec +10%, 2048 x 8192
// +5%; 4 KiB ahead measured the same).
constexpr int64_t kPrefetchBytes = 2048;
constexpr int64_t kPrefetchRows = 2;

struct ChunkX {
  __m512i even, odd;
  __m512 scale;
};

inline ChunkX load_chunk_x(const PreparedX& px, int64_t ch) {
  const int8_t* q = px.x_q8 + 128 * ch;
  return {_mm512_loadu_si512(q), _mm512_loadu_si512(q + 64), _mm512_loadu_ps(px.x_q8_scale + 16 * ch)};
}

float affine4_row(const WeightMatrix& w, int64_t r, const PreparedX& px) {
  const uint8_t* codes = w.data + r * w.row_stride;
  const uint8_t* scales = w.scales + r * w.scales_row_stride;
  const uint8_t* biases = w.biases + r * w.biases_row_stride;
  __m512 acc = _mm512_setzero_ps(), scale_block = _mm512_setzero_ps();
  const __m512i nibble = _mm512_set1_epi8(15);
  const int64_t chunks = w.cols / 128, groups = w.cols / w.group_size;
  const int groups_per_chunk = int(128 / w.group_size);  // 1 .. 16
  // Lane l of a chunk belongs to group 8 l / group_size of the chunk.
  const __m512i lane_group = _mm512_srli_epi32(
      _mm512_setr_epi32(0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120),
      __builtin_ctz(unsigned(w.group_size)));
  _mm_prefetch(reinterpret_cast<const char*>(scales + kPrefetchRows * w.scales_row_stride), _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(biases + kPrefetchRows * w.biases_row_stride), _MM_HINT_T0);
  for (int64_t ch = 0; ch < chunks; ++ch) {
    _mm_prefetch(reinterpret_cast<const char*>(codes + 64 * ch + kPrefetchBytes), _MM_HINT_T0);
    const ChunkX x = load_chunk_x(px, ch);
    const int64_t first_group = ch * groups_per_chunk;
    if (first_group % 16 == 0) {  // the scales of the next 16 groups, converted once
      const int64_t left = groups - first_group;
      const __mmask16 mask = left >= 16 ? __mmask16(0xffff) : tail_mask(left);
      scale_block = load_params16(scales, w.scale_dtype, first_group, mask);
    }
    const __m512i lane_scale =
        _mm512_add_epi32(lane_group, _mm512_set1_epi32(int(first_group % 16)));
    const __m512i v = _mm512_loadu_si512(codes + 64 * ch);
    const __m512i low = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(v, nibble), x.even);
    const __m512i high16 =
        _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_andnot_si512(nibble, v), x.odd);
    const __m512 dots = _mm512_cvtepi32_ps(_mm512_add_epi32(low, _mm512_srai_epi32(high16, 4)));
    const __m512 lane_scales = _mm512_mul_ps(_mm512_permutexvar_ps(lane_scale, scale_block), x.scale);
    acc = _mm512_fmadd_ps(dots, lane_scales, acc);
  }
  // The bias term goes into the same accumulator: one horizontal sum per row, not two.
  for (int64_t g = 0; g < groups; g += 16) {
    const __mmask16 mask = groups - g >= 16 ? __mmask16(0xffff) : tail_mask(groups - g);
    acc = _mm512_fmadd_ps(load_params16(biases, w.scale_dtype, g, mask),
                          _mm512_maskz_loadu_ps(mask, px.group_sums_q8 + g), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

float nvfp4_row(const WeightMatrix& w, int64_t r, const PreparedX& px) {
  const uint8_t* codes = w.data + r * w.row_stride;
  const uint8_t* scales = w.scales + r * w.scales_row_stride;
  __m512 acc = _mm512_setzero_ps(), block_scales = _mm512_setzero_ps();
  // 2 * fp4 + 12 for each E2M1 code, in every 128-bit lane for vpshufb.
  const __m512i biased_values = _mm512_broadcast_i32x4(
      _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
  const __m512i nibble = _mm512_set1_epi8(15);
  const int64_t chunks = w.cols / 128;
  _mm_prefetch(reinterpret_cast<const char*>(scales + kPrefetchRows * w.scales_row_stride), _MM_HINT_T0);
  for (int64_t ch = 0; ch < chunks; ++ch) {
    _mm_prefetch(reinterpret_cast<const char*>(codes + 64 * ch + kPrefetchBytes), _MM_HINT_T0);
    const ChunkX x = load_chunk_x(px, ch);
    // 12 * sum(q) per lane: the +12 of the weights, taken back out.
    const __m512i sums = _mm512_loadu_si512(px.x_q8_sum + 16 * ch);
    const __m512i offset = _mm512_add_epi32(_mm512_slli_epi32(sums, 3), _mm512_slli_epi32(sums, 2));
    if ((ch & 1) == 0) {  // the 16 block scales of this chunk and the next
      const __mmask16 mask = ch + 1 < chunks ? __mmask16(0xffff) : __mmask16(0xff);
      block_scales = e4m3x16_to_f32(scales + 8 * ch, mask);
    }
    // Lane l covers columns 8 l .. 8 l + 7: block l / 2 of this chunk.
    const __m512i spread =
        _mm512_add_epi32(_mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7),
                         _mm512_set1_epi32(int(8 * (ch & 1))));
    const __m512i v = _mm512_loadu_si512(codes + 64 * ch);
    const __m512i low = _mm512_shuffle_epi8(biased_values, _mm512_and_si512(v, nibble));
    const __m512i high =
        _mm512_shuffle_epi8(biased_values, _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble));
    const __m512i both =
        _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), low, x.even), high, x.odd);
    const __m512 dots = _mm512_cvtepi32_ps(_mm512_sub_epi32(both, offset));
    const __m512 lane_scales = _mm512_mul_ps(_mm512_permutexvar_ps(spread, block_scales), x.scale);
    acc = _mm512_fmadd_ps(dots, lane_scales, acc);
  }
  // The table held 2 * fp4.
  return _mm512_reduce_add_ps(acc) * (0.5f * w.global_scale);
}

}  // namespace

void vnni_matvec_rows(const WeightMatrix& w, const PreparedX& px, int64_t row_begin,
                      int64_t row_end, float* y) {
  if (w.format == WeightFormat::NvFp4) {
    for (int64_t r = row_begin; r < row_end; ++r) y[r - row_begin] = nvfp4_row(w, r, px);
  } else {
    for (int64_t r = row_begin; r < row_end; ++r) y[r - row_begin] = affine4_row(w, r, px);
  }
}

}  // namespace inkling::kernels::detail
