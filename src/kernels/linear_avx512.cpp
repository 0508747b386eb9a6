// AVX-512 kernels (Zen 4 / Ice Lake and later). Compiled with AVX-512 flags; only reached after
// isa_supported(Isa::Avx512).
//
// Decode is memory-bound, so each format is decoded in registers straight into FMAs:
// bf16 -> f32 is a 16-bit shift, f16 uses vcvtph2ps, 4/8-bit codes are widened with vpmovzxbd,
// NVFP4 nibbles become floats through a 16-entry vpermps table. For 4-bit formats the
// activation vector is pre-split per 32 columns into [even, odd] halves (PreparedX::x_split), so
// low and high nibbles are used as they come out of the byte without re-interleaving.
// vdpbf16ps and VNNI are not used: both need the activations rounded to bf16 / int8, which costs
// more accuracy than the f32-activation contract allows for no gain on a memory-bound matvec.
// GCC 12 reports its own _mm512_undefined_* helpers as uninitialized once inlined.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <utility>

#include "kernels/backend.h"

namespace inkling::kernels::detail {
namespace {

#include "kernels/simd_common.h"
#include "kernels/simd_avx512.h"

constexpr int kLanes = 16;


template <WeightFormat F>
inline __m512 load16(const uint8_t* row, int64_t c) {
  if constexpr (F == WeightFormat::F32) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + c);
  } else if constexpr (F == WeightFormat::BF16) {
    __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * c));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
  } else {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * c)));
  }
}

template <WeightFormat F>
inline __m512 load16_masked(const uint8_t* row, int64_t c, __mmask16 mask) {
  if constexpr (F == WeightFormat::F32) {
    return _mm512_maskz_loadu_ps(mask, reinterpret_cast<const float*>(row) + c);
  } else if constexpr (F == WeightFormat::BF16) {
    __m256i bits = _mm256_maskz_loadu_epi16(mask, row + 2 * c);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
  } else {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, row + 2 * c));
  }
}

template <WeightFormat F>
float dot_dense(const uint8_t* row, const float* x, int64_t cols) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  __m512 a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + 64 <= cols; c += 64) {
    a0 = _mm512_fmadd_ps(load16<F>(row, c), _mm512_loadu_ps(x + c), a0);
    a1 = _mm512_fmadd_ps(load16<F>(row, c + 16), _mm512_loadu_ps(x + c + 16), a1);
    a2 = _mm512_fmadd_ps(load16<F>(row, c + 32), _mm512_loadu_ps(x + c + 32), a2);
    a3 = _mm512_fmadd_ps(load16<F>(row, c + 48), _mm512_loadu_ps(x + c + 48), a3);
  }
  for (; c + 16 <= cols; c += 16)
    a0 = _mm512_fmadd_ps(load16<F>(row, c), _mm512_loadu_ps(x + c), a0);
  if (c < cols) {
    __mmask16 mask = tail_mask(cols - c);
    a1 = _mm512_fmadd_ps(load16_masked<F>(row, c, mask), _mm512_maskz_loadu_ps(mask, x + c), a1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}



inline __m512 fp4_table() {
  return _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f,
                        -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
}

// ---- matvec: kMatvecRows rows at a time --------------------------------------------------
// Working on several rows per pass loads each x vector once for all of them: with one row the
// x loads, not the weight stream, would bound the loop.
constexpr int kMatvecRows = 4;

template <WeightFormat F, int R>
void dense_rows(const WeightMatrix& w, int64_t r, const float* x, float* y) {
  const uint8_t* rows[R];
  __m512 acc0[R], acc1[R];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    rows[i] = w.data + (r + i) * w.row_stride;
    acc0[i] = acc1[i] = _mm512_setzero_ps();
  }
  const int64_t cols = w.cols;
  int64_t c = 0;
  constexpr int64_t kElementBytes = F == WeightFormat::F32 ? 4 : 2;
  for (; c + 32 <= cols; c += 32) {
    if constexpr (R == 1) {  // one row at a time (decode): prefetch the stream ahead
      const char* ahead = reinterpret_cast<const char*>(rows[0] + c * kElementBytes) + kStreamPrefetchBytes;
      for (int64_t line = 0; line < 32 * kElementBytes; line += 64) _mm_prefetch(ahead + line, _MM_HINT_T0);
    }
    const __m512 x0 = _mm512_loadu_ps(x + c), x1 = _mm512_loadu_ps(x + c + 16);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      acc0[i] = _mm512_fmadd_ps(load16<F>(rows[i], c), x0, acc0[i]);
      acc1[i] = _mm512_fmadd_ps(load16<F>(rows[i], c + 16), x1, acc1[i]);
    }
  }
  for (; c < cols; c += 16) {
    const __mmask16 mask = cols - c >= 16 ? __mmask16(0xffff) : tail_mask(cols - c);
    const __m512 x0 = _mm512_maskz_loadu_ps(mask, x + c);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i)
      acc0[i] = _mm512_fmadd_ps(load16_masked<F>(rows[i], c, mask), x0, acc0[i]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) y[i] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[i], acc1[i]));
}

// One bf16 row (decode, exact precision) against x_split (per 32 columns: the even columns, then
// the odd ones). A 64-byte load holds 32 weights; each dword shifted left 16 is the even one as
// f32, with its low half masked off the odd one: two ops per 32 weights where widening each half
// of the load takes four. Columns past the last full 32 come from x in natural order.
// Prefetch distance 4 KiB rather than kStreamPrefetchBytes: cold, the bench head (201024 x 2048)
// on one core read at 93% of a core's probe with 2 KiB and 97-99% with 4 KiB (in-process
// alternation, two runs of 6 rounds; two threads in a slow phase: level).
// Four accumulators (64 columns a step): with two, a 2048-column row is a chain of 64 dependent
// FMAs, ~256 cycles a row; cache-resident on two threads four are +14%, whole-model exact bf16
// decode +2-4% where the host gives two cores ~80 GB/s (8 alternating rounds).
// Non-temporal like the fast bf16 rows (linear_avx512bf16.cpp): whole-model exact bf16 decode
// +2.2% against T0 (20 in-process rounds, median ratio).
constexpr int64_t kSplitRowPrefetchBytes = 4096;
float bf16_split_row(const uint8_t* row, const float* x_split, const float* x, int64_t cols) {
  const uint16_t* w = reinterpret_cast<const uint16_t*>(row);
  const __m512i odd_half = _mm512_set1_epi32(int(0xffff0000u));
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), b0 = _mm512_setzero_ps(), b1 = _mm512_setzero_ps();
  auto step32 = [&](int64_t c, __m512& even, __m512& odd) {
    prefetch_stream(reinterpret_cast<const char*>(w + c) + kSplitRowPrefetchBytes);
    const __m512i v = _mm512_loadu_si512(w + c);
    even = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(v, 16)), _mm512_loadu_ps(x_split + c), even);
    odd = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(v, odd_half)), _mm512_loadu_ps(x_split + c + 16), odd);
  };
  int64_t c = 0;
  for (; c + 64 <= cols; c += 64) {
    step32(c, a0, a1);
    step32(c + 32, b0, b1);
  }
  if (c + 32 <= cols) {
    step32(c, a0, a1);
    c += 32;
  }
  a0 = _mm512_add_ps(a0, b0);
  a1 = _mm512_add_ps(a1, b1);
  for (; c < cols; c += 16) {
    const __mmask16 mask = cols - c >= 16 ? __mmask16(0xffff) : tail_mask(cols - c);
    a0 = _mm512_fmadd_ps(load16_masked<WeightFormat::BF16>(row, c, mask), _mm512_maskz_loadu_ps(mask, x + c), a0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

// W[r] . x = sum_g scale[g] * dot(codes_g, x_g) + bias[g] * sum(x_g). Needs group_size % 32 == 0.
template <int kBits, int R>
void affine_rows(const WeightMatrix& w, int64_t r, const PreparedX& px, float* y) {
  const uint8_t* codes[R];
  const uint8_t* scales[R];
  __m512 acc[R];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    codes[i] = w.data + (r + i) * w.row_stride;
    scales[i] = w.scales + (r + i) * w.scales_row_stride;
    acc[i] = _mm512_setzero_ps();
  }
  const int64_t groups = w.cols / w.group_size;
  const float* xs = kBits == 4 ? px.x_split : px.x;
  const __m512 code_values = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int64_t g = 0; g < groups; ++g) {
    __m512 even[R], odd[R];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) even[i] = odd[i] = _mm512_setzero_ps();
    for (int64_t c = g * w.group_size; c < (g + 1) * w.group_size; c += 32) {
      const __m512 x0 = _mm512_loadu_ps(xs + c), x1 = _mm512_loadu_ps(xs + c + 16);
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) {
        if constexpr (kBits == 4) {
          // Low nibbles are the even columns, high nibbles the odd ones (x_split's order).
          __m512i d = _mm512_cvtepu8_epi32(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes[i] + c / 2)));
          // vpermps on the 16 code values reads only index bits [3:0]: no mask, no convert.
          even[i] = _mm512_fmadd_ps(_mm512_permutexvar_ps(d, code_values), x0, even[i]);
          odd[i] = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(d, 4), code_values),
                                   x1, odd[i]);
        } else {
          __m512i d0 = _mm512_cvtepu8_epi32(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes[i] + c)));
          __m512i d1 = _mm512_cvtepu8_epi32(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes[i] + c + 16)));
          even[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d0), x0, even[i]);
          odd[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d1), x1, odd[i]);
        }
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i)
      acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(load_param(scales[i], w.scale_dtype, g)),
                               _mm512_add_ps(even[i], odd[i]), acc[i]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i)
    y[i] = _mm512_reduce_add_ps(acc[i]) +
           affine_bias_dot(w.biases + (r + i) * w.biases_row_stride, w.scale_dtype,
                           px.group_sums, groups);
}


template <int R>
void nvfp4_rows(const WeightMatrix& w, int64_t r, const PreparedX& px, float* y) {
  const uint8_t* codes[R];
  const uint8_t* scales[R];
  __m512 acc[R], block_scales[R];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    codes[i] = w.data + (r + i) * w.row_stride;
    scales[i] = w.scales + (r + i) * w.scales_row_stride;
    acc[i] = block_scales[i] = _mm512_setzero_ps();
  }
  const __m512 values = fp4_table();
  const int64_t chunks = w.cols / 32, blocks = w.cols / 16;
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const int sub = int(ch & 7);
    if (sub == 0) {  // scales of the next 8 chunks (16 blocks), converted 16 at a time
      const int64_t left = blocks - 2 * ch;
      const __mmask16 mask = left >= 16 ? __mmask16(0xffff) : tail_mask(left);
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) block_scales[i] = e4m3x16_to_f32(scales[i] + 2 * ch, mask);
    }
    // A 16-byte load covers blocks 2 * sub and 2 * sub + 1: lanes 0-7 and 8-15 of both the
    // low- and the high-nibble vector.
    const __m512i spread = _mm512_add_epi32(
        _mm512_set1_epi32(2 * sub),
        _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1));
    const __m512 x0 = _mm512_loadu_ps(px.x_split + 32 * ch);
    const __m512 x1 = _mm512_loadu_ps(px.x_split + 32 * ch + 16);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      __m512i d = _mm512_cvtepu8_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes[i] + 16 * ch)));
      __m512 t = _mm512_mul_ps(_mm512_permutexvar_ps(d, values), x0);  // vpermps: bits [3:0]
      t = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(d, 4), values), x1, t);
      acc[i] = _mm512_fmadd_ps(t, _mm512_permutexvar_ps(spread, block_scales[i]), acc[i]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    const float tail = nvfp4_tail_dot(codes[i], scales[i], px.x, chunks * 32, w.cols);
    y[i] = (_mm512_reduce_add_ps(acc[i]) + tail) * w.global_scale;
  }
}

// ---- 4-bit matvec in nibble-lane order (cols % 128 == 0) ------------------------------------
// A 64-byte load holds 128 codes; 32-bit lane l carries columns 8 l .. 8 l + 7 as nibbles
// 0..7. Nibble k of all 16 lanes is one shift away, and x_nibble_lanes supplies the matching x.
// Byte-widening (vpmovzxbd) and the scale/blend shuffles of the per-32-column path are
// 512-bit cross-lane shuffles, which Zen 4 issues at half rate; this layout needs none of them
// for affine codes and one table lookup per 16 codes for NVFP4.

// Nibble kK of each 32-bit lane moved to bits [19, 23), the top of an f32 mantissa.
template <int kK>
inline __m512i nibble_to_mantissa(__m512i v) {
  if constexpr (kK <= 4)
    return _mm512_slli_epi32(v, 19 - 4 * kK);
  else
    return _mm512_srli_epi32(v, 4 * kK - 19);
}

// Affine: with f = 1 + code / 16 (the nibble OR-ed into the mantissa of 1.0, exact),
// scale * code + bias = 16 * scale * f + (bias - 16 * scale). So per row
// W . x = 16 * sum_g scale_g * dot(f_g, x_g) + sum_g (bias_g - 16 * scale_g) * sum(x_g).
template <int R>
void affine4_lanes_rows(const WeightMatrix& w, int64_t r, const PreparedX& px, float* y) {
  const uint8_t* codes[R];
  const uint8_t* scales[R];
  __m512 acc[R];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    codes[i] = w.data + (r + i) * w.row_stride;
    scales[i] = w.scales + (r + i) * w.scales_row_stride;
    acc[i] = _mm512_setzero_ps();
  }
  const __m512i mantissa = _mm512_set1_epi32(0x00780000), one = _mm512_set1_epi32(0x3f800000);
  const int64_t chunks = w.cols / 128, groups = w.cols / w.group_size;
  const int groups_per_chunk = int(128 / w.group_size);  // 1, 2 or 4
  // Lane l of a chunk belongs to group 8 l / group_size of the chunk.
  const __m512i lane_group = _mm512_srli_epi32(
      _mm512_setr_epi32(0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120),
      __builtin_ctz(unsigned(w.group_size)));
  __m512 scale_block[R];
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const float* xk = px.x_nibble_lanes + 128 * ch;
    __m512i v[R];
    __m512 t0[R], t1[R];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      v[i] = _mm512_loadu_si512(codes[i] + 64 * ch);
      t0[i] = t1[i] = _mm512_setzero_ps();
    }
    auto step = [&]<int kK>(std::integral_constant<int, kK>) {
      const __m512 xv = _mm512_loadu_ps(xk + 16 * kK);
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) {
        // (shifted & mantissa) | one in one vpternlogd.
        __m512 f = _mm512_castsi512_ps(
            _mm512_ternarylogic_epi32(nibble_to_mantissa<kK>(v[i]), mantissa, one, 0xea));
        if constexpr (kK % 2 == 0)
          t0[i] = _mm512_fmadd_ps(f, xv, t0[i]);
        else
          t1[i] = _mm512_fmadd_ps(f, xv, t1[i]);
      }
    };
    step(std::integral_constant<int, 0>());
    step(std::integral_constant<int, 1>());
    step(std::integral_constant<int, 2>());
    step(std::integral_constant<int, 3>());
    step(std::integral_constant<int, 4>());
    step(std::integral_constant<int, 5>());
    step(std::integral_constant<int, 6>());
    step(std::integral_constant<int, 7>());
    const int64_t first_group = ch * groups_per_chunk;
    if (first_group % 16 == 0) {  // convert the scales of the next 16 groups once
      const int64_t left = groups - first_group;
      const __mmask16 mask = left >= 16 ? __mmask16(0xffff) : tail_mask(left);
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i)
        scale_block[i] = load_params16(scales[i], w.scale_dtype, first_group, mask);
    }
    const __m512i lane_scale =
        _mm512_add_epi32(lane_group, _mm512_set1_epi32(int(first_group % 16)));
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i)
      acc[i] = _mm512_fmadd_ps(_mm512_add_ps(t0[i], t1[i]),
                               _mm512_permutexvar_ps(lane_scale, scale_block[i]), acc[i]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    const float scale_term = affine_bias_dot(scales[i], w.scale_dtype, px.group_sums, groups);
    const float bias_term = affine_bias_dot(w.biases + (r + i) * w.biases_row_stride,
                                            w.scale_dtype, px.group_sums, groups);
    y[i] = 16.0f * (_mm512_reduce_add_ps(acc[i]) - scale_term) + bias_term;
  }
}

template <int R>
void nvfp4_lanes_rows(const WeightMatrix& w, int64_t r, const PreparedX& px, float* y) {
  const uint8_t* codes[R];
  const uint8_t* scales[R];
  __m512 acc[R], block_scales[R];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    codes[i] = w.data + (r + i) * w.row_stride;
    scales[i] = w.scales + (r + i) * w.scales_row_stride;
    acc[i] = block_scales[i] = _mm512_setzero_ps();
  }
  const __m512 values = fp4_table();
  const int64_t chunks = w.cols / 128;
  for (int64_t ch = 0; ch < chunks; ++ch) {
    if ((ch & 1) == 0) {  // the 16 block scales of this chunk and the next
      const __mmask16 mask = ch + 1 < chunks ? __mmask16(0xffff) : __mmask16(0xff);
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) block_scales[i] = e4m3x16_to_f32(scales[i] + 8 * ch, mask);
    }
    // Lane l covers columns 8 l .. 8 l + 7: block l / 2 of this chunk.
    const __m512i spread = _mm512_add_epi32(
        _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7),
        _mm512_set1_epi32(int(8 * (ch & 1))));
    const float* xk = px.x_nibble_lanes + 128 * ch;
    __m512i v[R];
    __m512 t0[R], t1[R];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      v[i] = _mm512_loadu_si512(codes[i] + 64 * ch);
      t0[i] = t1[i] = _mm512_setzero_ps();
    }
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      const __m512 xv = _mm512_loadu_ps(xk + 16 * k);
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) {
        // vpermps reads only index bits [3:0]: nibble k after one shift, no mask.
        __m512 value = _mm512_permutexvar_ps(_mm512_srli_epi32(v[i], 4 * k), values);
        if (k % 2 == 0)
          t0[i] = _mm512_fmadd_ps(value, xv, t0[i]);
        else
          t1[i] = _mm512_fmadd_ps(value, xv, t1[i]);
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i)
      acc[i] = _mm512_fmadd_ps(_mm512_add_ps(t0[i], t1[i]),
                               _mm512_permutexvar_ps(spread, block_scales[i]), acc[i]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) y[i] = _mm512_reduce_add_ps(acc[i]) * w.global_scale;
}

bool affine_fast_path(const WeightMatrix& w) { return w.group_size % 32 == 0; }

// Decode matvecs read one row at a time where x fits in L1 beside the weight stream: each thread
// then reads memory strictly in order, the prefetchers' best case. Past this width x (f32) no
// longer fits, and blocks of kMatvecRows rows share each x load instead. A/B of the exact 4-bit
// kernels (INKLING_EXACT=1 tools/ab_kernels.py, 4 rounds), one row against 4-row blocks: cold
// 2048-column matrices +19-39%, 8192-column ones -24-28%.
constexpr int64_t kSingleRowMaxCols = 4096;

// kernel(std::integral_constant<int, R>, r, y) for blocks of kMatvecRows rows, then single rows.
template <class Kernel>
void for_row_blocks(int64_t row_begin, int64_t row_end, float* y, const Kernel& kernel) {
  int64_t r = row_begin;
  for (; r + kMatvecRows <= row_end; r += kMatvecRows)
    kernel(std::integral_constant<int, kMatvecRows>(), r, y + (r - row_begin));
  for (; r < row_end; ++r) kernel(std::integral_constant<int, 1>(), r, y + (r - row_begin));
}

// The same kernel one row at a time up to kSingleRowMaxCols columns, in row blocks past that.
template <class Kernel>
void for_decode_rows(int64_t cols, int64_t row_begin, int64_t row_end, float* y, const Kernel& kernel) {
  if (cols > kSingleRowMaxCols) return for_row_blocks(row_begin, row_end, y, kernel);
  for (int64_t r = row_begin; r < row_end; ++r) kernel(std::integral_constant<int, 1>(), r, y + (r - row_begin));
}

void matvec_rows(const WeightMatrix& w, const PreparedX& px, int64_t row_begin, int64_t row_end,
                 float* y) {
  switch (w.format) {
    case WeightFormat::F32:
      for_row_blocks(row_begin, row_end, y, [&](auto rows, int64_t r, float* out) {
        dense_rows<WeightFormat::F32, decltype(rows)::value>(w, r, px.x, out);
      });
      return;
    case WeightFormat::BF16:
      if (px.x_bf16) return bf16_matvec_rows(w, px.x_bf16, row_begin, row_end, y);
      if (px.x_split && w.cols <= kSingleRowMaxCols) {
        for (int64_t r = row_begin; r < row_end; ++r)
          y[r - row_begin] = bf16_split_row(w.data + r * w.row_stride, px.x_split, px.x, w.cols);
        return;
      }
      for_decode_rows(w.cols, row_begin, row_end, y, [&](auto rows, int64_t r, float* out) {
        dense_rows<WeightFormat::BF16, decltype(rows)::value>(w, r, px.x, out);
      });
      return;
    case WeightFormat::F16:
      for_row_blocks(row_begin, row_end, y, [&](auto rows, int64_t r, float* out) {
        dense_rows<WeightFormat::F16, decltype(rows)::value>(w, r, px.x, out);
      });
      return;
    case WeightFormat::Affine:
      if (px.x_q8 && w.bits == 4) return vnni_matvec_rows(w, px, row_begin, row_end, y);
      if (!affine_fast_path(w)) break;
      if (w.bits == 4 && px.x_nibble_lanes && 128 % w.group_size == 0) {
        for_decode_rows(w.cols, row_begin, row_end, y, [&](auto rows, int64_t r, float* out) {
          affine4_lanes_rows<decltype(rows)::value>(w, r, px, out);
        });
      } else if (w.bits == 4) {
        for_row_blocks(row_begin, row_end, y, [&](auto rows, int64_t r, float* out) {
          affine_rows<4, decltype(rows)::value>(w, r, px, out);
        });
      } else {
        for_row_blocks(row_begin, row_end, y, [&](auto rows, int64_t r, float* out) {
          affine_rows<8, decltype(rows)::value>(w, r, px, out);
        });
      }
      return;
    case WeightFormat::Ggml: break;  // the generic fallback after the switch
    case WeightFormat::NvFp4:
      if (px.x_q8) return vnni_matvec_rows(w, px, row_begin, row_end, y);
      if (px.x_nibble_lanes) {
        for_decode_rows(w.cols, row_begin, row_end, y, [&](auto rows, int64_t r, float* out) {
          nvfp4_lanes_rows<decltype(rows)::value>(w, r, px, out);
        });
        return;
      }
      for_row_blocks(row_begin, row_end, y, [&](auto rows, int64_t r, float* out) {
        nvfp4_rows<decltype(rows)::value>(w, r, px, out);
      });
      return;
  }
  scalar_backend().matvec_rows(w, px, row_begin, row_end, y);
}

// Prefill kernel: rows decoded to f32, then a register tile of R rows x T tokens.
struct Kernel512 {
  static constexpr int kLanes = 16;
  static constexpr int kRows = 4;
  static constexpr int kTokens = 6;

  static void decode_row(const WeightMatrix& w, int64_t r, float* out) {
    const uint8_t* row = w.data + r * w.row_stride;
    const int64_t cols = w.cols;
    switch (w.format) {
      case WeightFormat::F32:
      case WeightFormat::F16:
      case WeightFormat::BF16: {
        int64_t c = 0;
        for (; c + 16 <= cols; c += 16) {
          __m512 v = w.format == WeightFormat::F32    ? load16<WeightFormat::F32>(row, c)
                     : w.format == WeightFormat::BF16 ? load16<WeightFormat::BF16>(row, c)
                                                      : load16<WeightFormat::F16>(row, c);
          _mm512_storeu_ps(out + c, v);
        }
        if (c < cols) {
          __mmask16 m = tail_mask(cols - c);
          __m512 v = w.format == WeightFormat::F32 ? load16_masked<WeightFormat::F32>(row, c, m)
                     : w.format == WeightFormat::BF16
                         ? load16_masked<WeightFormat::BF16>(row, c, m)
                         : load16_masked<WeightFormat::F16>(row, c, m);
          _mm512_mask_storeu_ps(out + c, m, v);
        }
        return;
      }
      case WeightFormat::Affine: {
        if (!affine_fast_path(w)) break;
        const uint8_t* scales = w.scales + r * w.scales_row_stride;
        const uint8_t* biases = w.biases + r * w.biases_row_stride;
        const __m512i low_nibble = _mm512_set1_epi32(15);
        const __m512i interleave_lo = nibble_zip_lo();
        const __m512i interleave_hi = nibble_zip_hi();
        for (int64_t c = 0; c < cols; c += 32) {
          const int64_t g = c / w.group_size;
          __m512 scale = _mm512_set1_ps(load_param(scales, w.scale_dtype, g));
          __m512 bias = _mm512_set1_ps(load_param(biases, w.scale_dtype, g));
          if (w.bits == 4) {
            __m512i d = _mm512_cvtepu8_epi32(
                _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c / 2)));
            __m512 even = _mm512_fmadd_ps(
                _mm512_cvtepi32_ps(_mm512_and_si512(d, low_nibble)), scale, bias);
            __m512 odd =
                _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(d, 4)), scale, bias);
            _mm512_storeu_ps(out + c, _mm512_permutex2var_ps(even, interleave_lo, odd));
            _mm512_storeu_ps(out + c + 16, _mm512_permutex2var_ps(even, interleave_hi, odd));
          } else {
            for (int h = 0; h < 32; h += 16) {
              __m512i d = _mm512_cvtepu8_epi32(
                  _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c + h)));
              _mm512_storeu_ps(out + c + h, _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), scale, bias));
            }
          }
        }
        return;
      }
      case WeightFormat::Ggml: break;  // the generic fallback after the switch
      case WeightFormat::NvFp4: {
        const uint8_t* scales = w.scales + r * w.scales_row_stride;
        const float* table = e4m3_table();
        const __m512 values = fp4_table();
        const __m512i interleave_lo = nibble_zip_lo();
        const __m512i interleave_hi = nibble_zip_hi();
        int64_t c = 0;
        for (; c + 32 <= cols; c += 32) {
          __m512i d =
              _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c / 2)));
          __m512 even = _mm512_permutexvar_ps(d, values);
          __m512 odd = _mm512_permutexvar_ps(_mm512_srli_epi32(d, 4), values);
          __m512 s0 = _mm512_set1_ps(table[scales[c / 16]] * w.global_scale);
          __m512 s1 = _mm512_set1_ps(table[scales[c / 16 + 1]] * w.global_scale);
          _mm512_storeu_ps(out + c, _mm512_mul_ps(_mm512_permutex2var_ps(even, interleave_lo, odd), s0));
          _mm512_storeu_ps(out + c + 16,
                           _mm512_mul_ps(_mm512_permutex2var_ps(even, interleave_hi, odd), s1));
        }
        for (; c < cols; ++c) {
          uint8_t byte = row[c / 2];
          out[c] = fp4_value((c & 1) ? byte >> 4 : byte & 15) * table[scales[c / 16]] *
                   w.global_scale;
        }
        return;
      }
    }
    dequantize_row(w, r, out);
  }

  template <int R, int T>
  static void tile(const float* w, int64_t ldw, const float* x, int64_t ldx, int64_t cols,
                   float* y, int64_t ldy) {
    __m512 acc[R][T];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= cols; k += 16) {
      __m512 wv[R];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) wv[r] = _mm512_loadu_ps(w + r * ldw + k);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        __m512 xv = _mm512_loadu_ps(x + t * ldx + k);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
      }
    }
    if (k < cols) {
      __mmask16 mask = tail_mask(cols - k);
      __m512 wv[R];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) wv[r] = _mm512_maskz_loadu_ps(mask, w + r * ldw + k);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        __m512 xv = _mm512_maskz_loadu_ps(mask, x + t * ldx + k);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) y[t * ldy + r] = _mm512_reduce_add_ps(acc[r][t]);
  }
};

// Decode batches: bf16 rows on bf16 x (fast precision) and 4-bit rows (affine, NVFP4) on x_q8 have
// multi-token kernels (each row's codes loaded and decoded once for several tokens); the others,
// and batches in which some token lacks that x (an inf or NaN in it), go token by token through
// the matvec kernels, a block of rows at a time so the rows are read from memory once.
void matvec_rows_multi(const WeightMatrix& w, const PreparedX* xs, int n, int64_t row_begin, int64_t row_end,
                       float* y, int64_t ldy) {
  constexpr int kMaxTokens = 64;
  if (w.format == WeightFormat::BF16 && n <= kMaxTokens) {
    const uint16_t* x_bf16[kMaxTokens];
    bool all_bf16 = true;
    for (int t = 0; t < n && all_bf16; ++t) all_bf16 = (x_bf16[t] = xs[t].x_bf16) != nullptr;
    if (all_bf16) return bf16_matvec_rows_multi(w, x_bf16, n, row_begin, row_end, y, ldy);
  }
  if ((w.format == WeightFormat::Affine && w.bits == 4) || w.format == WeightFormat::NvFp4) {
    bool all_q8 = true;
    for (int t = 0; t < n && all_q8; ++t) all_q8 = xs[t].x_q8 && xs[t].x_q8_parts == xs[0].x_q8_parts;
    if (all_q8) return vnni_matvec_rows_multi(w, xs, n, row_begin, row_end, y, ldy);
  }
  matvec_rows_each_token(matvec_rows, w, xs, n, row_begin, row_end, y, ldy);
}

void matmul_rows(const WeightMatrix& w, const float* x, int64_t n, int64_t row_begin,
                 int64_t row_end, float* y, int64_t ldy) {
  matmul_rows_tiled<Kernel512>(w, x, n, row_begin, row_end, y, ldy);
}

}  // namespace

void avx512_decode_row(const WeightMatrix& w, int64_t r, float* out) {
  Kernel512::decode_row(w, r, out);
}

namespace {

float dot_f32(const float* a, const float* b, int64_t n) {
  return dot_dense<WeightFormat::F32>(reinterpret_cast<const uint8_t*>(a), b, n);
}

float sum_squares_f32(const float* x, int64_t n) { return dot_f32(x, x, n); }

void axpy_f32(float a, const float* x, float* y, int64_t n) {
  const __m512 av = _mm512_set1_ps(a);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, _mm512_fmadd_ps(av, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
  if (i < n) {
    __mmask16 mask = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, mask,
                          _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(mask, x + i),
                                          _mm512_maskz_loadu_ps(mask, y + i)));
  }
}

double fma_burn(int64_t iterations, float* sink) {
  constexpr int kChains = 12;  // > FMA latency x pipes, so the loop is throughput-bound
  __m512 acc[kChains];
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
#pragma GCC unroll 12
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(float(i));
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  __m512 total = acc[0];
#pragma GCC unroll 12
  for (int i = 1; i < kChains; ++i) total = _mm512_add_ps(total, acc[i]);
  *sink = _mm512_reduce_add_ps(total);
  return double(iterations) * kChains * kLanes * 2;
}

uint64_t stream_sum(const uint64_t* data, size_t words) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 32 <= words; i += 32) {
    const char* ahead = reinterpret_cast<const char*>(data + i) + kProbePrefetchBytes;
#pragma GCC unroll 4
    for (int line = 0; line < 4; ++line) prefetch_stream(ahead + 64 * line);
    a0 = _mm512_add_epi64(a0, _mm512_loadu_si512(data + i));
    a1 = _mm512_add_epi64(a1, _mm512_loadu_si512(data + i + 8));
    a2 = _mm512_add_epi64(a2, _mm512_loadu_si512(data + i + 16));
    a3 = _mm512_add_epi64(a3, _mm512_loadu_si512(data + i + 24));
  }
  // Summed as unsigned: _mm512_reduce_add_epi64 adds signed 64-bit lanes, which may overflow.
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
  uint64_t sum = 0;
  for (uint64_t lane : lanes) sum += lane;
  return sum;
}

// quantize_q8_scalar, 16 lanes of 8 columns at once: vector k of a chunk holds column 8 l + k of
// every lane l (gathered), so the lane maxima, levels and digits are plain lane-wise operations in
// the scalar code's order, and the results are bit-identical. Decode prepares the x of every
// expert's down projection each layer; preparing a 2048-column x (with the group sums) went from
// ~5.2 to ~1.0 us.
bool quantize_q8(const float* x, int64_t chunks, int parts, const Q8Buffers& out) {
  const float levels = parts == 1 ? 127.0f : 127.0f * 65536.0f;
  const __m512 levels_v = _mm512_set1_ps(levels), minus_levels = _mm512_set1_ps(-levels);
  const __m512 largest_finite = _mm512_set1_ps(0x1.fffffep127f);
  const __m512i lane_first_column = _mm512_setr_epi32(0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120);
  const __m512i low_byte = _mm512_set1_epi32(0xff);
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const float* xc = x + 128 * ch;
    __m512 column[8];
    __m512 max_abs = _mm512_setzero_ps();
    __mmask16 finite = 0xffff;
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      column[k] = _mm512_i32gather_ps(_mm512_add_epi32(lane_first_column, _mm512_set1_epi32(k)), xc, 4);
      const __m512 magnitude = _mm512_abs_ps(column[k]);
      finite &= _mm512_cmp_ps_mask(magnitude, largest_finite, _CMP_LE_OQ);  // false for inf and NaN
      max_abs = _mm512_max_ps(max_abs, magnitude);
    }
    if (finite != 0xffff) return false;
    const __mmask16 nonzero = _mm512_cmp_ps_mask(max_abs, _mm512_set1_ps(kQ8SmallestLaneMax), _CMP_GE_OQ);
    const __m512 scale = _mm512_maskz_div_ps(nonzero, max_abs, levels_v);
    const __m512 inverse = _mm512_maskz_div_ps(nonzero, levels_v, max_abs);
    __m512i level[8];
    __m512i sum = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      const __m512 nearest =
          _mm512_roundscale_ps(_mm512_mul_ps(column[k], inverse), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      level[k] = _mm512_cvttps_epi32(_mm512_min_ps(levels_v, _mm512_max_ps(minus_levels, nearest)));
      sum = _mm512_add_epi32(sum, level[k]);
      _mm512_i32scatter_ps(out.x_hat + 128 * ch, _mm512_add_epi32(lane_first_column, _mm512_set1_epi32(k)),
                           _mm512_mul_ps(scale, _mm512_cvtepi32_ps(level[k])), 4);
    }
    // Digits, lowest first: digit = the low byte as int8, rest = (rest - digit) / 256 (exact).
    // Byte j / 2 of lane l in the even (odd) half is column 8 l + j for even (odd) j.
    int8_t* q = out.digits + 128 * parts * ch;
    for (int part = parts - 1; part >= 0; --part) {
      __m512i digit[8];
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        digit[k] = _mm512_srai_epi32(_mm512_slli_epi32(level[k], 24), 24);
        level[k] = _mm512_srai_epi32(_mm512_sub_epi32(level[k], digit[k]), 8);
      }
#pragma GCC unroll 2
      for (int half = 0; half < 2; ++half) {
        const __m512i bytes = _mm512_or_si512(
            _mm512_or_si512(_mm512_and_si512(digit[half], low_byte),
                            _mm512_slli_epi32(_mm512_and_si512(digit[half + 2], low_byte), 8)),
            _mm512_or_si512(_mm512_slli_epi32(_mm512_and_si512(digit[half + 4], low_byte), 16),
                            _mm512_slli_epi32(digit[half + 6], 24)));
        _mm512_storeu_si512(q + 128 * part + 64 * half, bytes);
      }
    }
    _mm512_storeu_ps(out.scales + 16 * ch, scale);
    _mm512_storeu_si512(out.nvfp4_offsets + 16 * ch, _mm512_mullo_epi32(sum, _mm512_set1_epi32(-12)));
  }
  return true;
}

}  // namespace

const Backend& avx512_backend() {
  static const Backend backend{Isa::Avx512, 32,       128,        Kernel512::kRows, matvec_rows,
                               matvec_rows_multi, matmul_rows, dot_f32,   axpy_f32,
                               sum_squares_f32,   fma_burn,    stream_sum, quantize_q8};
  return backend;
}

}  // namespace inkling::kernels::detail
