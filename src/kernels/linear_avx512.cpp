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

constexpr int kLanes = 16;

inline __mmask16 tail_mask(int64_t count) { return __mmask16((1u << count) - 1u); }

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

// W[r] . x = sum_g scale[g] * dot(codes_g, x_g) + bias[g] * sum(x_g).
template <int kBits>
float dot_affine(const WeightMatrix& w, int64_t r, const PreparedX& px) {
  const uint8_t* codes = w.data + r * w.row_stride;
  const uint8_t* scales = w.scales + r * w.scales_row_stride;
  const int64_t groups = w.cols / w.group_size;
  const float* xs = kBits == 4 ? px.x_split : px.x;
  const __m512i low_nibble = _mm512_set1_epi32(15);
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  alignas(64) float scale_block[16];
  for (int64_t g = 0; g < groups; ++g) {
    if ((g & 15) == 0) {
      __mmask16 mask = groups - g >= 16 ? __mmask16(0xffff) : tail_mask(groups - g);
      _mm512_store_ps(scale_block, load_params16(scales, w.scale_dtype, g, mask));
    }
    __m512 even = _mm512_setzero_ps(), odd = _mm512_setzero_ps();
    if constexpr (kBits == 4) {
      for (int k = 0; k < w.group_size; k += 32) {
        __m512i d = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)));
        even = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_and_si512(d, low_nibble)),
                               _mm512_loadu_ps(xs), even);
        odd = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(d, 4)),
                              _mm512_loadu_ps(xs + 16), odd);
        codes += 16;
        xs += 32;
      }
    } else {
      for (int k = 0; k < w.group_size; k += 32) {
        __m512i d0 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)));
        __m512i d1 =
            _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + 16)));
        even = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d0), _mm512_loadu_ps(xs), even);
        odd = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d1), _mm512_loadu_ps(xs + 16), odd);
        codes += 32;
        xs += 32;
      }
    }
    __m512 scale = _mm512_set1_ps(scale_block[g & 15]);
    if (g & 1)
      acc1 = _mm512_fmadd_ps(scale, _mm512_add_ps(even, odd), acc1);
    else
      acc0 = _mm512_fmadd_ps(scale, _mm512_add_ps(even, odd), acc0);
  }
  const uint8_t* biases = w.biases + r * w.biases_row_stride;
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) +
         affine_bias_dot(biases, w.scale_dtype, px.group_sums, groups);
}

inline __m512 fp4_table() {
  return _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f,
                        -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
}

// Scales of the two 16-column blocks one 16-byte load covers, as [s0 x8, s1 x8]: the lanes
// of both the low- and the high-nibble vector split that way.
inline __m512 nvfp4_block_scales(const float* table, const uint8_t* scales) {
  return _mm512_mask_blend_ps(__mmask16(0xff00), _mm512_set1_ps(table[scales[0]]),
                              _mm512_set1_ps(table[scales[1]]));
}

float dot_nvfp4(const WeightMatrix& w, int64_t r, const PreparedX& px) {
  const uint8_t* codes = w.data + r * w.row_stride;
  const uint8_t* scales = w.scales + r * w.scales_row_stride;
  const float* table = e4m3_table();
  const __m512 values = fp4_table();
  const int64_t chunks = w.cols / 32;
  const float* xs = px.x_split;
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  for (int64_t i = 0; i < chunks; ++i) {
    __m512i d = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)));
    __m512 low = _mm512_permutexvar_ps(d, values);  // vpermps reads only index bits [3:0]
    __m512 high = _mm512_permutexvar_ps(_mm512_srli_epi32(d, 4), values);
    __m512 t = _mm512_mul_ps(low, _mm512_loadu_ps(xs));
    t = _mm512_fmadd_ps(high, _mm512_loadu_ps(xs + 16), t);
    if (i & 1)
      acc1 = _mm512_fmadd_ps(t, nvfp4_block_scales(table, scales), acc1);
    else
      acc0 = _mm512_fmadd_ps(t, nvfp4_block_scales(table, scales), acc0);
    codes += 16;
    scales += 2;
    xs += 32;
  }
  float sum = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
  sum += nvfp4_tail_dot(w.data + r * w.row_stride, w.scales + r * w.scales_row_stride, px.x,
                        chunks * 32, w.cols);
  return sum * w.global_scale;
}

bool affine_fast_path(const WeightMatrix& w) { return w.group_size % 32 == 0; }

void matvec_rows(const WeightMatrix& w, const PreparedX& px, int64_t row_begin, int64_t row_end,
                 float* y) {
  switch (w.format) {
    case WeightFormat::F32:
      for (int64_t r = row_begin; r < row_end; ++r)
        y[r - row_begin] = dot_dense<WeightFormat::F32>(w.data + r * w.row_stride, px.x, w.cols);
      return;
    case WeightFormat::BF16:
      for (int64_t r = row_begin; r < row_end; ++r)
        y[r - row_begin] = dot_dense<WeightFormat::BF16>(w.data + r * w.row_stride, px.x, w.cols);
      return;
    case WeightFormat::F16:
      for (int64_t r = row_begin; r < row_end; ++r)
        y[r - row_begin] = dot_dense<WeightFormat::F16>(w.data + r * w.row_stride, px.x, w.cols);
      return;
    case WeightFormat::Affine:
      if (affine_fast_path(w)) {
        for (int64_t r = row_begin; r < row_end; ++r)
          y[r - row_begin] = w.bits == 4 ? dot_affine<4>(w, r, px) : dot_affine<8>(w, r, px);
        return;
      }
      break;
    case WeightFormat::NvFp4:
      for (int64_t r = row_begin; r < row_end; ++r) y[r - row_begin] = dot_nvfp4(w, r, px);
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
        const __m512i interleave_lo =
            _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
        const __m512i interleave_hi =
            _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
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
      case WeightFormat::NvFp4: {
        const uint8_t* scales = w.scales + r * w.scales_row_stride;
        const float* table = e4m3_table();
        const __m512 values = fp4_table();
        const __m512i interleave_lo =
            _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
        const __m512i interleave_hi =
            _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
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

void matmul_rows(const WeightMatrix& w, const float* x, int64_t n, int64_t row_begin,
                 int64_t row_end, float* y, int64_t ldy) {
  matmul_rows_tiled<Kernel512>(w, x, n, row_begin, row_end, y, ldy);
}

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

}  // namespace

const Backend& avx512_backend() {
  static const Backend backend{Isa::Avx512, 32,        Kernel512::kRows, matvec_rows,
                               matmul_rows, dot_f32,   axpy_f32,         sum_squares_f32,
                               fma_burn};
  return backend;
}

}  // namespace inkling::kernels::detail
