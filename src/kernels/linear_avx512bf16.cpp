// Prefill with vdpbf16ps (MatmulPrecision::Bf16Activations): AVX-512 + AVX512_BF16, reached
// only after cpu_has_avx512_bf16().
//
// X is rounded to bf16 once per call (bf16_round_rows). vdpbf16ps multiplies 32 bf16 pairs into
// 16 f32 lanes per instruction, twice the multiply-adds of an f32 FMA; lane l accumulates
// columns 2 l and 2 l + 1 of each 32, so weights and X are both used in natural column order.
// bf16 weights are read in place; every other format is decoded per block of kRows rows to f32
// (avx512_decode_row) and rounded to bf16 into scratch once, then reused by every token of
// the token block. Register tile: kRows rows x kTokens tokens of accumulators, horizontal sums
// at the end.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <utility>

#include "kernels/backend.h"
#include "kernels/isa.h"

namespace inkling::kernels::detail {
namespace {

#include "kernels/simd_common.h"
#include "kernels/simd_avx512.h"

constexpr int kRows = 4;
constexpr int kTokens = 6;

inline __mmask32 tail_mask32(int64_t count) {
  return count >= 32 ? __mmask32(0xffffffffu) : __mmask32((1u << count) - 1u);
}

// 32 f32 -> 32 bf16 (round to nearest even), fewer under the mask (the rest zero).
inline __m512i round32(const float* x, __mmask32 mask) {
  const __m512 lo = _mm512_maskz_loadu_ps(__mmask16(mask), x);
  const __m512 hi = _mm512_maskz_loadu_ps(__mmask16(mask >> 16), x + 16);
  return __m512i(_mm512_cvtne2ps_pbh(hi, lo));
}

void round_row(const float* x, int64_t cols, uint16_t* out) {
  const int64_t ld = bf16_ldx(cols);
  for (int64_t c = 0; c < ld; c += 32)
    _mm512_storeu_si512(out + c, round32(x + c, tail_mask32(cols - c)));
}

// Sum of each of 4 vectors' 16 lanes: [sum a0, sum a1, sum a2, sum a3].
inline __m128 reduce4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
  const __m512 s01 = _mm512_add_ps(_mm512_shuffle_f32x4(a0, a1, 0x44),
                                   _mm512_shuffle_f32x4(a0, a1, 0xee));  // a0 8 | a1 8
  const __m512 s23 = _mm512_add_ps(_mm512_shuffle_f32x4(a2, a3, 0x44),
                                   _mm512_shuffle_f32x4(a2, a3, 0xee));  // a2 8 | a3 8
  const __m512 s = _mm512_add_ps(_mm512_shuffle_f32x4(s01, s23, 0x88),
                                 _mm512_shuffle_f32x4(s01, s23, 0xdd));  // a0 4 | a1 | a2 | a3
  const __m128 h01 = _mm_hadd_ps(_mm512_castps512_ps128(s), _mm512_extractf32x4_ps(s, 1));
  const __m128 h23 = _mm_hadd_ps(_mm512_extractf32x4_ps(s, 2), _mm512_extractf32x4_ps(s, 3));
  return _mm_hadd_ps(h01, h23);
}

// y[t * ldy + r] = W[r] . X[t] for r < R, t < T. W rows are bf16 at w[r] (natural order), X rows
// bf16 at x + t * ldx (zero padded to a multiple of 32). Columns past `cols` in W are masked.
template <int R, int T>
void tile(const uint16_t* const* w, const uint16_t* x, int64_t ldx, int64_t cols, float* y,
          int64_t ldy) {
  __m512 acc[R][T];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  int64_t k = 0;
  auto step = [&](int64_t k, __mmask32 mask) {
    __m512bh wv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) wv[r] = __m512bh(_mm512_maskz_loadu_epi16(mask, w[r] + k));
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m512bh xv = __m512bh(_mm512_loadu_si512(x + t * ldx + k));
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], wv[r], xv);
    }
  };
  for (; k + 32 <= cols; k += 32) step(k, __mmask32(0xffffffffu));
  if (k < cols) step(k, tail_mask32(cols - k));
  if constexpr (R == 4) {
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t)
      _mm_storeu_ps(y + t * ldy, reduce4(acc[0][t], acc[1][t], acc[2][t], acc[3][t]));
  } else {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) y[t * ldy + r] = _mm512_reduce_add_ps(acc[r][t]);
  }
}

using Tile = void (*)(const uint16_t* const* w, const uint16_t* x, int64_t ldx, int64_t cols,
                      float* y, int64_t ldy);
struct Tiles {
  Tile fns[kRows * kTokens];
};
template <int... kIndex>
constexpr Tiles make_tiles(std::integer_sequence<int, kIndex...>) {
  return {{&tile<kIndex / kTokens + 1, kIndex % kTokens + 1>...}};
}
constexpr Tiles kTiles = make_tiles(std::make_integer_sequence<int, kRows * kTokens>());

// Affine 4-bit row (group_size % 32 == 0) decoded centred, scale * (code - 8), straight to
// bf16 in one pass; offsets[g] = bias_g + 8 * scale_g.
void decode_affine4_centred(const WeightMatrix& w, int64_t r, uint16_t* out, float* offsets) {
  const uint8_t* row = w.data + r * w.row_stride;
  const uint8_t* scales = w.scales + r * w.scales_row_stride;
  const uint8_t* biases = w.biases + r * w.biases_row_stride;
  const __m512i low_nibble = _mm512_set1_epi32(15);
  const __m512i interleave_lo = nibble_zip_lo();
  const __m512i interleave_hi = nibble_zip_hi();
  for (int64_t g = 0; g < w.cols / w.group_size; ++g) {
    const float scale = load_param(scales, w.scale_dtype, g);
    offsets[g] = load_param(biases, w.scale_dtype, g) + 8.0f * scale;
    const __m512 scale_v = _mm512_set1_ps(scale), shift = _mm512_set1_ps(-8.0f * scale);
    for (int64_t c = g * w.group_size; c < (g + 1) * w.group_size; c += 32) {
      const __m512i d =
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c / 2)));
      const __m512 even =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_and_si512(d, low_nibble)), scale_v, shift);
      const __m512 odd =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(d, 4)), scale_v, shift);
      const __m512 lo = _mm512_permutex2var_ps(even, interleave_lo, odd);
      const __m512 hi = _mm512_permutex2var_ps(even, interleave_hi, odd);
      _mm512_storeu_si512(out + c, __m512i(_mm512_cvtne2ps_pbh(hi, lo)));
    }
  }
}

// group_x[g * ldt + t] = sum of X[t] over group g (bf16 X, [n, ldx]).
void group_sums_transposed(const uint16_t* x, int64_t n, int64_t ldx, int64_t group_size,
                           int64_t groups, float* group_x, int64_t ldt) {
  for (int64_t t = 0; t < n; ++t) {
    const uint16_t* row = x + t * ldx;
    for (int64_t g = 0; g < groups; ++g) {
      __m512 acc = _mm512_setzero_ps();
      int64_t c = g * group_size;
      const int64_t end = c + group_size;
      for (; c + 16 <= end; c += 16)
        acc = _mm512_add_ps(acc, _mm512_castsi512_ps(_mm512_slli_epi32(
                                     _mm512_cvtepu16_epi32(_mm256_loadu_si256(
                                         reinterpret_cast<const __m256i*>(row + c))),
                                     16)));
      float sum = _mm512_reduce_add_ps(acc);
      for (; c < end; ++c) sum += bf16_bits_to_f32(row[c]);
      group_x[g * ldt + t] = sum;
    }
  }
}

// y[t * ldy + i] += sum_g offsets[i * groups + g] * group_x[g * ldt + t] for i < rows (<= kRows),
// t in [t_begin, t_end): 16 tokens per vector, kRows chains side by side (rows past `rows` are
// computed from whatever offsets holds and not stored).
void add_offset_terms(const float* offsets, int64_t groups, int64_t rows, const float* group_x,
                      int64_t ldt, int64_t t_begin, int64_t t_end, float* y, int64_t ldy) {
  static_assert(kRows == 4);
  for (int64_t t0 = t_begin; t0 < t_end; t0 += 16) {
    const __mmask16 mask = t_end - t0 >= 16 ? __mmask16(0xffff) : tail_mask(t_end - t0);
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t g = 0; g < groups; ++g) {
      const __m512 sums = _mm512_maskz_loadu_ps(mask, group_x + g * ldt + t0);
      a0 = _mm512_fmadd_ps(_mm512_set1_ps(offsets[g]), sums, a0);
      a1 = _mm512_fmadd_ps(_mm512_set1_ps(offsets[groups + g]), sums, a1);
      a2 = _mm512_fmadd_ps(_mm512_set1_ps(offsets[2 * groups + g]), sums, a2);
      a3 = _mm512_fmadd_ps(_mm512_set1_ps(offsets[3 * groups + g]), sums, a3);
    }
    alignas(64) float lanes[kRows][16];
    _mm512_store_ps(lanes[0], a0);
    _mm512_store_ps(lanes[1], a1);
    _mm512_store_ps(lanes[2], a2);
    _mm512_store_ps(lanes[3], a3);
    const int64_t count = min_i64(16, t_end - t0);
    for (int64_t t = 0; t < count; ++t)
      for (int64_t i = 0; i < rows; ++i) y[(t0 + t) * ldy + i] += lanes[i][t];
  }
}

// Row r of w against kTokens bf16 x's: each row load serves every token, and token t's four
// accumulators see the same vdpbf16ps in the same order whatever kTokens is, so a token's value
// is bit for bit its matvec's (kTokens = 1). Four accumulators per token hide the vdpbf16ps
// latency; prefetched ahead in the row's stream (kRowPrefetchBytes, non-temporal) when kPrefetch.
template <int kTokens, bool kPrefetch>
inline void bf16_row_tokens(const uint16_t* row, int64_t cols, const uint16_t* const* xs, float* y, int64_t ldy) {
  __m512 acc[kTokens][4];
#pragma GCC unroll 8
  for (int t = 0; t < kTokens; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 128 <= cols; k += 128) {
    if constexpr (kPrefetch) {
      const char* ahead = reinterpret_cast<const char*>(row + k) + kRowPrefetchBytes;
#pragma GCC unroll 4
      for (int line = 0; line < 4; ++line) prefetch_stream(ahead + 64 * line);
    }
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const __m512bh weights = __m512bh(_mm512_loadu_si512(row + k + 32 * j));
#pragma GCC unroll 8
      for (int t = 0; t < kTokens; ++t)
        acc[t][j] = _mm512_dpbf16_ps(acc[t][j], weights, __m512bh(_mm512_loadu_si512(xs[t] + k + 32 * j)));
    }
  }
  for (; k < cols; k += 32) {
    const __m512bh weights = __m512bh(_mm512_maskz_loadu_epi16(tail_mask32(cols - k), row + k));
#pragma GCC unroll 8
    for (int t = 0; t < kTokens; ++t)
      acc[t][0] = _mm512_dpbf16_ps(acc[t][0], weights, __m512bh(_mm512_loadu_si512(xs[t] + k)));
  }
#pragma GCC unroll 8
  for (int t = 0; t < kTokens; ++t)
    y[t * ldy] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[t][0], acc[t][1]), _mm512_add_ps(acc[t][2], acc[t][3])));
}

// Tokens per pass over a block of rows in a decode batch: 4 x 4 accumulators, and per 128
// columns 4 weight loads for 16 x loads and 16 vdpbf16ps (token by token: 32 loads).
constexpr int kBf16PassTokens = 4;

}  // namespace

void bf16_round_rows(const float* x, int64_t n, int64_t cols, uint16_t* out) {
  const int64_t ld = bf16_ldx(cols);
  for (int64_t t = 0; t < n; ++t) round_row(x + t * cols, cols, out + t * ld);
}

// One row at a time, so each thread reads one stream strictly in order (what the prefetchers
// follow best).
void bf16_matvec_rows(const WeightMatrix& w, const uint16_t* x, int64_t row_begin, int64_t row_end,
                      float* y) {
  if (amx_active() && amx_bf16_shape(w)) return amx_bf16_rows(w, &x, 1, row_begin, row_end, y, 1);
  for (int64_t r = row_begin; r < row_end; ++r)
    bf16_row_tokens<1, true>(reinterpret_cast<const uint16_t*>(w.data + r * w.row_stride), w.cols, &x,
                             y + (r - row_begin), 1);
}

void bf16_matvec_rows_multi(const WeightMatrix& w, const uint16_t* const* xs, int n, int64_t row_begin,
                            int64_t row_end, float* y, int64_t ldy) {
  if (amx_active() && amx_bf16_shape(w)) return amx_bf16_rows(w, xs, n, row_begin, row_end, y, ldy);
  // Blocks of ~8 KiB of weights (as matvec_rows_each_token), so later passes find them in L1.
  const int64_t fitting = (int64_t(8) << 10) / (2 * w.cols), block_rows = fitting > 1 ? fitting : 1;
  in_token_passes<kBf16PassTokens>(n, row_begin, row_end, block_rows, [&](auto tokens, auto first, int64_t r, int t) {
    bf16_row_tokens<decltype(tokens)::value, bool(decltype(first)::value)>(
        reinterpret_cast<const uint16_t*>(w.data + r * w.row_stride), w.cols, xs + t, y + t * ldy + (r - row_begin),
        ldy);
  });
}

void bf16_matmul_rows(const WeightMatrix& w, const uint16_t* x, int64_t n, int64_t row_begin,
                      int64_t row_end, float* y, int64_t ldy) {
  const int64_t cols = w.cols, ldx = bf16_ldx(cols);
  const bool direct = w.format == WeightFormat::BF16;
  const bool affine = w.format == WeightFormat::Affine;
  const int64_t groups = affine ? cols / w.group_size : 0;
  // Affine weights are decoded centred, w = scale * (code - mid) + offset with
  // offset = bias + mid * scale, so bf16 rounds the small centred part; the offset term
  // sum_g offset_g * sum(X[t] over g) is added in f32 afterwards (group_x: [n, groups]).
  // NVFP4 is decoded without the global scale: fp4 * e4m3 is then exact in bf16.
  const float mid = affine ? float(1 << (w.bits - 1)) : 0.0f;
  // group_x is stored transposed, [groups, ldt], so the offset term vectorises over tokens.
  const int64_t ldt = (n + 15) / 16 * 16;
  Scratch group_x(affine ? groups * ldt : 0), offsets(affine ? kRows * groups : 0);
  if (affine) {
    group_sums_transposed(x, n, ldx, w.group_size, groups, group_x.data, ldt);
    for (int64_t i = 0; i < kRows * groups; ++i) offsets.data[i] = 0.0f;  // rows a block lacks
  }
  WeightMatrix unscaled = w;
  unscaled.global_scale = 1.0f;
  // Decoded rows: bf16 [kRows, ldx] plus one f32 row of staging.
  uint16_t* decoded = nullptr;
  Scratch scratch(direct ? 0 : kRows * ldx / 2 + cols);
  if (!direct) {
    decoded = reinterpret_cast<uint16_t*>(scratch.data + cols);
    for (int64_t i = 0; i < kRows * ldx; ++i) decoded[i] = 0;
  }
  const int64_t token_block = x_token_block(ldx * 2, kTokens);

  for (int64_t t_begin = 0; t_begin < n; t_begin += token_block) {
    const int64_t t_end = min_i64(n, t_begin + token_block);
    for (int64_t r0 = row_begin; r0 < row_end; r0 += kRows) {
      const int64_t row_count = min_i64(kRows, row_end - r0);
      const uint16_t* rows[kRows];
      int64_t tile_cols = cols;
      for (int64_t i = 0; i < row_count; ++i) {
        if (direct) {
          rows[i] = reinterpret_cast<const uint16_t*>(w.data + (r0 + i) * w.row_stride);
          continue;
        }
        rows[i] = decoded + i * ldx;
        tile_cols = ldx;  // zero padded: no masked tail
        if (affine && w.bits == 4 && w.group_size % 32 == 0) {
          decode_affine4_centred(w, r0 + i, decoded + i * ldx, offsets.data + i * groups);
          continue;
        }
        float* row = scratch.data;
        avx512_decode_row(unscaled, r0 + i, row);
        if (affine) {
          const uint8_t* scales = w.scales + (r0 + i) * w.scales_row_stride;
          const uint8_t* biases = w.biases + (r0 + i) * w.biases_row_stride;
          for (int64_t g = 0; g < groups; ++g) {
            const float offset = load_param(biases, w.scale_dtype, g) +
                                 mid * load_param(scales, w.scale_dtype, g);
            offsets.data[i * groups + g] = offset;
            for (int64_t c = g * w.group_size; c < (g + 1) * w.group_size; ++c) row[c] -= offset;
          }
        }
        round_row(row, cols, decoded + i * ldx);
      }
      float* y_block = y + (r0 - row_begin);
      for (int64_t t0 = t_begin; t0 < t_end; t0 += kTokens) {
        const int64_t token_count = min_i64(kTokens, t_end - t0);
        kTiles.fns[(row_count - 1) * kTokens + token_count - 1](rows, x + t0 * ldx, ldx,
                                                                tile_cols, y_block + t0 * ldy, ldy);
      }
      if (affine) add_offset_terms(offsets.data, groups, row_count, group_x.data, ldt, t_begin, t_end, y_block, ldy); else if (w.format == WeightFormat::NvFp4) {
        for (int64_t t = t_begin; t < t_end; ++t)
          for (int64_t i = 0; i < row_count; ++i) y_block[t * ldy + i] *= w.global_scale;
      }
    }
  }
}

}  // namespace inkling::kernels::detail
