// AVX2 + FMA + F16C kernels: the path for x86-64 CPUs without AVX-512. Same structure as
// linear_avx512.cpp with 8 lanes; 4-bit formats use x split per 16 columns into [even, odd].
#include <immintrin.h>

#include <type_traits>
#include <utility>

#include "kernels/backend.h"
#include "kernels/prefetch.h"

namespace inkling::kernels::detail {
namespace {

#include "kernels/simd_common.h"
#include "kernels/simd_avx2.h"

constexpr int kLanes = 8;

// Lane mask for the first `count` (< 8) lanes, for maskload / maskstore.
inline __m256i tail_mask(int64_t count) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(count)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

template <WeightFormat F>
inline __m256 load8(const uint8_t* row, int64_t c) {
  if constexpr (F == WeightFormat::F32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + c);
  } else if constexpr (F == WeightFormat::BF16) {
    __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * c));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
  } else {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * c)));
  }
}

// Tails are rare (cols is a multiple of 8 in every Inkling tensor): go through a zeroed copy.
template <WeightFormat F>
inline __m256 load8_partial(const uint8_t* row, int64_t c, int64_t count) {
  const int64_t elem = F == WeightFormat::F32 ? 4 : 2;
  alignas(32) uint8_t bytes[32] = {};
  __builtin_memcpy(bytes, row + elem * c, size_t(count * elem));
  return load8<F>(bytes, 0);
}

// What a pass over a row prefetches of the stream ahead: nothing (a later pass of a decode batch,
// the row is in cache), non-temporally (the matvec: a weight read once has no use for L2), or
// into every level (the first pass of a decode batch, whose later passes re-read the rows).
enum class Prefetch { None, NonTemporal, Keep };

// y[t * ldy] = row . xs[t] for kTokens tokens: each 8 weights are loaded and widened once for all
// of them. A token's accumulators see the same FMAs in the same order whatever kTokens is, so its
// result is the matvec's (kTokens = 1) bit for bit.
template <WeightFormat F, int kTokens, Prefetch kPrefetch>
__attribute__((always_inline)) inline void dense_row_dots(const uint8_t* row, const float* const* xs, int64_t cols,
                                                          float* y, int64_t ldy) {
  constexpr int64_t kElementBytes = F == WeightFormat::F32 ? 4 : 2;
  __m256 acc[kTokens][4];
#pragma GCC unroll 8
  for (int t = 0; t < kTokens; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 32 <= cols; c += 32) {
    if constexpr (kPrefetch != Prefetch::None) {
      const char* ahead = reinterpret_cast<const char*>(row) + c * kElementBytes + kRowPrefetchBytes;
      for (int64_t line = 0; line < 32 * kElementBytes; line += 64)
        if constexpr (kPrefetch == Prefetch::Keep)
          _mm_prefetch(ahead + line, _MM_HINT_T0);
        else
          prefetch_stream(ahead + line);
    }
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const __m256 weights = load8<F>(row, c + 8 * j);
#pragma GCC unroll 8
      for (int t = 0; t < kTokens; ++t) acc[t][j] = _mm256_fmadd_ps(weights, _mm256_loadu_ps(xs[t] + c + 8 * j), acc[t][j]);
    }
  }
  for (; c + 8 <= cols; c += 8) {
    const __m256 weights = load8<F>(row, c);
#pragma GCC unroll 8
    for (int t = 0; t < kTokens; ++t) acc[t][0] = _mm256_fmadd_ps(weights, _mm256_loadu_ps(xs[t] + c), acc[t][0]);
  }
  if (c < cols) {
    const __m256 weights = load8_partial<F>(row, c, cols - c);
    const __m256i mask = tail_mask(cols - c);
#pragma GCC unroll 8
    for (int t = 0; t < kTokens; ++t) acc[t][1] = _mm256_fmadd_ps(weights, _mm256_maskload_ps(xs[t] + c, mask), acc[t][1]);
  }
#pragma GCC unroll 8
  for (int t = 0; t < kTokens; ++t)
    y[t * ldy] = reduce(_mm256_add_ps(_mm256_add_ps(acc[t][0], acc[t][1]), _mm256_add_ps(acc[t][2], acc[t][3])));
}

template <WeightFormat F>
float dot_dense(const uint8_t* row, const float* x, int64_t cols) {
  float y;
  dense_row_dots<F, 1, Prefetch::NonTemporal>(row, &x, cols, &y, 0);
  return y;
}

inline __m128i load_u8x8(const uint8_t* p) {
  return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
}

template <int kBits>
float dot_affine(const WeightMatrix& w, int64_t r, const PreparedX& px) {
  const uint8_t* codes = w.data + r * w.row_stride;
  const uint8_t* scales = w.scales + r * w.scales_row_stride;
  const uint8_t* biases = w.biases + r * w.biases_row_stride;
  const int64_t groups = w.cols / w.group_size;
  const float* xs = kBits == 4 ? px.x_split : px.x;
  const __m256i low_nibble = _mm256_set1_epi32(15);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  float bias_sum = 0.0f;
  for (int64_t g = 0; g < groups; ++g) {
    __m256 even = _mm256_setzero_ps(), odd = _mm256_setzero_ps();
    for (int k = 0; k < w.group_size; k += 16) {
      if constexpr (kBits == 4) {
        __m256i d = _mm256_cvtepu8_epi32(load_u8x8(codes));
        even = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(d, low_nibble)),
                               _mm256_loadu_ps(xs), even);
        odd = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(d, 4)),
                              _mm256_loadu_ps(xs + 8), odd);
        codes += 8;
      } else {
        even = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(load_u8x8(codes))),
                               _mm256_loadu_ps(xs), even);
        odd = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(load_u8x8(codes + 8))),
                              _mm256_loadu_ps(xs + 8), odd);
        codes += 16;
      }
      xs += 16;
    }
    __m256 scale = _mm256_set1_ps(load_param(scales, w.scale_dtype, g));
    if (g & 1)
      acc1 = _mm256_fmadd_ps(scale, _mm256_add_ps(even, odd), acc1);
    else
      acc0 = _mm256_fmadd_ps(scale, _mm256_add_ps(even, odd), acc0);
    bias_sum += load_param(biases, w.scale_dtype, g) * px.group_sums[g];
  }
  return reduce(_mm256_add_ps(acc0, acc1)) + bias_sum;
}

// E2M1 nibbles (in the low 4 bits of each lane, higher bits ignored) to f32: magnitude from an
// 8-entry vpermps table, sign bit 3 moved to bit 31.
inline __m256 fp4_to_f32(__m256i nibbles, __m256 magnitudes) {
  __m256 magnitude = _mm256_permutevar8x32_ps(magnitudes, nibbles);
  __m256i sign = _mm256_slli_epi32(_mm256_and_si256(nibbles, _mm256_set1_epi32(8)), 28);
  return _mm256_xor_ps(magnitude, _mm256_castsi256_ps(sign));
}

inline __m256 fp4_magnitudes() {
  return _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
}

float dot_nvfp4(const WeightMatrix& w, int64_t r, const PreparedX& px) {
  const uint8_t* codes = w.data + r * w.row_stride;
  const uint8_t* scales = w.scales + r * w.scales_row_stride;
  const float* table = e4m3_table();
  const __m256 magnitudes = fp4_magnitudes();
  const int64_t blocks = w.cols / 16;
  const float* xs = px.x_split;
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (int64_t i = 0; i < blocks; ++i) {
    __m256i d = _mm256_cvtepu8_epi32(load_u8x8(codes));
    __m256 t = _mm256_mul_ps(fp4_to_f32(d, magnitudes), _mm256_loadu_ps(xs));
    t = _mm256_fmadd_ps(fp4_to_f32(_mm256_srli_epi32(d, 4), magnitudes), _mm256_loadu_ps(xs + 8),
                        t);
    if (i & 1)
      acc1 = _mm256_fmadd_ps(t, _mm256_set1_ps(table[scales[i]]), acc1);
    else
      acc0 = _mm256_fmadd_ps(t, _mm256_set1_ps(table[scales[i]]), acc0);
    codes += 8;
    xs += 16;
  }
  float sum = reduce(_mm256_add_ps(acc0, acc1));
  sum += nvfp4_tail_dot(w.data + r * w.row_stride, scales - blocks, px.x, blocks * 16, w.cols);
  return sum * w.global_scale;
}

// 4-bit decode on x as int8 digits per 8 columns (PreparedX::x_q8: one digit in fast precision,
// three in exact), the integer dots of the VNNI path (vnni_rows.h) built from vpmaddubsw +
// vpmaddwd, 32 bytes of codes (64 columns, eight 32-bit lanes of 8 columns) per step. Unsigned
// weights times signed digits: a vpmaddubsw pair is at most 2 * 24 * 128 in magnitude, the low +
// high sum 12288 < 2^15, so the int16 stage never saturates; digits fold most significant first
// (shift a byte, add), and with three (|Q| < 2^23) a lane stays below 8 * 24 * 2^23 < 2^31, so
// the dots are exact. Cold 2048 x 2048 on one Zen 5 core: the f32 kernels above ~12 GB/s
// (compute-bound), one digit ~30.
__attribute__((always_inline)) inline __m256i q8_lane_dots(__m256i low, __m256i high, const int8_t* x_even, const int8_t* x_odd) {
  const __m256i pairs = _mm256_add_epi16(
      _mm256_maddubs_epi16(low, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x_even))),
      _mm256_maddubs_epi16(high, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x_odd))));
  return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
}

// The lanes of one half (32 bytes of codes) of a chunk against kParts digits of x; `x` is the
// chunk's digits (kParts blocks of 128 bytes: even columns, then odd).
template <int kParts>
__attribute__((always_inline)) inline __m256i q8_digit_dots(__m256i low, __m256i high, const int8_t* x, int half) {
  __m256i acc = q8_lane_dots(low, high, x + 32 * half, x + 64 + 32 * half);
  for (int part = 1; part < kParts; ++part)
    acc = _mm256_add_epi32(_mm256_slli_epi32(acc, 8),
                           q8_lane_dots(low, high, x + 128 * part + 32 * half, x + 128 * part + 64 + 32 * half));
  return acc;
}

// Eight affine scales / biases (BF16, F16 or F32) as f32.
__attribute__((always_inline)) inline __m256 load8_params(const uint8_t* p, DType dtype, int64_t index) {
  if (dtype == DType::BF16) return load8<WeightFormat::BF16>(p, index);
  if (dtype == DType::F16) return load8<WeightFormat::F16>(p, index);
  return load8<WeightFormat::F32>(p, index);
}

// The weight scale of each 8-column lane of the 64 columns from `column` on (kGroup 8 .. 128).
template <int kGroup>
__attribute__((always_inline)) inline __m256 lane_group_scales(const uint8_t* scales, DType dtype, int64_t column) {
  const int64_t g = column / kGroup;
  if constexpr (kGroup >= 64) {
    return _mm256_set1_ps(load_param(scales, dtype, g));
  } else if constexpr (kGroup == 32) {
    return _mm256_set_m128(_mm_set1_ps(load_param(scales, dtype, g + 1)), _mm_set1_ps(load_param(scales, dtype, g)));
  } else if constexpr (kGroup == 16) {
    const float s0 = load_param(scales, dtype, g), s1 = load_param(scales, dtype, g + 1);
    const float s2 = load_param(scales, dtype, g + 2), s3 = load_param(scales, dtype, g + 3);
    return _mm256_setr_ps(s0, s0, s1, s1, s2, s2, s3, s3);
  } else {
    return load8_params(scales, dtype, g);
  }
}

// The two nibble vectors of 32 bytes of codes, as the integer dots take them.
struct Nibbles {
  __m256i low, high;
};

// The walk both q8 rows share, for kTokens tokens at once (xs[0 .. kTokens)): per 32 bytes of codes
// (64 columns, eight lanes), the codes are unpacked once (unpack(v)) and, for each token, its exact
// lane dots from token_dots(nibbles, chunk's x digits, half, first lane, token's x), converted and
// scaled by lane_weight_scales(first column) times the token's x scales. lanes[t] gets token t's 8
// lane sums. Each token's arithmetic is that of kTokens = 1 (the matvec), in the same order, so a
// token's result does not depend on the tokens it shares a pass with. kPrefetch: this pass is the
// first over the row, and prefetches the code stream ahead.
template <int kParts, int kTokens, bool kPrefetch, class Unpack, class TokenDots, class LaneWeightScales>
__attribute__((always_inline)) inline void q8_row_lanes(const uint8_t* codes, int64_t chunks, const PreparedX* xs, const Unpack& unpack,
                         const TokenDots& token_dots, const LaneWeightScales& lane_weight_scales, __m256* lanes) {
  __m256 acc0[kTokens], acc1[kTokens];
#pragma GCC unroll 8
  for (int t = 0; t < kTokens; ++t) acc0[t] = acc1[t] = _mm256_setzero_ps();
  for (int64_t ch = 0; ch < chunks; ++ch) {
    if constexpr (kPrefetch)
      prefetch_stream(reinterpret_cast<const char*>(codes + 64 * ch + kRowPrefetchBytes));
#pragma GCC unroll 2
    for (int half = 0; half < 2; ++half) {
      const Nibbles nibbles = unpack(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 64 * ch + 32 * half)));
      const __m256 weight_scales = lane_weight_scales(128 * ch + 64 * half);
#pragma GCC unroll 8
      for (int t = 0; t < kTokens; ++t) {
        const PreparedX& px = xs[t];
        const __m256 dots =
            _mm256_cvtepi32_ps(token_dots(nibbles, px.x_q8 + 128 * kParts * ch, half, 16 * ch + 8 * half, px));
        const __m256 lane_scales = _mm256_mul_ps(weight_scales, _mm256_loadu_ps(px.x_q8_scale + 16 * ch + 8 * half));
        if (half == 0)
          acc0[t] = _mm256_fmadd_ps(dots, lane_scales, acc0[t]);
        else
          acc1[t] = _mm256_fmadd_ps(dots, lane_scales, acc1[t]);
      }
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < kTokens; ++t) lanes[t] = _mm256_add_ps(acc0[t], acc1[t]);
}

// One affine 4-bit row for kTokens tokens, y[t * ldy] for token t: sum over lanes of scale *
// x_scale * dot(codes, Q), plus the bias term sum_g bias_g * sum(x^ over g) (group_sums_q8), so the
// result is exactly W . x^.
template <int kGroup, int kParts, int kTokens, bool kPrefetch>
__attribute__((always_inline)) inline void affine4_q8_row(const WeightMatrix& w, int64_t r, const PreparedX* xs, float* y, int64_t ldy) {
  const uint8_t* scales = w.scales + r * w.scales_row_stride;
  const uint8_t* biases = w.biases + r * w.biases_row_stride;
  const int64_t groups = w.cols / kGroup;
  if constexpr (kPrefetch) {
    const int64_t param_bytes = groups * (w.scale_dtype == DType::F32 ? 4 : 2);
    prefetch_lines(scales + kPrefetchRows * w.scales_row_stride, param_bytes);
    prefetch_lines(biases + kPrefetchRows * w.biases_row_stride, param_bytes);
  }
  const __m256i nibble = _mm256_set1_epi8(15);
  __m256 acc[kTokens];
  q8_row_lanes<kParts, kTokens, kPrefetch>(
      w.data + r * w.row_stride, w.cols / 128, xs,
      [&](__m256i v) __attribute__((always_inline)) {
        return Nibbles{_mm256_and_si256(v, nibble), _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble)};
      },
      [&](const Nibbles& nibbles, const int8_t* x, int half, int64_t, const PreparedX&) __attribute__((always_inline)) {
        return q8_digit_dots<kParts>(nibbles.low, nibbles.high, x, half);
      },
      [&](int64_t column) __attribute__((always_inline)) { return lane_group_scales<kGroup>(scales, w.scale_dtype, column); }, acc);
  int64_t g = 0;
  for (; g + 8 <= groups; g += 8) {
    const __m256 bias = load8_params(biases, w.scale_dtype, g);
#pragma GCC unroll 8
    for (int t = 0; t < kTokens; ++t) acc[t] = _mm256_fmadd_ps(bias, _mm256_loadu_ps(xs[t].group_sums_q8 + g), acc[t]);
  }
  // The groups past the last 8 as explicit FMAs: left to contraction, `sum += bias * group_sum`
  // came out fused in some instantiations and not in others, and a token's result then depended
  // on the tokens it shared a pass with.
#pragma GCC unroll 8
  for (int t = 0; t < kTokens; ++t) {
    float sum = reduce(acc[t]);
    for (int64_t tail = g; tail < groups; ++tail)
      sum = __builtin_fmaf(load_param(biases, w.scale_dtype, tail), xs[t].group_sums_q8[tail], sum);
    y[t * ldy] = sum;
  }
}

// True when none of the n E4M3 bytes has its sign bit set or is NaN (0x7F), as in every ModelOpt
// file: the scales then decode in registers (e4m3x4_nonnegative_pairs) instead of by table.
inline bool e4m3_nonnegative_finite(const uint8_t* bytes, int64_t n) {
  const __m256i largest = _mm256_set1_epi8(0x7e);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes + i));
    if (_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_max_epu8(v, largest), largest)) != -1) return false;
  }
  for (; i < n; ++i)
    if (bytes[i] > 0x7e) return false;
  return true;
}

// Four E4M3 scales in [0, 0x7E], one per two lanes: [s0, s0, s1, s1, s2, s2, s3, s3]. The bits
// move to their f32 places and one multiply by 2^120 re-biases, subnormals included.
__attribute__((always_inline)) inline __m256 e4m3x4_nonnegative_pairs(const uint8_t* block) {
  int32_t bytes;
  __builtin_memcpy(&bytes, block, 4);
  const __m256i widened = _mm256_cvtepu8_epi32(_mm_cvtsi32_si128(bytes));
  const __m256i pairs = _mm256_permutevar8x32_epi32(widened, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
  return _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(pairs, 20)), _mm256_set1_ps(0x1p120f));
}

// One NVFP4 row for kTokens tokens: nibbles looked up as 2 * fp4 + 12 in [0, 24] (vpshufb, per
// 128-bit lane), the +12 taken back out by x_q8_nvfp4_offset (-12 * sum(Q) per lane) once the
// digits are folded, 0.5 folded in at the end. kNonNegativeScales: the row passed
// e4m3_nonnegative_finite.
template <int kParts, bool kNonNegativeScales, int kTokens, bool kPrefetch>
__attribute__((always_inline)) inline void nvfp4_q8_row(const WeightMatrix& w, int64_t r, const PreparedX* xs, float* y, int64_t ldy) {
  const uint8_t* scales = w.scales + r * w.scales_row_stride;
  const float* table = e4m3_table();
  if constexpr (kPrefetch) prefetch_lines(scales + kPrefetchRows * w.scales_row_stride, w.cols / 16);
  const __m256i values = _mm256_broadcastsi128_si256(
      _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
  const __m256i nibble = _mm256_set1_epi8(15);
  __m256 lanes[kTokens];
  q8_row_lanes<kParts, kTokens, kPrefetch>(
      w.data + r * w.row_stride, w.cols / 128, xs,
      [&](__m256i v) __attribute__((always_inline)) {
        return Nibbles{_mm256_shuffle_epi8(values, _mm256_and_si256(v, nibble)),
                       _mm256_shuffle_epi8(values, _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble))};
      },
      [&](const Nibbles& nibbles, const int8_t* x, int half, int64_t first_lane, const PreparedX& px) __attribute__((always_inline)) {
        const __m256i offset =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(px.x_q8_nvfp4_offset + first_lane));
        return _mm256_add_epi32(q8_digit_dots<kParts>(nibbles.low, nibbles.high, x, half), offset);
      },
      [&](int64_t column) __attribute__((always_inline)) {
        // Lane l covers columns 8 l .. 8 l + 7 of the 64: block l / 2 of the four 16-column blocks.
        const uint8_t* block = scales + column / 16;
        if constexpr (kNonNegativeScales) return e4m3x4_nonnegative_pairs(block);
        const float s0 = table[block[0]], s1 = table[block[1]], s2 = table[block[2]], s3 = table[block[3]];
        return _mm256_setr_ps(s0, s0, s1, s1, s2, s2, s3, s3);
      },
      lanes);
#pragma GCC unroll 8
  for (int t = 0; t < kTokens; ++t) y[t * ldy] = reduce(lanes[t]) * (0.5f * w.global_scale);
}

// The q8 row kernels as types, so that the format and group size are dispatched once per range of
// rows and the row itself is inlined into the loop over rows: a call per row (1 KiB of codes at
// 2048 columns) made the one-digit matvec ~15% slower cache-resident.
template <int kGroup>
struct Affine4Q8Row {
  template <int kParts, int kTokens, bool kPrefetch>
  __attribute__((always_inline)) static void row(const WeightMatrix& w, int64_t r, const PreparedX* xs, float* y,
                                                 int64_t ldy) {
    affine4_q8_row<kGroup, kParts, kTokens, kPrefetch>(w, r, xs, y, ldy);
  }
};

struct Nvfp4Q8Row {
  template <int kParts, int kTokens, bool kPrefetch>
  __attribute__((always_inline)) static void row(const WeightMatrix& w, int64_t r, const PreparedX* xs, float* y,
                                                 int64_t ldy) {
    if (w.scales_nonnegative_finite || e4m3_nonnegative_finite(w.scales + r * w.scales_row_stride, w.cols / 16))
      return nvfp4_q8_row<kParts, true, kTokens, kPrefetch>(w, r, xs, y, ldy);
    nvfp4_q8_row<kParts, false, kTokens, kPrefetch>(w, r, xs, y, ldy);
  }
};

// f(row kernel type) for a vnni_matvec_shape matrix.
template <class F>
inline void with_q8_row(const WeightMatrix& w, const F& f) {
  if (w.format == WeightFormat::NvFp4) return f(Nvfp4Q8Row());
  switch (w.group_size) {
    case 8: return f(Affine4Q8Row<8>());
    case 16: return f(Affine4Q8Row<16>());
    case 32: return f(Affine4Q8Row<32>());
    case 64: return f(Affine4Q8Row<64>());
    default: return f(Affine4Q8Row<128>());
  }
}

template <class Row, int kParts>
void q8_matvec_rows_of(const WeightMatrix& w, const PreparedX& px, int64_t row_begin, int64_t row_end, float* y) {
  for (int64_t r = row_begin; r < row_end; ++r) Row::template row<kParts, 1, true>(w, r, &px, y + (r - row_begin), 0);
}

// The matvec of a vnni_matvec_shape matrix with x given as x_q8.
void q8_matvec_rows(const WeightMatrix& w, const PreparedX& px, int64_t row_begin, int64_t row_end, float* y) {
  with_q8_row(w, [&](auto row) {
    using Row = decltype(row);
    if (px.x_q8_parts == 3) return q8_matvec_rows_of<Row, 3>(w, px, row_begin, row_end, y);
    q8_matvec_rows_of<Row, 1>(w, px, row_begin, row_end, y);
  });
}

// Tokens per pass over a row in the decode-batch kernel: each 32 bytes of codes is unpacked once
// for all of them, and their 8 accumulators stay in registers. On the AVX2 host (one thread,
// hot 2048 x 2048 q4g64) the one-digit kernel costs ~0.35-0.5 of a matvec per token this way;
// 3 tokens per pass and 8 (one half of each chunk at a time, to free the registers) were no
// faster.
constexpr int kQ8PassTokens = 4;

// A decode batch on x_q8 (every token's): per block of rows, the tokens in passes of
// kQ8PassTokens over each row; the block's codes stay in L1 from one pass to the next, and only
// the first pass prefetches.
template <class Row, int kParts>
void q8_matvec_rows_multi_of(const WeightMatrix& w, const PreparedX* xs, int n, int64_t row_begin, int64_t row_end,
                             float* y, int64_t ldy) {
  in_token_passes<kQ8PassTokens>(n, row_begin, row_end, 4, [&](auto tokens, auto first, int64_t r, int t) {
    Row::template row<kParts, decltype(tokens)::value, bool(decltype(first)::value)>(w, r, xs + t,
                                                                                     y + t * ldy + (r - row_begin), ldy);
  });
}

void q8_matvec_rows_multi(const WeightMatrix& w, const PreparedX* xs, int n, int64_t row_begin, int64_t row_end,
                          float* y, int64_t ldy) {
  with_q8_row(w, [&](auto row) {
    using Row = decltype(row);
    if (xs[0].x_q8_parts == 3) return q8_matvec_rows_multi_of<Row, 3>(w, xs, n, row_begin, row_end, y, ldy);
    q8_matvec_rows_multi_of<Row, 1>(w, xs, n, row_begin, row_end, y, ldy);
  });
}

// bf16 rows against x_split (per 16 columns, the 8 even columns then the 8 odd ones): a 32-byte
// load holds 16 weights, and in each 32-bit lane the even one is the low half, the odd one the
// high half, so one shift and one mask make f32 of them (widening 8 weights the usual way costs
// a shuffle and a shift, and twice the loads). A tile of kRows rows x kTokens tokens: each
// (row, token) has one accumulator that takes every FMA of that row and token in column order,
// so its result does not depend on the tile's shape, and a decode batch's token equals the matvec
// bit for bit. The matvec runs 4 rows at a time (4 independent FMA chains; the load bandwidth of
// one row at a time was not the limit, the chain was), a decode batch 4 rows x 2 tokens: 8
// accumulators, the 2 tokens' x in 4 registers, each row's widened halves used twice.
template <int kRows, int kTokens, Prefetch kPrefetch>
__attribute__((always_inline)) inline void bf16_split_tile(const uint8_t* const* rows, const PreparedX* const* xs,
                                                           int64_t cols, float* y, int64_t ldy) {
  const __m256i odd_half = _mm256_set1_epi32(int(0xffff0000u));
  __m256 acc[kRows][kTokens];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 2
    for (int t = 0; t < kTokens; ++t) acc[r][t] = _mm256_setzero_ps();
  auto step16 = [&](int64_t c) {
    __m256 x_even[kTokens], x_odd[kTokens];
#pragma GCC unroll 2
    for (int t = 0; t < kTokens; ++t) {
      x_even[t] = _mm256_loadu_ps(xs[t]->x_split + c);
      x_odd[t] = _mm256_loadu_ps(xs[t]->x_split + c + 8);
    }
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[r] + 2 * c));
      const __m256 even = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
      const __m256 odd = _mm256_castsi256_ps(_mm256_and_si256(v, odd_half));
#pragma GCC unroll 2
      for (int t = 0; t < kTokens; ++t) {
        acc[r][t] = _mm256_fmadd_ps(even, x_even[t], acc[r][t]);
        acc[r][t] = _mm256_fmadd_ps(odd, x_odd[t], acc[r][t]);
      }
    }
  };
  int64_t c = 0;
  for (; c + 32 <= cols; c += 32) {
    if constexpr (kPrefetch != Prefetch::None) {
#pragma GCC unroll 4
      for (int r = 0; r < kRows; ++r)
        if constexpr (kPrefetch == Prefetch::Keep)
          _mm_prefetch(reinterpret_cast<const char*>(rows[r]) + 2 * c + kRowPrefetchBytes, _MM_HINT_T0);
        else
          prefetch_stream(reinterpret_cast<const char*>(rows[r]) + 2 * c + kRowPrefetchBytes);
    }
    step16(c);
    step16(c + 16);
  }
  if (c + 16 <= cols) {
    step16(c);
    c += 16;
  }
  // x_split covers whole chunks of 16 only: the rest of the row is read against x.
  for (; c < cols; c += 8) {
    const int64_t count = cols - c < 8 ? cols - c : 8;
    const __m256i mask = tail_mask(count);
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      const __m256 weights = count == 8 ? load8<WeightFormat::BF16>(rows[r], c)
                                        : load8_partial<WeightFormat::BF16>(rows[r], c, count);
#pragma GCC unroll 2
      for (int t = 0; t < kTokens; ++t)
        acc[r][t] = _mm256_fmadd_ps(weights, _mm256_maskload_ps(xs[t]->x + c, mask), acc[r][t]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 2
    for (int t = 0; t < kTokens; ++t) y[t * ldy + r] = reduce(acc[r][t]);
}

constexpr int kSplitTileRows = 4;

// Rows [row_begin, row_end) for kTokens tokens, kSplitTileRows at a time; y[t * ldy + (r - row_begin)].
template <int kTokens, Prefetch kPrefetch>
void bf16_split_rows(const WeightMatrix& w, const PreparedX* const* xs, int64_t row_begin, int64_t row_end,
                     float* y, int64_t ldy) {
  int64_t r = row_begin;
  const uint8_t* rows[kSplitTileRows];
  for (; r + kSplitTileRows <= row_end; r += kSplitTileRows) {
    for (int i = 0; i < kSplitTileRows; ++i) rows[i] = w.data + (r + i) * w.row_stride;
    bf16_split_tile<kSplitTileRows, kTokens, kPrefetch>(rows, xs, w.cols, y + (r - row_begin), ldy);
  }
  if (r == row_end) return;
  with_token_count<kSplitTileRows - 1>(int(row_end - r), [&](auto remaining) {
    constexpr int kRemaining = decltype(remaining)::value;
    for (int i = 0; i < kRemaining; ++i) rows[i] = w.data + (r + i) * w.row_stride;
    bf16_split_tile<kRemaining, kTokens, kPrefetch>(rows, xs, w.cols, y + (r - row_begin), ldy);
  });
}

bool affine_fast_path(const WeightMatrix& w) { return w.group_size % 16 == 0; }

void matvec_rows(const WeightMatrix& w, const PreparedX& px, int64_t row_begin, int64_t row_end,
                 float* y) {
  switch (w.format) {
    case WeightFormat::F32:
      for (int64_t r = row_begin; r < row_end; ++r)
        y[r - row_begin] = dot_dense<WeightFormat::F32>(w.data + r * w.row_stride, px.x, w.cols);
      return;
    case WeightFormat::BF16: {
      if (px.x_split) {
        const PreparedX* x = &px;
        return bf16_split_rows<1, Prefetch::NonTemporal>(w, &x, row_begin, row_end, y, 0);
      }
      for (int64_t r = row_begin; r < row_end; ++r)
        y[r - row_begin] = dot_dense<WeightFormat::BF16>(w.data + r * w.row_stride, px.x, w.cols);
      return;
    }
    case WeightFormat::F16:
      for (int64_t r = row_begin; r < row_end; ++r)
        y[r - row_begin] = dot_dense<WeightFormat::F16>(w.data + r * w.row_stride, px.x, w.cols);
      return;
    case WeightFormat::Affine:
      if (px.x_q8 && w.bits == 4) return q8_matvec_rows(w, px, row_begin, row_end, y);
      if (affine_fast_path(w)) {
        for (int64_t r = row_begin; r < row_end; ++r)
          y[r - row_begin] = w.bits == 4 ? dot_affine<4>(w, r, px) : dot_affine<8>(w, r, px);
        return;
      }
      break;
    case WeightFormat::Ggml:
      if (px.x_g8) return ggml_rows_q8(w.ggml_type)(w, &px, 1, row_begin, row_end, y, 0);
      if (const GgmlRowDot dot = ggml_row_dot_avx2(w.ggml_type)) {
        const int64_t blocks = w.cols / ggml_type_info(w.ggml_type).block_elements;
        for (int64_t r = row_begin; r < row_end; ++r) y[r - row_begin] = dot(w.data + r * w.row_stride, px.x, blocks);
        return;
      }
      break;  // the scalar reference after the switch
    case WeightFormat::NvFp4:
      if (px.x_q8) return q8_matvec_rows(w, px, row_begin, row_end, y);
      for (int64_t r = row_begin; r < row_end; ++r) y[r - row_begin] = dot_nvfp4(w, r, px);
      return;
  }
  scalar_backend().matvec_rows(w, px, row_begin, row_end, y);
}

// Tokens per pass over a dense row (4 accumulators each): two tokens' x (8 KiB each at 2048
// columns) stay in L1 beside the rows going by; three measured no faster.
constexpr int kDensePassTokens = 2;

// A decode batch on dense rows: per block of ~32 KiB of rows (L2-resident between passes), the
// tokens in passes of kDensePassTokens, whose x (8 KiB each at 2048 columns) stay in L1 while the
// block's rows go by; the first pass prefetches the stream into every cache level for the others.
// bf16 rows take the split tiles when every token has x_split.
template <WeightFormat F>
void dense_rows_multi(const WeightMatrix& w, const PreparedX* xs, int n, int64_t row_begin, int64_t row_end,
                      float* y, int64_t ldy) {
  bool split = F == WeightFormat::BF16;
  for (int t = 0; t < n && split; ++t) split = xs[t].x_split != nullptr;
  constexpr int64_t kBlockBytes = 32 << 10;
  const int64_t block_rows = w.row_stride >= kBlockBytes ? 1 : kBlockBytes / w.row_stride;
  const int passes = (n + kDensePassTokens - 1) / kDensePassTokens;
  for (int64_t begin = row_begin; begin < row_end; begin += block_rows) {
    const int64_t end = min_i64(row_end, begin + block_rows);
    // The first pass over a block waits on memory, the others compute from L2: the later passes
    // bring the next block into L2 meanwhile, a share of its rows each.
    const int64_t next_rows = min_i64(row_end, end + block_rows) - end;
    auto prefetch_next_block = [&](int pass) {
      const int64_t share = (next_rows + passes - 2) / (passes - 1);
      const int64_t first = end + (pass - 1) * share, last = min_i64(end + next_rows, first + share);
      for (int64_t r = first; r < last; ++r) {
        const char* row = reinterpret_cast<const char*>(w.data + r * w.row_stride);
        for (int64_t line = 0; line < w.cols * 2; line += 64) _mm_prefetch(row + line, _MM_HINT_T1);
      }
    };
    for (int t = 0; t < n; t += kDensePassTokens) {
      const int count = n - t < kDensePassTokens ? n - t : kDensePassTokens;
      with_token_count<kDensePassTokens>(count, [&](auto tokens) {
        constexpr int kTokens = decltype(tokens)::value;
        float* out = y + t * ldy + (begin - row_begin);
        if (split) {
          const PreparedX* x[kTokens];
          for (int i = 0; i < kTokens; ++i) x[i] = &xs[t + i];
          if (t > 0) prefetch_next_block(t / kDensePassTokens);
          if (t == 0)
            bf16_split_rows<kTokens, Prefetch::Keep>(w, x, begin, end, out, ldy);
          else
            bf16_split_rows<kTokens, Prefetch::None>(w, x, begin, end, out, ldy);
          return;
        }
        const float* x[kTokens];
        for (int i = 0; i < kTokens; ++i) x[i] = xs[t + i].x;
        for (int64_t r = begin; r < end; ++r) {
          const uint8_t* row = w.data + r * w.row_stride;
          if (t == 0)
            dense_row_dots<F, kTokens, Prefetch::Keep>(row, x, w.cols, out + (r - begin), ldy);
          else
            dense_row_dots<F, kTokens, Prefetch::None>(row, x, w.cols, out + (r - begin), ldy);
        }
      });
    }
  }
}

// Decode batches: the dense formats, the 4-bit integer decode and the ggml integer decode
// (ggml_q8_avx2.cpp) have multi-token kernels; the other formats, and 4-bit or ggml batches in which some token has no x_q8 (an inf or NaN in its x), go
// token by token.
void matvec_rows_multi(const WeightMatrix& w, const PreparedX* xs, int n, int64_t row_begin, int64_t row_end,
                       float* y, int64_t ldy) {
  switch (w.format) {
    case WeightFormat::F32: return dense_rows_multi<WeightFormat::F32>(w, xs, n, row_begin, row_end, y, ldy);
    case WeightFormat::BF16: return dense_rows_multi<WeightFormat::BF16>(w, xs, n, row_begin, row_end, y, ldy);
    case WeightFormat::F16: return dense_rows_multi<WeightFormat::F16>(w, xs, n, row_begin, row_end, y, ldy);
    default: break;
  }
  if (w.format == WeightFormat::Ggml) {
    bool all_g8 = true;
    for (int t = 0; t < n && all_g8; ++t) all_g8 = xs[t].x_g8 != nullptr;
    if (all_g8) return ggml_rows_q8(w.ggml_type)(w, xs, n, row_begin, row_end, y, ldy);
  }
  bool all_q8 = w.format == WeightFormat::NvFp4 || (w.format == WeightFormat::Affine && w.bits == 4);
  for (int t = 0; t < n && all_q8; ++t) all_q8 = xs[t].x_q8 && xs[t].x_q8_parts == xs[0].x_q8_parts;
  if (all_q8) return q8_matvec_rows_multi(w, xs, n, row_begin, row_end, y, ldy);
  matvec_rows_each_token(matvec_rows, w, xs, n, row_begin, row_end, y, ldy);
}

// Prefill tiles of 3 rows x 4 tokens: 12 FMA chains (4 x 2 gave 8, exactly Zen 3's FMA latency x
// throughput, and ran at 40% of peak) in the 16 ymm registers; 2 x 6 read X from L2 too fast.
struct Kernel256 {
  static constexpr int kLanes = 8;
  static constexpr int kRows = 3;
  static constexpr int kTokens = 4;

  static void decode_row(const WeightMatrix& w, int64_t r, float* out) {
    const uint8_t* row = w.data + r * w.row_stride;
    const int64_t cols = w.cols;
    switch (w.format) {
      case WeightFormat::F32:
      case WeightFormat::BF16:
      case WeightFormat::F16: {
        int64_t c = 0;
        for (; c + 8 <= cols; c += 8) {
          __m256 v = w.format == WeightFormat::F32    ? load8<WeightFormat::F32>(row, c)
                     : w.format == WeightFormat::BF16 ? load8<WeightFormat::BF16>(row, c)
                                                      : load8<WeightFormat::F16>(row, c);
          _mm256_storeu_ps(out + c, v);
        }
        if (c < cols) break;  // rare tail: whole row through the reference
        return;
      }
      case WeightFormat::Affine: {
        if (!affine_fast_path(w)) break;
        const uint8_t* scales = w.scales + r * w.scales_row_stride;
        const uint8_t* biases = w.biases + r * w.biases_row_stride;
        const __m256i low_nibble = _mm256_set1_epi32(15);
        for (int64_t c = 0; c < cols; c += 16) {
          const int64_t g = c / w.group_size;
          __m256 scale = _mm256_set1_ps(load_param(scales, w.scale_dtype, g));
          __m256 bias = _mm256_set1_ps(load_param(biases, w.scale_dtype, g));
          if (w.bits == 4) {
            __m256i d = _mm256_cvtepu8_epi32(load_u8x8(row + c / 2));
            __m256 even = _mm256_fmadd_ps(
                _mm256_cvtepi32_ps(_mm256_and_si256(d, low_nibble)), scale, bias);
            __m256 odd =
                _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(d, 4)), scale, bias);
            // unpack interleaves within 128-bit lanes; permute2f128 puts the halves in order.
            __m256 a = _mm256_unpacklo_ps(even, odd), b = _mm256_unpackhi_ps(even, odd);
            _mm256_storeu_ps(out + c, _mm256_permute2f128_ps(a, b, 0x20));
            _mm256_storeu_ps(out + c + 8, _mm256_permute2f128_ps(a, b, 0x31));
          } else {
            for (int h = 0; h < 16; h += 8) {
              __m256 codes = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(load_u8x8(row + c + h)));
              _mm256_storeu_ps(out + c + h, _mm256_fmadd_ps(codes, scale, bias));
            }
          }
        }
        return;
      }
      case WeightFormat::Ggml: break;  // the generic fallback after the switch
      case WeightFormat::NvFp4: {
        if (cols % 16 != 0) break;
        const uint8_t* scales = w.scales + r * w.scales_row_stride;
        const float* table = e4m3_table();
        const __m256 magnitudes = fp4_magnitudes();
        for (int64_t c = 0; c < cols; c += 16) {
          __m256i d = _mm256_cvtepu8_epi32(load_u8x8(row + c / 2));
          __m256 scale = _mm256_set1_ps(table[scales[c / 16]] * w.global_scale);
          __m256 even = _mm256_mul_ps(fp4_to_f32(d, magnitudes), scale);
          __m256 odd = _mm256_mul_ps(fp4_to_f32(_mm256_srli_epi32(d, 4), magnitudes), scale);
          __m256 a = _mm256_unpacklo_ps(even, odd), b = _mm256_unpackhi_ps(even, odd);
          _mm256_storeu_ps(out + c, _mm256_permute2f128_ps(a, b, 0x20));
          _mm256_storeu_ps(out + c + 8, _mm256_permute2f128_ps(a, b, 0x31));
        }
        return;
      }
    }
    dequantize_row(w, r, out);
  }

  template <int R, int T>
  static void tile(const float* w, int64_t ldw, const float* x, int64_t ldx, int64_t cols,
                   float* y, int64_t ldy) {
    __m256 acc[R][T];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 <= cols; k += 8) {
      __m256 wv[R];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) wv[r] = _mm256_loadu_ps(w + r * ldw + k);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        __m256 xv = _mm256_loadu_ps(x + t * ldx + k);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
      }
    }
    if (k < cols) {
      __m256i mask = tail_mask(cols - k);
      __m256 wv[R];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) wv[r] = _mm256_loadu_ps(w + r * ldw + k);  // zero padded
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        __m256 xv = _mm256_maskload_ps(x + t * ldx + k, mask);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) y[t * ldy + r] = reduce(acc[r][t]);
  }
};

void matmul_rows(const WeightMatrix& w, const float* x, int64_t n, int64_t row_begin,
                 int64_t row_end, float* y, int64_t ldy) {
  matmul_rows_tiled<Kernel256>(w, x, n, row_begin, row_end, y, ldy);
}

float dot_f32(const float* a, const float* b, int64_t n) {
  return dot_dense<WeightFormat::F32>(reinterpret_cast<const uint8_t*>(a), b, n);
}

float sum_squares_f32(const float* x, int64_t n) { return dot_f32(x, x, n); }

void axpy_f32(float a, const float* x, float* y, int64_t n) {
  const __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

double fma_burn(int64_t iterations, float* sink) {
  constexpr int kChains = 12;
  __m256 acc[kChains];
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
#pragma GCC unroll 12
  for (int i = 0; i < kChains; ++i) acc[i] = _mm256_set1_ps(float(i));
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  __m256 total = acc[0];
#pragma GCC unroll 12
  for (int i = 1; i < kChains; ++i) total = _mm256_add_ps(total, acc[i]);
  *sink = reduce(total);
  return double(iterations) * kChains * kLanes * 2;
}

uint64_t stream_sum(const uint64_t* data, size_t words) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 16 <= words; i += 16) {
    const char* ahead = reinterpret_cast<const char*>(data + i) + kProbePrefetchBytes;
    prefetch_stream(ahead);
    prefetch_stream(ahead + 64);
    a0 = _mm256_add_epi64(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(data + i)));
    a1 = _mm256_add_epi64(a1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(data + i + 4)));
    a2 = _mm256_add_epi64(a2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(data + i + 8)));
    a3 = _mm256_add_epi64(a3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(data + i + 12)));
  }
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                     _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

}  // namespace

const Backend& avx2_backend() {
  static const Backend backend{Isa::Avx2,        16,          0,       Kernel256::kRows, matvec_rows,
                               matvec_rows_multi, matmul_rows, dot_f32, axpy_f32,         sum_squares_f32,
                               fma_burn,          stream_sum,  quantize_q8_avx2};
  return backend;
}

}  // namespace inkling::kernels::detail
