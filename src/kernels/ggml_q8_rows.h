// The integer-dot decode of ggml block types in fast precision, included by ggml_q8_avx2.cpp (AVX2)
// and ggml_q8_avx512vnni.cpp / _avx512vbmi.cpp (the same kernels where AVX-512 VNNI is present:
// each integer dot of 32 codes is one vpdpbusd instead of vpmaddubsw + vpmaddwd; the dots are
// exact either way, so the builds give bit-identical results, except for the 512-bit kernels of
// Q4_K, Q5_K, Q6_K and IQ4_XS, which differ by f32 rounding). x is quantized to int8 per 32
// columns (ggml_quantize_x_avx2, backend.h), each weight block decoded in registers to int8 (or
// uint8) codes and dotted, one float FMA per 32 columns (per super-block in the 512-bit Q4_K, Q5_K
// and IQ4_XS).
//
// A row's value is sum over 32-column blocks j of (weight scale of j) * (x scale of j) * (integer
// dot of j), less (or plus) the types' offsets (Q4_1 / Q5_1 / Q2_K / Q4_K / Q5_K mins, Q3_K's 4,
// Q6_K's 32) times the block sums of the dequantized x. The integer dots are exact (bounds at
// each kernel); only the float sums round. A row kernel takes kTokens tokens at once: the codes
// are decoded once, and each token's arithmetic is that of kTokens = 1 in the same order, so a
// token's result in a decode batch is bit for bit its matvec's.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <type_traits>
#include <utility>

#include "kernels/backend.h"
#include "kernels/prefetch.h"

namespace inkling::kernels::detail {
namespace {

#include "kernels/simd_common.h"
#include "kernels/simd_avx2.h"

__attribute__((always_inline)) inline int hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

inline float half_at(const uint8_t* at) { return _cvtsh_ss(uint16_t(at[0] | at[1] << 8)); }

inline uint32_t u32_at(const uint8_t* at) {
  uint32_t value;
  __builtin_memcpy(&value, at, 4);
  return value;
}
inline uint64_t u64_at(const uint8_t* at) {
  uint64_t value;
  __builtin_memcpy(&value, at, 8);
  return value;
}

__attribute__((always_inline)) inline __m256i load32(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}
__attribute__((always_inline)) inline __m128i load16(const void* p) {
  return _mm_loadu_si128(static_cast<const __m128i*>(p));
}

// How far ahead the block kernels prefetch where the hint is T0 (Intel and every CPU but AMD's,
// see prefetch_stream): each line twice, into L2 (T1) 16 KiB ahead and into L1 (T0) 2 KiB ahead.
// kRowPrefetchBytes' 8 KiB was chosen on Zen 5 with NTA. On the Emerald Rapids guest,
// bench_kernels ggml_matvec 2048 x 2048 cold, configurations alternated in one run (4 rounds,
// median ratios), 2 threads: T0 at 2 KiB against 8 KiB: Q4_K 1.18, Q6_K 1.18, IQ4_XS 1.10, Q8_0
// 0.99 (4 KiB 1.10 / 1.08 / 1.03 / 0.99; 1 and 1.5 KiB 0.93-0.98 of 2; 3 KiB level with it; one
// thread, 2 KiB: Q4_K 1.47, Q6_K 1.46, IQ4_XS 1.34); adding T1 at 16 KiB to T0 at 2: Q4_K 1.08,
// Q6_K 1.15, IQ4_XS 1.03, f32 (not these kernels) 1.00; T1 at 8 or 32 KiB within 1-7% of 16, T2
// like T1. A T0 prefetch holds an L1 fill buffer until its line arrives, so far ones crowd out
// near ones; the L2 takes more misses in flight.
constexpr int kBlockT0PrefetchBytes = 2048, kBlockT1PrefetchBytes = 16384;

// One prefetch per 64 bytes of the block: consecutive blocks' prefetched addresses are at most
// 64 bytes apart, so every line of the stream is covered. The hint is read once per block, not
// per line: a block kernel's whole budget is a few dozen instructions.
__attribute__((always_inline)) inline void prefetch_block(const uint8_t* block, int bytes) {
  const char* at = reinterpret_cast<const char*>(block);
  if (__atomic_load_n(&stream_prefetch_nontemporal, __ATOMIC_RELAXED)) {
    for (int line = 0; line < bytes; line += 64) _mm_prefetch(at + kRowPrefetchBytes + line, _MM_HINT_NTA);
  } else {
    for (int line = 0; line < bytes; line += 64) {
      _mm_prefetch(at + kBlockT1PrefetchBytes + line, _MM_HINT_T1);
      _mm_prefetch(at + kBlockT0PrefetchBytes + line, _MM_HINT_T0);
    }
  }
}

// 8 bytes (signed or unsigned) as 8 floats.
__attribute__((always_inline)) inline __m256 floats_of_i8(__m128i bytes) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
}
__attribute__((always_inline)) inline __m256 floats_of_u8(__m128i bytes) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes));
}

// 16 bytes of nibbles as 32 codes: the low nibbles in the low 128-bit lane, the high nibbles in
// the high one (elements 0-15 and 16-31 of a Q4_0 / Q4_1 / Q5_0 / Q5_1 / IQ4_NL / IQ4_XS block).
__attribute__((always_inline)) inline __m256i split_nibbles(const uint8_t* bytes) {
  const __m256i both = _mm256_broadcastsi128_si256(load16(bytes));
  return _mm256_and_si256(_mm256_srlv_epi32(both, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)), _mm256_set1_epi8(15));
}

// 32 bits as 32 bytes: 0xff where bit i is set, 0 where it is clear.
__attribute__((always_inline)) inline __m256i bit_masks(uint32_t bits) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(int(bits)), _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2,
                                                     2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}

// The 8 int32 lane dots of 32 unsigned codes (each <= 255 - see the callers' bounds) with 32
// signed x digits: pairs from vpmaddubsw, summed in fours by vpmaddwd.
__attribute__((always_inline)) inline __m256i udot(__m256i codes, const int8_t* x) {
#ifdef __AVX512VNNI__
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), codes, load32(x));
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(codes, load32(x)), _mm256_set1_epi16(1));
#endif
}
// The same for signed codes in [-128, 127]: |code| times x with code's sign (|-128| reads as
// the unsigned 128). |x| <= 127, so a pair is at most 2 * 128 * 127 < 2^15.
__attribute__((always_inline)) inline __m256i sdot(__m256i codes, const int8_t* x) {
#ifdef __AVX512VNNI__
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(codes, codes), _mm256_sign_epi8(load32(x), codes));
#else
  return _mm256_madd_epi16(
      _mm256_maddubs_epi16(_mm256_sign_epi8(codes, codes), _mm256_sign_epi8(load32(x), codes)),
      _mm256_set1_epi16(1));
#endif
}

// sum += factor * (the integer lane dots).
__attribute__((always_inline)) inline void accumulate(__m256& sum, __m256 factor, __m256i dots) {
  sum = _mm256_fmadd_ps(factor, _mm256_cvtepi32_ps(dots), sum);
}

// The per-row state of kTokens tokens: one accumulator of scaled dots and one of offsets each.
template <int kTokens>
struct Accumulators {
  __m256 dots[kTokens], offsets[kTokens];
  Accumulators() {
    for (int t = 0; t < kTokens; ++t) dots[t] = offsets[t] = _mm256_setzero_ps();
  }
  void store(float* y, int64_t ldy) const {
    for (int t = 0; t < kTokens; ++t) y[t * ldy] = reduce(_mm256_sub_ps(dots[t], offsets[t]));
  }
};

#ifdef __AVX512VNNI__
// Each token's sum of a row whose 512-bit vectors hold two groups of 32: lanes 0-7 the even
// group, 8-15 the odd one.
template <int kTokens>
struct PairSums {
  __m512 sums[kTokens];
  PairSums() {
    for (int t = 0; t < kTokens; ++t) sums[t] = _mm512_setzero_ps();
  }
  // sums[t] += (each lane's factor) * (its integer dot).
  __attribute__((always_inline)) void add(int t, __m512 factors, __m512i dots) {
    sums[t] = _mm512_fmadd_ps(factors, _mm512_cvtepi32_ps(dots), sums[t]);
  }
  // Each token's sum less its offsets (acc's dots unused).
  void store(const Accumulators<kTokens>& acc, float* y, int64_t ldy) const {
    for (int t = 0; t < kTokens; ++t)
      y[t * ldy] = reduce(_mm256_sub_ps(_mm256_add_ps(_mm512_castps512_ps256(sums[t]), _mm512_extractf32x8_ps(sums[t], 1)),
                                        acc.offsets[t]));
  }
};

// The sum of the 16 lanes, always in the same order.
__attribute__((always_inline)) inline float reduce512(__m512 v) {
  return reduce(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}

#endif

// Each token's factors for a super-block: the weights' scales of its 8 groups of 32 times x's.
// They are kept in memory and each group's factor is broadcast from there: a broadcast load runs
// on a load port, where a lane permute of a register would take the one shuffle port that the
// codes' decoding (byte shuffles, inserts) already keeps busy on Intel cores.
template <int kTokens>
struct BlockFactors {
  alignas(32) float lanes[kTokens][8];
  __attribute__((always_inline)) __m256 at(int t, int group) const { return _mm256_broadcast_ss(&lanes[t][group]); }
};

template <int kTokens>
__attribute__((always_inline)) inline void store_factors(const __m256 (&lanes)[kTokens], BlockFactors<kTokens>& factors) {
  for (int t = 0; t < kTokens; ++t) _mm256_store_ps(factors.lanes[t], lanes[t]);
  // Keeps the compiler from turning the broadcasts back into permutes of the register.
  asm volatile("" : : "m"(factors.lanes) : "memory");
}

template <int kTokens>
__attribute__((always_inline)) inline void block_factors(__m256 weight_scales, const PreparedX* xs, int64_t b,
                                                         BlockFactors<kTokens>& factors) {
  __m256 lanes[kTokens];
  for (int t = 0; t < kTokens; ++t) lanes[t] = _mm256_mul_ps(weight_scales, _mm256_loadu_ps(xs[t].x_g8_scale + 8 * b));
  store_factors(lanes, factors);
}

// sum over the 16 sub-blocks m of a super-block of weight_m * (sum of x over m), the weights of
// m < 8 in `low` and the others in `high`: what the per-16 offsets (Q2_K's mins, Q3_K's 4, Q6_K's
// 32) take from a row.
__attribute__((always_inline)) inline __m256 weighted_sums16(__m256 low, __m256 high, const float* sums16) {
  return _mm256_fmadd_ps(high, _mm256_loadu_ps(sums16 + 8), _mm256_mul_ps(low, _mm256_loadu_ps(sums16)));
}

inline __m256i split_scales(int first, int second) {
  return _mm256_set_m128i(_mm_set1_epi16(int16_t(second)), _mm_set1_epi16(int16_t(first)));
}

// A super-block's 16 byte scales (one per 16 elements; signed or, below 128, unsigned) as int16,
// the even ones in the low lane and the odd ones in the high lane, so that group_scales takes a
// 32-element group's two in split_scales' form with one byte shuffle.
__attribute__((always_inline)) inline __m256i scales_by_group(__m128i scale_bytes) {
  return _mm256_cvtepi8_epi16(
      _mm_shuffle_epi8(scale_bytes, _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15)));
}
__attribute__((always_inline)) inline __m256i group_scales(__m256i by_group, int group) {
  return _mm256_shuffle_epi8(by_group, _mm256_set1_epi16(int16_t((2 * group + 1) << 8 | 2 * group)));
}

// 32 codes with an integer scale per 16 elements (`scales`, as split_scales lays them out); for
// the signed types (kSigned), the codes are magnitudes and x takes the signs of `signs` (vpsignb:
// negated where a sign byte is negative, zeroed where it is 0). Each caller bounds its codes and
// scales so that a vpmaddubsw pair stays under 2^15 and a vpmaddwd lane under 2^31.
struct Group32 {
  __m256i codes, signs, scales;
};

// Adds each token's dot of g with x block `x_block` times lane `lane_index` of its factors.
template <int kTokens, bool kSigned>
__attribute__((always_inline)) inline void group_dots(const Group32& g, const PreparedX* xs, int64_t x_block,
                                                      const BlockFactors<kTokens>& factors, int lane_index,
                                                      Accumulators<kTokens>& acc) {
  for (int t = 0; t < kTokens; ++t) {
    __m256i x = load32(xs[t].x_g8 + 32 * x_block);
    if constexpr (kSigned) x = _mm256_sign_epi8(x, g.signs);
    accumulate(acc.dots[t], factors.at(t, lane_index), _mm256_madd_epi16(_mm256_maddubs_epi16(g.codes, x), g.scales));
  }
}

// ---- 32-element blocks: an f16 d at byte 0, [an f16 min m,] 32 codes; one x block each ----

// A 32-element block type: `codes` decodes a block's 32 codes, signed (kSigned, in [-128, 127],
// dotted through sdot) or unsigned (<= 31, through udot: a pair <= 2 * 31 * 127); the value of a
// code is d * code [+ m].
template <class Block>
struct Block32Row {
  static constexpr int kBlockElements = 32;
  template <int kTokens, bool kPrefetch>
  __attribute__((always_inline)) static void row(const uint8_t* row, int64_t blocks, const PreparedX* xs, float* y,
                                                 int64_t ldy) {
    constexpr int kBytes = Block::kBytes, kBlocksPerPrefetch = (64 + kBytes - 1) / kBytes;
    Accumulators<kTokens> acc;
    [[maybe_unused]] float mins[kTokens] = {};
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* block = row + b * kBytes;
      if (kPrefetch && b % kBlocksPerPrefetch == 0) prefetch_block(block, kBlocksPerPrefetch * kBytes);
      const float d = half_at(block);
      const __m256i codes = Block::codes(block);
      for (int t = 0; t < kTokens; ++t) {
        const int8_t* x = xs[t].x_g8 + 32 * b;
        accumulate(acc.dots[t], _mm256_set1_ps(d * xs[t].x_g8_scale[b]), Block::kSigned ? sdot(codes, x) : udot(codes, x));
        if constexpr (Block::kHasMin) mins[t] = std::fma(half_at(block + 2), xs[t].x_g8_sum32[b], mins[t]);
      }
    }
    if constexpr (Block::kHasMin) {
      for (int t = 0; t < kTokens; ++t) y[t * ldy] = reduce(acc.dots[t]) + mins[t];
    } else {
      acc.store(y, ldy);
    }
  }
};

// Q8_0: d, 32 signed codes.
struct Q8_0Block {
  static constexpr int kBytes = 34;
  static constexpr bool kSigned = true, kHasMin = false;
  __attribute__((always_inline)) static __m256i codes(const uint8_t* block) { return load32(block + 2); }
};

// Q4_0: d, 16 bytes of nibbles (low: elements 0-15, high: 16-31); value d * (nibble - 8).
struct Q4_0Block {
  static constexpr int kBytes = 18;
  static constexpr bool kSigned = true, kHasMin = false;
  __attribute__((always_inline)) static __m256i codes(const uint8_t* block) {
    return _mm256_sub_epi8(split_nibbles(block + 2), _mm256_set1_epi8(8));
  }
};

// Q4_1: d, m, nibbles as Q4_0's; value d * nibble + m.
struct Q4_1Block {
  static constexpr int kBytes = 20;
  static constexpr bool kSigned = false, kHasMin = true;
  __attribute__((always_inline)) static __m256i codes(const uint8_t* block) { return split_nibbles(block + 4); }
};

// Q5_0: d, a word of fifth bits (bit j: element j), nibbles; value d * (nibble + 16 bit - 16). The
// signed code is the nibble with 0xf0 or'ed in where the bit is clear (nibble - 16 as int8).
struct Q5_0Block {
  static constexpr int kBytes = 22;
  static constexpr bool kSigned = true, kHasMin = false;
  __attribute__((always_inline)) static __m256i codes(const uint8_t* block) {
    return _mm256_or_si256(split_nibbles(block + 6), _mm256_andnot_si256(bit_masks(u32_at(block + 2)), _mm256_set1_epi8(-16)));
  }
};

// Q5_1: d, m, the fifth bits, nibbles; value d * (nibble + 16 bit) + m.
struct Q5_1Block {
  static constexpr int kBytes = 24;
  static constexpr bool kSigned = false, kHasMin = true;
  __attribute__((always_inline)) static __m256i codes(const uint8_t* block) {
    return _mm256_or_si256(split_nibbles(block + 8), _mm256_and_si256(bit_masks(u32_at(block + 4)), _mm256_set1_epi8(16)));
  }
};

// IQ4_NL: d, nibbles as Q4_0's indexing kIq4Values (|v| <= 127) through one byte shuffle.
struct Iq4NlBlock {
  static constexpr int kBytes = 18;
  static constexpr bool kSigned = true, kHasMin = false;
  __attribute__((always_inline)) static __m256i codes(const uint8_t* block) {
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(load16(kIq4Values)), split_nibbles(block + 2));
  }
};

// ---- K quants ----

// Q2_K: 16 scale bytes (low nibble: scale, high: min, per 16 elements), 64 bytes of 2-bit codes,
// d, dmin (f16). In half h of 128 elements, 32-element group k is bits 2k, 2k + 1 of bytes
// 16 + 32 h .. + 31; value d * scale * code - dmin * min. Codes <= 3 and scales <= 15: a pair is
// at most 2 * 3 * 127, a lane 2 * 762 * 15.
struct Q2_KRow {
  static constexpr int kBlockElements = 256;
  template <int kTokens, bool kPrefetch>
  __attribute__((always_inline)) static void row(const uint8_t* row, int64_t blocks, const PreparedX* xs, float* y,
                                                 int64_t ldy) {
    constexpr int kBytes = 84;
    const __m256i two_bits = _mm256_set1_epi8(3);
    Accumulators<kTokens> acc;
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* block = row + b * kBytes;
      if (kPrefetch) prefetch_block(block, kBytes);
      const __m128i scale_bytes = load16(block);
      const __m128i mins = _mm_and_si128(_mm_srli_epi16(scale_bytes, 4), _mm_set1_epi8(15));
      const __m256i scales = scales_by_group(_mm_and_si128(scale_bytes, _mm_set1_epi8(15)));
      const __m256 dmin = _mm256_set1_ps(half_at(block + 82));
      const __m256 mins_low = floats_of_u8(mins), mins_high = floats_of_u8(_mm_srli_si128(mins, 8));
      BlockFactors<kTokens> factors;
      block_factors<kTokens>(_mm256_set1_ps(half_at(block + 80)), xs, b, factors);
      for (int t = 0; t < kTokens; ++t)
        acc.offsets[t] = _mm256_fmadd_ps(dmin, weighted_sums16(mins_low, mins_high, xs[t].x_g8_sum16 + 16 * b), acc.offsets[t]);
#pragma GCC unroll 2
      for (int half = 0; half < 2; ++half) {
        const __m256i bits = load32(block + 16 + 32 * half);
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
          const int group = 4 * half + k;  // of 32 elements: scales 2 group, 2 group + 1
          const Group32 g{_mm256_and_si256(_mm256_srli_epi16(bits, 2 * k), two_bits), {}, group_scales(scales, group)};
          group_dots<kTokens, false>(g, xs, 8 * b + group, factors, group, acc);
        }
      }
    }
    acc.store(y, ldy);
  }
};

// Q3_K: a 32-byte mask of high bits (element 32 g + p: bit g of byte p), 2-bit codes laid out as
// Q2_K's, 16 signed 6-bit scales in 12 bytes, d; value d * (scale - 32) * (code + 4 high - 4).
// The 3-bit codes (<= 7) are dotted unsigned, the scales applied by vpmaddwd (a pair <= 2 * 7 *
// 127, a lane <= 2 * 1778 * 32), and the 4 taken out as 4 d sum_m scale_m * (x sum of m).
struct Q3_KRow {
  static constexpr int kBlockElements = 256;
  template <int kTokens, bool kPrefetch>
  __attribute__((always_inline)) static void row(const uint8_t* row, int64_t blocks, const PreparedX* xs, float* y,
                                                 int64_t ldy) {
    constexpr int kBytes = 110;
    const __m256i two_bits = _mm256_set1_epi8(3), third_bit = _mm256_set1_epi8(4);
    Accumulators<kTokens> acc;
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* block = row + b * kBytes;
      if (kPrefetch) prefetch_block(block, kBytes);
      // Scale k: low nibble of byte k % 8 of the first 8 (nibble k / 8), top bits 2 (k / 4) of
      // byte 8 + k % 4.
      const uint32_t first = u32_at(block + 96), second = u32_at(block + 100), tops = u32_at(block + 104);
      const __m128i scale_codes = _mm_sub_epi8(
          _mm_setr_epi32(int((first & 0x0f0f0f0fu) | (tops & 0x03030303u) << 4),
                         int((second & 0x0f0f0f0fu) | (tops >> 2 & 0x03030303u) << 4),
                         int((first >> 4 & 0x0f0f0f0fu) | (tops >> 4 & 0x03030303u) << 4),
                         int((second >> 4 & 0x0f0f0f0fu) | (tops >> 6 & 0x03030303u) << 4)),
          _mm_set1_epi8(32));
      const __m256i scales = scales_by_group(scale_codes);
      const float d = half_at(block + 108);
      const __m256 d4 = _mm256_set1_ps(4.0f * d);
      const __m256 scales_low = floats_of_i8(scale_codes), scales_high = floats_of_i8(_mm_srli_si128(scale_codes, 8));
      BlockFactors<kTokens> factors;
      block_factors<kTokens>(_mm256_set1_ps(d), xs, b, factors);
      for (int t = 0; t < kTokens; ++t)
        acc.offsets[t] = _mm256_fmadd_ps(d4, weighted_sums16(scales_low, scales_high, xs[t].x_g8_sum16 + 16 * b), acc.offsets[t]);
      const __m256i high_bits = load32(block);
#pragma GCC unroll 2
      for (int half = 0; half < 2; ++half) {
        const __m256i bits = load32(block + 32 + 32 * half);
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
          const int group = 4 * half + k;
          // Bit `group` of each mask byte to bit 2 (a 16-bit shift: the bit stays in its byte).
          const __m256i high = _mm256_and_si256(
              group >= 2 ? _mm256_srli_epi16(high_bits, group - 2) : _mm256_slli_epi16(high_bits, 2 - group), third_bit);
          const Group32 g{_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 2 * k), two_bits), high), {},
                          group_scales(scales, group)};
          group_dots<kTokens, false>(g, xs, 8 * b + group, factors, group, acc);
        }
      }
    }
    acc.store(y, ldy);
  }
};

// The eight 6-bit scales (bytes 0-7) and mins (bytes 8-15) of a Q4_K / Q5_K super-block from its
// 12 packed bytes (k_scale_min in tensor/ggml_types.h): sub-blocks 0-3 are the low 6 bits of
// bytes 0-3 (scales) and 4-7 (mins); 4-7 take their low nibbles from bytes 8-11 (scales low, mins
// high) and their top two bits from bits 6-7 of bytes 0-3 (scales) and 4-7 (mins). Byte shuffles
// instead of scalar shifts and masks, which were a third of a Q4_K block's instructions; `packed`
// is read 16 bytes long (the codes follow).
__attribute__((always_inline)) inline __m128i k_scale_min_bytes(const uint8_t* packed) {
  const __m128i q = load16(packed);
  // Low parts: bytes 0-3 (scales 0-3), 8-11 (scales 4-7, low nibbles), 4-7 (mins 0-3), 8-11
  // (mins 4-7, high nibbles).
  const __m128i low_sources = _mm_shuffle_epi8(q, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
  const __m128i low = _mm_and_si128(_mm_blend_epi32(low_sources, _mm_srli_epi16(low_sources, 4), 0b1000),
                                    _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
  // Top two bits of sub-blocks 4-7: bits 6-7 of bytes 0-3 (scales) and 4-7 (mins), as bits 4-5.
  const __m128i top_sources = _mm_shuffle_epi8(q, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7));
  return _mm_or_si128(low, _mm_and_si128(_mm_srli_epi16(top_sources, 2), _mm_set1_epi8(0x30)));
}

__attribute__((always_inline)) inline void k_scales_mins(const uint8_t* packed, __m256& scales, __m256& mins) {
  const __m128i bytes = k_scale_min_bytes(packed);
  scales = floats_of_u8(bytes);
  mins = floats_of_u8(_mm_srli_si128(bytes, 8));
}

// Q4_K (kFifthBit false) and Q5_K (true): d, dmin (f16), 12 bytes of scales and mins, [Q5_K: 32
// bytes of fifth bits,] 128 bytes of nibbles; sub-block g (32 elements) is nibble g % 2 of bytes
// 32 (g / 2) .. + 31 [plus bit g of the fifth-bit bytes, times 16]. Its value is
// d * scale_g * code - dmin * min_g. Codes <= 31: a vpmaddubsw pair is at most 2 * 31 * 127.
template <bool kFifthBit>
struct Q45_KRow {
  static constexpr int kBlockElements = 256;
  static constexpr int kBytes = kFifthBit ? 176 : 144;

  // Each token's factors and offsets of block b; the factors of group g are lane g.
  template <int kTokens>
  __attribute__((always_inline)) static void block_start(const uint8_t* block, const PreparedX* xs, int64_t b,
                                                         __m256 (&factors)[kTokens], Accumulators<kTokens>& acc) {
    __m256 scales, mins;
    k_scales_mins(block + 4, scales, mins);
    scales = _mm256_mul_ps(scales, _mm256_set1_ps(half_at(block)));
    mins = _mm256_mul_ps(mins, _mm256_set1_ps(half_at(block + 2)));
    for (int t = 0; t < kTokens; ++t) {
      factors[t] = _mm256_mul_ps(scales, _mm256_loadu_ps(xs[t].x_g8_scale + 8 * b));
      acc.offsets[t] = _mm256_fmadd_ps(mins, _mm256_loadu_ps(xs[t].x_g8_sum32 + 8 * b), acc.offsets[t]);
    }
  }

  template <int kTokens, bool kPrefetch>
  __attribute__((always_inline)) static void row(const uint8_t* row, int64_t blocks, const PreparedX* xs, float* y,
                                                 int64_t ldy) {
    const __m256i nibble = _mm256_set1_epi8(15), bit = _mm256_set1_epi8(1);
    Accumulators<kTokens> acc;
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* block = row + b * kBytes;
      if (kPrefetch) prefetch_block(block, kBytes);
      __m256 factors[kTokens];
      block_start<kTokens>(block, xs, b, factors, acc);
      BlockFactors<kTokens> lanes;
      store_factors(factors, lanes);
      const uint8_t* qs = block + (kFifthBit ? 48 : 16);
      __m256i high_bits;
      if constexpr (kFifthBit) high_bits = load32(block + 16);
#pragma GCC unroll 4
      for (int pair = 0; pair < 4; ++pair) {
        const __m256i v = load32(qs + 32 * pair);
        __m256i low = _mm256_and_si256(v, nibble), up = _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble);
        if constexpr (kFifthBit) {
          low = _mm256_or_si256(low, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high_bits, 2 * pair), bit), 4));
          up = _mm256_or_si256(up, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high_bits, 2 * pair + 1), bit), 4));
        }
        for (int t = 0; t < kTokens; ++t) {
          const int8_t* x = xs[t].x_g8 + 256 * b + 64 * pair;
          accumulate(acc.dots[t], lanes.at(t, 2 * pair), udot(low, x));
          accumulate(acc.dots[t], lanes.at(t, 2 * pair + 1), udot(up, x + 32));
        }
      }
    }
    acc.store(y, ldy);
  }
};

// Q4_K and Q5_K. On VNNI, each 512-bit vector holds all 8 groups of a super-block
// (PreparedX::x_g8_eighths): in eighth k, qwords 2 c and 2 c + 1 are qword k of the 32 bytes of
// groups 2 c (their low nibbles) and 2 c + 1 (their high nibbles). Q4_K leaves the high nibbles
// in place (16 times the code, <= 240; x's scales for those groups carry the sixteenth,
// x_g8_eighths_scale_high16); Q5_K shifts them down and ors in bit j of qword k of its fifth-bit
// bytes as 16 (codes <= 31). Each 32-bit lane keeps one group through the four eighths, so their
// dots add up in the integers (a lane is at most 16 * 240 * 127, exact in f32), and one
// conversion and one FMA per super-block apply the factors. The AVX2 build is Q45_KRow's; the two
// differ by f32 rounding.
template <bool kFifthBit>
struct Q45_KEighthsRow {
  static constexpr int kBlockElements = 256;
#ifdef __AVX512VNNI__
  static constexpr int kBytes = kFifthBit ? 176 : 144;

  // The 8 scales and 8 mins of k_scale_min_bytes as 16 int32 lanes, alternating: lane 2 g is
  // scale g, 2 g + 1 min g. Sub-blocks g < 4 are the low 6 bits of bytes g (scale) and 4 + g
  // (min); g >= 4 take their low 4 bits from byte 4 + g (scale: its low nibble, min: its high
  // nibble) and their top 2 from bits 6-7 of bytes g - 4 (scale) and g (min). One byte shuffle
  // per 128-bit lane (two sub-blocks each) puts a lane's low source in its byte 0 and its top
  // source in byte 1; `packed` is read 16 bytes long.
  __attribute__((always_inline)) static __m512i scale_min_lanes(const uint8_t* packed) {
    constexpr int8_t z = -1;  // a zero byte
    alignas(64) static constexpr int8_t kSources[64] = {
        0, z, z, z, 4, z, z, z, 1, z, z, z, 5,  z, z, z, 2,  z, z, z, 6,  z, z, z, 3,  z, z, z, 7,  z, z, z,
        8, 0, z, z, 8, 4, z, z, 9, 1, z, z, 9,  5, z, z, 10, 2, z, z, 10, 6, z, z, 11, 3, z, z, 11, 7, z, z};
    const __m512i sources =
        _mm512_shuffle_epi8(_mm512_broadcast_i32x4(load16(packed)), _mm512_load_si512(kSources));
    const __m512i low = _mm512_and_si512(
        _mm512_srlv_epi32(sources, _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 4, 0, 4, 0, 4)),
        _mm512_setr_epi32(63, 63, 63, 63, 63, 63, 63, 63, 15, 15, 15, 15, 15, 15, 15, 15));
    // Bits 6-7 of byte 1 to bits 4-5 (zero where byte 1 is).
    return _mm512_ternarylogic_epi32(low, _mm512_srli_epi32(sources, 10), _mm512_set1_epi32(0x30), 0xf8);  // a | (b & c)
  }

  template <int kTokens, bool kPrefetch>
  __attribute__((always_inline)) static void row(const uint8_t* row, int64_t blocks, const PreparedX* xs, float* y,
                                                 int64_t ldy) {
    constexpr int64_t kLow = 0x0f0f0f0f0f0f0f0f, kHigh = int64_t(0xf0f0f0f0f0f0f0f0);
    const __m512i nibbles = kFifthBit ? _mm512_set1_epi8(15)
                                      : _mm512_setr_epi64(kLow, kHigh, kLow, kHigh, kLow, kHigh, kLow, kHigh);
    // Q5_K: the high nibbles down to the low ones; bit j of each fifth-bit byte to bit 4 (a
    // rotation of qword j by 4 - j keeps every byte's bit j within the byte).
    [[maybe_unused]] const __m512i nibble_shifts = _mm512_setr_epi64(0, 4, 0, 4, 0, 4, 0, 4);
    [[maybe_unused]] const __m512i fifth_rotations = _mm512_setr_epi64(4, 3, 2, 1, 0, 63, 62, 61);
    __m512 sums[kTokens], offsets[kTokens];
    for (int t = 0; t < kTokens; ++t) sums[t] = offsets[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* block = row + b * kBytes;
      if (kPrefetch) prefetch_block(block, kBytes);
      // d, dmin alternating, times the pairs: lane 2 g is d scale_g, 2 g + 1 dmin min_g.
      const __m512 d_dmin = _mm512_cvtph_ps(_mm256_set1_epi32(int(u32_at(block))));
      const __m512 scaled = _mm512_mul_ps(_mm512_cvtepi32_ps(scale_min_lanes(block + 4)), d_dmin);
      const __m512 group_scales = _mm512_moveldup_ps(scaled);
      const uint8_t* qs = block + (kFifthBit ? 48 : 16);
      const __m512i first = _mm512_loadu_si512(qs), second = _mm512_loadu_si512(qs + 64);
      __m512i codes[4];
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const __m512i eighth =
            _mm512_permutex2var_epi64(first, _mm512_setr_epi64(k, k, 4 + k, 4 + k, 8 + k, 8 + k, 12 + k, 12 + k), second);
        if constexpr (kFifthBit) {
          const __m512i fifth =
              _mm512_rolv_epi64(_mm512_set1_epi64(int64_t(u64_at(block + 16 + 8 * k))), fifth_rotations);
          codes[k] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srlv_epi64(eighth, nibble_shifts), nibbles), fifth,
                                               _mm512_set1_epi8(16), 0xf8);  // a | (b & c)
        } else {
          codes[k] = _mm512_and_si512(eighth, nibbles);
        }
      }
      for (int t = 0; t < kTokens; ++t) {
        const int8_t* x = xs[t].x_g8_eighths + 256 * b;
        __m512i dots = _mm512_dpbusd_epi32(_mm512_setzero_si512(), codes[0], _mm512_loadu_si512(x));
#pragma GCC unroll 3
        for (int k = 1; k < 4; ++k) dots = _mm512_dpbusd_epi32(dots, codes[k], _mm512_loadu_si512(x + 64 * k));
        const float* x_scales = kFifthBit ? xs[t].x_g8_eighths_scale : xs[t].x_g8_eighths_scale_high16;
        sums[t] = _mm512_fmadd_ps(_mm512_mul_ps(group_scales, _mm512_loadu_ps(x_scales + 16 * b)),
                                  _mm512_cvtepi32_ps(dots), sums[t]);
        offsets[t] = _mm512_fmadd_ps(scaled, _mm512_loadu_ps(xs[t].x_g8_eighths_sum32 + 16 * b), offsets[t]);
      }
    }
    for (int t = 0; t < kTokens; ++t) y[t * ldy] = reduce512(_mm512_sub_ps(sums[t], offsets[t]));
  }
#else
  template <int kTokens, bool kPrefetch>
  __attribute__((always_inline)) static void row(const uint8_t* row, int64_t blocks, const PreparedX* xs, float* y,
                                                 int64_t ldy) {
    Q45_KRow<kFifthBit>::template row<kTokens, kPrefetch>(row, blocks, xs, y, ldy);
  }
#endif
};

// Q6_K: 128 bytes of low nibbles, 64 of 2-bit high pairs, 16 signed scales (one per 16
// elements), d (f16). In half h of 128 elements, 32-element group k takes nibble k / 2 of low
// bytes 64 h + 32 (k % 2) .. + 31 and pair k of high bytes 32 h .. + 31; value d * scale *
// (code - 32). The codes (<= 63) are dotted unsigned (a vpmaddubsw pair <= 2 * 63 * 127). The
// VNNI build takes each 32-bit lane of 4 codes times its own factor scale * d * (x scale), a
// lane's 4 elements sharing one 16-element scale; the AVX2 build below applies the scales to
// the integer dots instead. The 32 is taken out as 32 d sum_m scale_m * (sum of x over
// 16-element group m).
struct Q6_KRow {
  static constexpr int kBlockElements = 256;
  static constexpr int kBytes = 210;

  // Adds block b's offsets (the scales as floats: `scales_low` m < 8, `scales_high` the rest) and
  // gives each token's d * (x scale) of the block's 8 groups in `dx`.
  template <int kTokens>
  __attribute__((always_inline)) static void block_start(const uint8_t* block, const PreparedX* xs, int64_t b,
                                                         __m256 scales_low, __m256 scales_high,
                                                         __m256 (&dx)[kTokens], Accumulators<kTokens>& acc) {
    const float d = half_at(block + 208);
    const __m256 d32 = _mm256_set1_ps(32.0f * d);
    for (int t = 0; t < kTokens; ++t) {
      acc.offsets[t] = _mm256_fmadd_ps(d32, weighted_sums16(scales_low, scales_high, xs[t].x_g8_sum16 + 16 * b), acc.offsets[t]);
      dx[t] = _mm256_mul_ps(_mm256_set1_ps(d), _mm256_loadu_ps(xs[t].x_g8_scale + 8 * b));
    }
  }

#ifdef __AVX512VNNI__
  // Two groups (64 codes) per 512-bit vector: lanes 0-7 accumulate the even groups, 8-15 the odd
  // ones.
  template <int kTokens, bool kPrefetch>
  __attribute__((always_inline)) static void row(const uint8_t* row, int64_t blocks, const PreparedX* xs, float* y,
                                                 int64_t ldy) {
    const __m512i nibble = _mm512_set1_epi8(15), two_bits = _mm512_set1_epi8(0x30);
    // Pair k of the high bytes to bits 4-5: k = 0 / 1 (first chunk of a half), 2 / 3 (second).
    const __m512i first_shifts = _mm512_setr_epi64(4, 4, 4, 4, 2, 2, 2, 2);
    const __m512i second_shifts = _mm512_setr_epi64(0, 0, 0, 0, 2, 2, 2, 2);
    const __m512i pairs = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    Accumulators<kTokens> acc;
    PairSums<kTokens> sums;
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* block = row + b * kBytes;
      if (kPrefetch) prefetch_block(block, kBytes);
      const __m512 scales = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(load16(block + 192)));
      __m256 dx[kTokens];
      block_start<kTokens>(block, xs, b, _mm512_castps512_ps256(scales), _mm512_extractf32x8_ps(scales, 1), dx, acc);
      __m512 factors[kTokens];
      for (int t = 0; t < kTokens; ++t)
        factors[t] = _mm512_mul_ps(scales, _mm512_permutexvar_ps(pairs, _mm512_castps256_ps512(dx[t])));
#pragma GCC unroll 2
      for (int half = 0; half < 2; ++half) {
        const __m512i low = _mm512_loadu_si512(block + 64 * half);
        const __m512i high = _mm512_broadcast_i64x4(load32(block + 128 + 32 * half));
        const __m512i chunks[2] = {
            _mm512_ternarylogic_epi32(low, _mm512_and_si512(_mm512_sllv_epi64(high, first_shifts), two_bits), nibble, 0xec),
            _mm512_ternarylogic_epi32(_mm512_srli_epi16(low, 4),
                                      _mm512_and_si512(_mm512_srlv_epi64(high, second_shifts), two_bits), nibble, 0xec)};
#pragma GCC unroll 2
        for (int c = 0; c < 2; ++c) {
          const int m = 4 * (2 * half + c);  // the chunk's first 16-element scale
          const __m512i lanes = _mm512_setr_epi32(m, m, m, m, m + 1, m + 1, m + 1, m + 1, m + 2, m + 2, m + 2, m + 2,
                                                  m + 3, m + 3, m + 3, m + 3);
          for (int t = 0; t < kTokens; ++t) {
            const __m512i dots = _mm512_dpbusd_epi32(_mm512_setzero_si512(), chunks[c],
                                                     _mm512_loadu_si512(xs[t].x_g8 + 256 * b + 16 * m));
            sums.add(t, _mm512_permutexvar_ps(lanes, factors[t]), dots);
          }
        }
      }
    }
    sums.store(acc, y, ldy);
  }
#else
  // The AVX2 build applies the 16-element scales in the integer domain (vpmaddwd, a lane <= 2 *
  // 16002 * 128 < 2^31) and one factor d * (x scale) per group: on AVX2 alone that is the faster
  // form (per-lane float factors measured 9% slower there). Its sums differ from the VNNI build's
  // by f32 rounding (the scale multiplies before the conversion instead of after).
  template <int kTokens, bool kPrefetch>
  __attribute__((always_inline)) static void row(const uint8_t* row, int64_t blocks, const PreparedX* xs, float* y,
                                                 int64_t ldy) {
    const __m256i nibble = _mm256_set1_epi8(15), two_bits = _mm256_set1_epi8(3);
    Accumulators<kTokens> acc;
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* block = row + b * kBytes;
      if (kPrefetch) prefetch_block(block, kBytes);
      const __m128i scale_bytes = load16(block + 192);
      const __m256i scales = scales_by_group(scale_bytes);
      const __m256 scales_low = floats_of_i8(scale_bytes), scales_high = floats_of_i8(_mm_srli_si128(scale_bytes, 8));
      __m256 dx[kTokens];
      block_start<kTokens>(block, xs, b, scales_low, scales_high, dx, acc);
      BlockFactors<kTokens> factors;
      store_factors(dx, factors);
#pragma GCC unroll 2
      for (int half = 0; half < 2; ++half) {
        const __m256i low0 = load32(block + 64 * half), low1 = load32(block + 64 * half + 32);
        const __m256i high = load32(block + 128 + 32 * half);
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
          const __m256i low = k / 2 == 0 ? (k % 2 == 0 ? low0 : low1)
                                         : _mm256_srli_epi16(k % 2 == 0 ? low0 : low1, 4);
          const __m256i codes = _mm256_or_si256(
              _mm256_and_si256(low, nibble),
              _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high, 2 * k), two_bits), 4));
          const int group = 4 * half + k;  // of 32 elements: scales 2 group, 2 group + 1
          const Group32 g{codes, {}, group_scales(scales, group)};
          group_dots<kTokens, false>(g, xs, 8 * b + group, factors, group, acc);
        }
      }
    }
    acc.store(y, ldy);
  }
#endif
};

// IQ4_XS: d (f16), 16 bits of scale tops (2 per 32 elements), 4 bytes of scale nibbles, 128
// bytes of IQ4 codes (per 32 elements, 16 bytes: low nibbles are elements 0-15, high 16-31).
// Codes become grid values (|v| <= 127) with one byte shuffle; value d * (scale - 32) * v.
struct Iq4XsRow {
  static constexpr int kBlockElements = 256;
  static constexpr int kBytes = 136;

  // Each token's factors of block b, d * (scale - 32) * (x scale); group ib's is lane ib.
  template <int kTokens>
  __attribute__((always_inline)) static void block_factors(const uint8_t* block, const PreparedX* xs, int64_t b,
                                                           __m256 (&factors)[kTokens]) {
    const uint32_t low = u32_at(block + 4);
    const uint32_t tops = uint32_t(block[2] | block[3] << 8);
    // Scale nibble of sub-block ib: nibble ib % 2 of byte ib / 2; top bits: bits 2 ib, 2 ib + 1.
    const __m256i nibbles = _mm256_and_si256(
        _mm256_srlv_epi32(_mm256_set1_epi32(int(low)), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
        _mm256_set1_epi32(15));
    const __m256i top = _mm256_and_si256(
        _mm256_srlv_epi32(_mm256_set1_epi32(int(tops)), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)),
        _mm256_set1_epi32(3));
    const __m256i scale_codes = _mm256_sub_epi32(_mm256_or_si256(nibbles, _mm256_slli_epi32(top, 4)), _mm256_set1_epi32(32));
    const __m256 scales = _mm256_mul_ps(_mm256_set1_ps(half_at(block)), _mm256_cvtepi32_ps(scale_codes));
    for (int t = 0; t < kTokens; ++t) factors[t] = _mm256_mul_ps(scales, _mm256_loadu_ps(xs[t].x_g8_scale + 8 * b));
  }

#ifdef __AVX512VNNI__
  // All 8 groups per 512-bit vector (PreparedX::x_g8_eighths): group j's 16 bytes hold its
  // elements 0-15 in the low nibbles and 16-31 in the high ones, so eighths 0 and 1 are the low
  // nibbles of its qwords 0 and 1, eighths 2 and 3 their high nibbles. Each 32-bit lane keeps
  // one group, the four eighths' dots add up in the integers and one FMA per super-block applies
  // the factors. The values are biased by +128 into unsigned bytes for vpdpbusd, and the dots
  // start at x's eighths offsets (-128 times the lane's digit sum): exact, unbiased, and a lane
  // at most 16 * 255 * 127 on the way. They differ from the AVX2 build's sums by f32 rounding.
  template <int kTokens, bool kPrefetch>
  __attribute__((always_inline)) static void row(const uint8_t* row, int64_t blocks, const PreparedX* xs, float* y,
                                                 int64_t ldy) {
    const __m512i biased_grid =
        _mm512_broadcast_i32x4(_mm_xor_si128(load16(kIq4Values), _mm_set1_epi8(int8_t(0x80))));
    [[maybe_unused]] const __m512i nibble = _mm512_set1_epi8(15);
    // Lane 2 j + h: group j's scale nibble is nibble j % 2 of byte j / 2 of the 4 at byte 4, its
    // top bits bits 2 j, 2 j + 1 of the 16 at byte 2 (moved up by 4, to bits 4-5).
    const __m512i nibble_shifts = _mm512_setr_epi32(0, 0, 4, 4, 8, 8, 12, 12, 16, 16, 20, 20, 24, 24, 28, 28);
    const __m512i top_shifts = _mm512_setr_epi32(0, 0, 2, 2, 4, 4, 6, 6, 8, 8, 10, 10, 12, 12, 14, 14);
    __m512 sums[kTokens];
    for (int t = 0; t < kTokens; ++t) sums[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* block = row + b * kBytes;
      if (kPrefetch) prefetch_block(block, kBytes);
      const __m512i nibbles =
          _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32(int(u32_at(block + 4))), nibble_shifts), _mm512_set1_epi32(15));
      const __m512i tops = _mm512_srlv_epi32(_mm512_set1_epi32(int(uint32_t(block[2] | block[3] << 8) << 4)), top_shifts);
      const __m512i scale_codes =
          _mm512_sub_epi32(_mm512_ternarylogic_epi32(nibbles, tops, _mm512_set1_epi32(0x30), 0xf8), _mm512_set1_epi32(32));
      const __m512 scales = _mm512_mul_ps(_mm512_set1_ps(half_at(block)), _mm512_cvtepi32_ps(scale_codes));
      const __m512i first = _mm512_loadu_si512(block + 8), second = _mm512_loadu_si512(block + 72);
      const __m512i low[2] = {
          _mm512_permutex2var_epi64(first, _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14), second),
          _mm512_permutex2var_epi64(first, _mm512_setr_epi64(1, 3, 5, 7, 9, 11, 13, 15), second)};
      __m512i values[4];
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const __m512i indices = k < 2 ? low[k] : _mm512_srli_epi16(low[k - 2], 4);
#ifdef __AVX512VBMI__
        // The table is the 16 values four times over: bits 4-5 of an index do not matter.
        values[k] = _mm512_permutexvar_epi8(indices, biased_grid);
#else
        values[k] = _mm512_shuffle_epi8(biased_grid, _mm512_and_si512(indices, nibble));
#endif
      }
      for (int t = 0; t < kTokens; ++t) {
        const int8_t* x = xs[t].x_g8_eighths + 256 * b;
        __m512i dots = _mm512_loadu_si512(xs[t].x_g8_eighths_offsets + 16 * b);
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) dots = _mm512_dpbusd_epi32(dots, values[k], _mm512_loadu_si512(x + 64 * k));
        sums[t] = _mm512_fmadd_ps(_mm512_mul_ps(scales, _mm512_loadu_ps(xs[t].x_g8_eighths_scale + 16 * b)),
                                  _mm512_cvtepi32_ps(dots), sums[t]);
      }
    }
    for (int t = 0; t < kTokens; ++t) y[t * ldy] = reduce512(sums[t]);
  }
#else
  template <int kTokens, bool kPrefetch>
  __attribute__((always_inline)) static void row(const uint8_t* row, int64_t blocks, const PreparedX* xs, float* y,
                                                 int64_t ldy) {
    const __m256i grid = _mm256_broadcastsi128_si256(load16(kIq4Values));
    Accumulators<kTokens> acc;
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* block = row + b * kBytes;
      if (kPrefetch) prefetch_block(block, kBytes);
      __m256 factors[kTokens];
      block_factors<kTokens>(block, xs, b, factors);
      BlockFactors<kTokens> lanes;
      store_factors(factors, lanes);
#pragma GCC unroll 8
      for (int ib = 0; ib < 8; ++ib) {
        const __m256i values = _mm256_shuffle_epi8(grid, split_nibbles(block + 8 + 16 * ib));
        for (int t = 0; t < kTokens; ++t)
          accumulate(acc.dots[t], lanes.at(t, ib), sdot(values, xs[t].x_g8 + 256 * b + 32 * ib));
      }
    }
    acc.store(y, ldy);
  }
#endif
};

// ---- IQ2 / IQ3 / IQ1: grid magnitudes with separate signs ----

#include "tensor/ggml_iq_grids.inc"

// ggml's 8th sign bit of an IQ2_XXS / IQ2_XS / IQ3_XXS group: the parity of the 7 stored ones.
inline uint32_t eight_signs(uint32_t seven_bits) {
  const uint32_t bits = seven_bits & 127;
  return bits | uint32_t(__builtin_parity(bits)) << 7;
}

// 32 sign bits (bit i: element i is negative) as bytes +1 / -1.
__attribute__((always_inline)) inline __m256i sign_bytes(uint32_t bits) {
  return _mm256_or_si256(bit_masks(bits), _mm256_set1_epi8(1));
}

// Four 64-bit grid entries of a group of 32, gathered: entry l's index is low[l] | ((high >>
// shift_l) & high_mask) << 8.
__attribute__((always_inline)) inline __m256i gather_entries64(const uint64_t* grid, const uint8_t* low, int high,
                                                               __m128i shifts, int high_mask) {
  const __m128i index = _mm_or_si128(
      _mm_cvtepu8_epi32(_mm_cvtsi32_si128(int(u32_at(low)))),
      _mm_slli_epi32(_mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32(high), shifts), _mm_set1_epi32(high_mask)), 8));
  return _mm256_i32gather_epi64(reinterpret_cast<const long long*>(grid), index, 8);
}

// The f16 at a block's start times a type's constant: the factor of most IQ super-blocks.
struct LeadingHalf {
  float times;
  __attribute__((always_inline)) float operator()(const uint8_t* block) const { return half_at(block) * times; }
};

// The IQ super-block walk: per block of 256 the tokens' factors (scale_of(block) times the x
// scales of its 8 groups), then group(block, ib), a signed Group32, for each group of 32.
template <int kBytes, int kTokens, bool kPrefetch, class Scale, class Group>
__attribute__((always_inline)) inline void iq_row(const uint8_t* row, int64_t blocks, const PreparedX* xs, float* y,
                                                  int64_t ldy, const Scale& scale_of, const Group& group) {
  Accumulators<kTokens> acc;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* block = row + b * kBytes;
    if (kPrefetch) prefetch_block(block, kBytes);
    BlockFactors<kTokens> factors;
    block_factors<kTokens>(_mm256_set1_ps(scale_of(block)), xs, b, factors);
#pragma GCC unroll 8
    for (int ib = 0; ib < 8; ++ib) group_dots<kTokens, true>(group(block, ib), xs, 8 * b + ib, factors, ib, acc);
  }
  acc.store(y, ldy);
}

// In the IQ2 / IQ3 groups below the magnitudes are at most 62 and the integer scales odd and
// at most 31: pairs at most 2 * 62 * 127, lanes 2 * 15748 * 31 < 2^31.

// IQ2_XXS: d, then per 32 elements 8 bytes: four grid indices, a word of four 7-bit sign groups
// and a 4-bit scale s in its top bits; value d (2 s + 1) / 8 * sign * grid.
template <bool kGather>
struct Iq2XxsRow {
  static constexpr int kBlockElements = 256;
  template <int kTokens, bool kPrefetch>
  __attribute__((always_inline)) static void row(const uint8_t* row, int64_t blocks, const PreparedX* xs, float* y,
                                                 int64_t ldy) {
    iq_row<66, kTokens, kPrefetch>(row, blocks, xs, y, ldy, LeadingHalf{0.125f}, group);
  }
  static constexpr auto group = [](const uint8_t* block, int ib) __attribute__((always_inline)) {
    const uint8_t* g = block + 2 + 8 * ib;
    const uint32_t meta = u32_at(g + 4);
    const uint32_t signs = eight_signs(meta) | eight_signs(meta >> 7) << 8 | eight_signs(meta >> 14) << 16 |
                           eight_signs(meta >> 21) << 24;
    const int scale = 2 * int(meta >> 28) + 1;
    __m256i entries;
    if constexpr (kGather)
      entries = _mm256_i32gather_epi64(reinterpret_cast<const long long*>(kIq2xxsGrid),
                                       _mm_cvtepu8_epi32(_mm_cvtsi32_si128(int(u32_at(g)))), 8);
    else
      entries = _mm256_set_epi64x(int64_t(kIq2xxsGrid[g[3]]), int64_t(kIq2xxsGrid[g[2]]), int64_t(kIq2xxsGrid[g[1]]),
                                  int64_t(kIq2xxsGrid[g[0]]));
    return Group32{entries, sign_bytes(signs), _mm256_set1_epi16(int16_t(scale))};
  };
};

// IQ2_XS: 32 16-bit codes (9-bit grid index, 7 sign bits), then 8 bytes of two 4-bit scales (one
// per 16 elements); value d (2 s + 1) / 8 * sign * grid.
template <bool kGather>
struct Iq2XsRow {
  static constexpr int kBlockElements = 256;
  template <int kTokens, bool kPrefetch>
  __attribute__((always_inline)) static void row(const uint8_t* row, int64_t blocks, const PreparedX* xs, float* y,
                                                 int64_t ldy) {
    iq_row<74, kTokens, kPrefetch>(row, blocks, xs, y, ldy, LeadingHalf{0.125f}, group);
  }
  static constexpr auto group = [](const uint8_t* block, int ib) __attribute__((always_inline)) {
    uint16_t code[4];
    __builtin_memcpy(code, block + 2 + 8 * ib, 8);
    const uint32_t signs = eight_signs(code[0] >> 9) | eight_signs(code[1] >> 9) << 8 |
                           eight_signs(code[2] >> 9) << 16 | eight_signs(code[3] >> 9) << 24;
    const uint8_t scales = block[66 + ib];
    __m256i entries;
    if constexpr (kGather)
      entries = _mm256_i32gather_epi64(
          reinterpret_cast<const long long*>(kIq2xsGrid),
          _mm_and_si128(_mm_cvtepu16_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(code))), _mm_set1_epi32(511)), 8);
    else
      entries = _mm256_set_epi64x(int64_t(kIq2xsGrid[code[3] & 511]), int64_t(kIq2xsGrid[code[2] & 511]),
                                  int64_t(kIq2xsGrid[code[1] & 511]), int64_t(kIq2xsGrid[code[0] & 511]));
    return Group32{entries, sign_bytes(signs), split_scales(2 * (scales & 15) + 1, 2 * (scales >> 4) + 1)};
  };
};

// IQ2_S: 32 low index bytes, 32 sign bytes (one per 8 elements), 8 bytes of index high bits (2 per
// 8 elements), 8 bytes of two 4-bit scales; value d (2 s + 1) / 8 * sign * grid.
template <bool kGather>
struct Iq2SRow {
  static constexpr int kBlockElements = 256;
  template <int kTokens, bool kPrefetch>
  __attribute__((always_inline)) static void row(const uint8_t* row, int64_t blocks, const PreparedX* xs, float* y,
                                                 int64_t ldy) {
    iq_row<82, kTokens, kPrefetch>(row, blocks, xs, y, ldy, LeadingHalf{0.125f}, group);
  }
  static constexpr auto group = [](const uint8_t* block, int ib) __attribute__((always_inline)) {
    const uint8_t* low = block + 2 + 4 * ib;
    const int high = block[66 + ib];
    const uint8_t scales = block[74 + ib];
    __m256i entries;
    if constexpr (kGather)
      entries = gather_entries64(kIq2sGrid, low, high, _mm_setr_epi32(0, 2, 4, 6), 3);
    else
      entries = _mm256_set_epi64x(int64_t(kIq2sGrid[low[3] | (high >> 6 & 3) << 8]),
                                  int64_t(kIq2sGrid[low[2] | (high >> 4 & 3) << 8]),
                                  int64_t(kIq2sGrid[low[1] | (high >> 2 & 3) << 8]),
                                  int64_t(kIq2sGrid[low[0] | (high & 3) << 8]));
    return Group32{entries, sign_bytes(u32_at(block + 34 + 4 * ib)), split_scales(2 * (scales & 15) + 1, 2 * (scales >> 4) + 1)};
  };
};

// IQ3_XXS: 64 grid indices (4 magnitudes each), then per 32 elements a word like IQ2_XXS's;
// value d (2 s + 1) / 4 * sign * grid.
template <bool kGather>
struct Iq3XxsRow {
  static constexpr int kBlockElements = 256;
  template <int kTokens, bool kPrefetch>
  __attribute__((always_inline)) static void row(const uint8_t* row, int64_t blocks, const PreparedX* xs, float* y,
                                                 int64_t ldy) {
    iq_row<98, kTokens, kPrefetch>(row, blocks, xs, y, ldy, LeadingHalf{0.25f}, group);
  }
  static constexpr auto group = [](const uint8_t* block, int ib) __attribute__((always_inline)) {
    const uint8_t* index = block + 2 + 8 * ib;
    const uint32_t meta = u32_at(block + 66 + 4 * ib);
    const uint32_t signs = eight_signs(meta) | eight_signs(meta >> 7) << 8 | eight_signs(meta >> 14) << 16 |
                           eight_signs(meta >> 21) << 24;
    const int scale = 2 * int(meta >> 28) + 1;
    __m256i entries;
    if constexpr (kGather)
      entries = _mm256_i32gather_epi32(reinterpret_cast<const int*>(kIq3xxsGrid),
                                       _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(index))), 4);
    else
      entries = _mm256_setr_epi32(int(kIq3xxsGrid[index[0]]), int(kIq3xxsGrid[index[1]]), int(kIq3xxsGrid[index[2]]),
                                  int(kIq3xxsGrid[index[3]]), int(kIq3xxsGrid[index[4]]), int(kIq3xxsGrid[index[5]]),
                                  int(kIq3xxsGrid[index[6]]), int(kIq3xxsGrid[index[7]]));
    return Group32{entries, sign_bytes(signs), _mm256_set1_epi16(int16_t(scale))};
  };
};

// IQ3_S: 64 low index bytes, 8 bytes of ninth index bits (index k: bit k % 8 of byte k / 8), 32
// sign bytes, 4 bytes of two 4-bit scales; value d (2 s + 1) * sign * grid.
template <bool kGather>
struct Iq3SRow {
  static constexpr int kBlockElements = 256;
  template <int kTokens, bool kPrefetch>
  __attribute__((always_inline)) static void row(const uint8_t* row, int64_t blocks, const PreparedX* xs, float* y,
                                                 int64_t ldy) {
    iq_row<110, kTokens, kPrefetch>(row, blocks, xs, y, ldy, LeadingHalf{1.0f}, group);
  }
  static constexpr auto group = [](const uint8_t* block, int ib) __attribute__((always_inline)) {
    const uint8_t* low = block + 2 + 8 * ib;
    const int high = block[66 + ib];
    const int scale = 2 * ((block[106 + ib / 2] >> (4 * (ib % 2))) & 15) + 1;
    __m256i entries;
    if constexpr (kGather) {
      // Entry j's ninth bit, bit j of `high`, moved to bit 8 of lane j.
      const __m256i index = _mm256_or_si256(
          _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(low))),
          _mm256_and_si256(_mm256_sllv_epi32(_mm256_set1_epi32(high), _mm256_setr_epi32(8, 7, 6, 5, 4, 3, 2, 1)),
                           _mm256_set1_epi32(256)));
      entries = _mm256_i32gather_epi32(reinterpret_cast<const int*>(kIq3sGrid), index, 4);
    } else {
      auto entry = [&](int j) { return int(kIq3sGrid[low[j] | (high >> j & 1) << 8]); };
      entries = _mm256_setr_epi32(entry(0), entry(1), entry(2), entry(3), entry(4), entry(5), entry(6), entry(7));
    }
    return Group32{entries, sign_bytes(u32_at(block + 74 + 4 * ib)), _mm256_set1_epi16(int16_t(scale))};
  };
};

// IQ1_S / IQ1_M: a value is dl * (grid + delta), grid in {-1, 0, 1} and delta +-1/8, that is
// dl / 8 * (8 grid +- 1): signed codes in {-9, -7, -1, 1, 7, 9}, dotted as magnitudes (<= 9) with
// x taking their signs. Integer scales odd and at most 15: pairs <= 2 * 9 * 127, lanes 2 * 2286 *
// 15. `grid` holds the 4 grid entries of 8 elements, `deltas` +1 or -1 bytes.
__attribute__((always_inline)) inline Group32 iq1_group(__m256i grid, __m256i deltas, __m256i scales) {
  const __m256i codes = _mm256_add_epi8(_mm256_sign_epi8(_mm256_set1_epi8(8), grid), deltas);
  return Group32{_mm256_abs_epi8(codes), codes, scales};
}

// IQ1_S: d, 32 low index bytes, then per 32 elements a 16-bit word: four 3-bit index tops, a
// 3-bit scale s and the delta's sign (bit 15); value d (2 s + 1) (grid + delta).
template <bool kGather>
struct Iq1SRow {
  static constexpr int kBlockElements = 256;
  template <int kTokens, bool kPrefetch>
  __attribute__((always_inline)) static void row(const uint8_t* row, int64_t blocks, const PreparedX* xs, float* y,
                                                 int64_t ldy) {
    iq_row<50, kTokens, kPrefetch>(row, blocks, xs, y, ldy, LeadingHalf{0.125f}, group);
  }
  static constexpr auto group = [](const uint8_t* block, int ib) __attribute__((always_inline)) {
    const uint8_t* low = block + 2 + 4 * ib;
    const int meta = block[34 + 2 * ib] | block[35 + 2 * ib] << 8;
    auto entry = [&](int l) { return int64_t(kIq1sGrid[low[l] | (meta >> (3 * l) & 7) << 8]); };
    const __m256i entries = kGather ? gather_entries64(kIq1sGrid, low, meta, _mm_setr_epi32(0, 3, 6, 9), 7)
                                    : _mm256_set_epi64x(entry(3), entry(2), entry(1), entry(0));
    return iq1_group(entries, _mm256_set1_epi8(meta & 0x8000 ? -1 : 1),
                     _mm256_set1_epi16(int16_t(2 * (meta >> 12 & 7) + 1)));
  };
};

// IQ1_M: 32 low index bytes, 16 bytes of (3 index bits, the delta's sign) per 8 elements, then
// four 16-bit words of twelve 3-bit scales (two per 32 elements) whose top nibbles are the f16 d;
// value d (2 s + 1) (grid + delta).
template <bool kGather>
struct Iq1MRow {
  static constexpr int kBlockElements = 256;
  template <int kTokens, bool kPrefetch>
  __attribute__((always_inline)) static void row(const uint8_t* row, int64_t blocks, const PreparedX* xs, float* y,
                                                 int64_t ldy) {
    iq_row<56, kTokens, kPrefetch>(row, blocks, xs, y, ldy, d_over_8, group);
  }
  static constexpr auto d_over_8 = [](const uint8_t* block) __attribute__((always_inline)) {
    uint16_t words[4];
    __builtin_memcpy(words, block + 48, 8);
    const uint16_t d = uint16_t((words[0] >> 12) | (words[1] >> 8 & 0x00f0) | (words[2] >> 4 & 0x0f00) | (words[3] & 0xf000));
    return _cvtsh_ss(d) * 0.125f;
  };
  static constexpr auto group = [](const uint8_t* block, int ib) __attribute__((always_inline)) {
    const uint8_t* low = block + 4 * ib;
    const int high = block[32 + 2 * ib] | block[33 + 2 * ib] << 8;  // entry l: bits 4 l .. 4 l + 3
    const int word = block[48 + 2 * (ib / 2)] | block[49 + 2 * (ib / 2)] << 8, shift = 6 * (ib % 2);
    auto entry = [&](int l) { return int64_t(kIq1sGrid[low[l] | (high >> (4 * l) & 7) << 8]); };
    // Entry l's delta sign is bit 4 l + 3: compared in all four 16-bit words of its 64-bit lane.
    const __m256i sign_bit = _mm256_set_epi64x(int64_t(0x8000800080008000), 0x0800080008000800, 0x0080008000800080,
                                               0x0008000800080008);
    const __m256i negative = _mm256_cmpeq_epi16(_mm256_and_si256(_mm256_set1_epi16(int16_t(high)), sign_bit), sign_bit);
    const __m256i entries = kGather ? gather_entries64(kIq1sGrid, low, high, _mm_setr_epi32(0, 4, 8, 12), 7)
                                    : _mm256_set_epi64x(entry(3), entry(2), entry(1), entry(0));
    return iq1_group(entries, _mm256_or_si256(negative, _mm256_set1_epi8(1)),
                     split_scales(2 * (word >> shift & 7) + 1, 2 * (word >> (shift + 3) & 7) + 1));
  };
};

// Tokens per pass over a block of rows in a decode batch; the block's codes stay in L1 from one
// pass to the next, and only the first pass prefetches.
constexpr int kPassTokens = 4;
constexpr int64_t kBlockRows = 4;

template <class Row>
void rows_q8(const WeightMatrix& w, const PreparedX* xs, int n, int64_t row_begin, int64_t row_end, float* y,
             int64_t ldy) {
  const int64_t blocks = w.cols / Row::kBlockElements;
  if (n == 1) {
    for (int64_t r = row_begin; r < row_end; ++r)
      Row::template row<1, true>(w.data + r * w.row_stride, blocks, xs, y + (r - row_begin), ldy);
    return;
  }
  in_token_passes<kPassTokens>(n, row_begin, row_end, kBlockRows, [&](auto tokens, auto first, int64_t r, int t) {
    Row::template row<decltype(tokens)::value, bool(decltype(first)::value)>(w.data + r * w.row_stride, blocks,
                                                                              xs + t, y + t * ldy + (r - row_begin), ldy);
  });
}

// The row kernel of each type that has one; nullptr for the others. kGathers: the IQ1 / IQ2 /
// IQ3 grid entries are fetched with one vpgatherdd / vpgatherdq per group instead of
// scalar loads and inserts (the same entries, so the same results bit for bit; which is faster
// depends on the core, see ggml_rows_q8).
template <bool kGathers>
GgmlRowsQ8 rows_q8_of(GgmlType type) {
  switch (type) {
    case GgmlType::Q8_0: return rows_q8<Block32Row<Q8_0Block>>;
    case GgmlType::Q4_0: return rows_q8<Block32Row<Q4_0Block>>;
    case GgmlType::Q4_1: return rows_q8<Block32Row<Q4_1Block>>;
    case GgmlType::Q5_0: return rows_q8<Block32Row<Q5_0Block>>;
    case GgmlType::Q5_1: return rows_q8<Block32Row<Q5_1Block>>;
    case GgmlType::IQ4_NL: return rows_q8<Block32Row<Iq4NlBlock>>;
    case GgmlType::Q2_K: return rows_q8<Q2_KRow>;
    case GgmlType::Q3_K: return rows_q8<Q3_KRow>;
    case GgmlType::Q4_K: return rows_q8<Q45_KEighthsRow<false>>;
    case GgmlType::Q5_K: return rows_q8<Q45_KEighthsRow<true>>;
    case GgmlType::Q6_K: return rows_q8<Q6_KRow>;
    case GgmlType::IQ4_XS: return rows_q8<Iq4XsRow>;
    case GgmlType::IQ2_XXS: return rows_q8<Iq2XxsRow<kGathers>>;
    case GgmlType::IQ2_XS: return rows_q8<Iq2XsRow<kGathers>>;
    case GgmlType::IQ2_S: return rows_q8<Iq2SRow<kGathers>>;
    case GgmlType::IQ3_XXS: return rows_q8<Iq3XxsRow<kGathers>>;
    case GgmlType::IQ3_S: return rows_q8<Iq3SRow<kGathers>>;
    case GgmlType::IQ1_S: return rows_q8<Iq1SRow<kGathers>>;
    case GgmlType::IQ1_M: return rows_q8<Iq1MRow<kGathers>>;
    default: return nullptr;
  }
}

}  // namespace
}  // namespace inkling::kernels::detail
