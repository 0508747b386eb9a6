// Internal: the 4-bit VNNI matvec rows, shared by linear_avx512vnni.cpp (nibbles decoded with
// AND / shift / vpshufb) and linear_avx512vbmi.cpp (vpermb). Included inside an anonymous
// namespace after simd_common.h and simd_avx512.h, like them.
//
// The f32 decode of 4-bit codes costs ~3 instructions per 16 codes and caps a core at ~7-12 GB/s.
// Here x is pre-quantized to integers per 8 columns (backend.h), and a 64-byte load of 128 codes
// becomes two byte vectors that vpdpbusd multiplies with x's int8 digits directly. 32-bit lane l
// of the accumulator holds columns 8 l .. 8 l + 7, which lie in one affine group
// (group_size % 8 == 0) or NVFP4 block, so each 128 columns end with one int -> float conversion
// and one FMA by (weight scale of the lane) * (x scale of the lane).
//
// Fast precision gives x one digit (llama.cpp's q8 activations); exact precision three (a 24-bit
// integer, within f32 rounding of x: LinearPrecision.ExactIntegerMatvecStaysF32Class measures it
// against the scalar f32 products). Digits are folded most significant first, the partial sum shifted
// a byte left before each next one; every product and sum is an exact integer (the magnitudes
// are bounded at each kernel).
//
// Zen 4 runs about one 512-bit vector op per cycle here, so every vector op per 64 bytes of codes
// counts. Per 64 bytes, one digit:
//   affine: vpermb (or shift + AND), AND, 2 x vpdpbusd, cvt, permps, mul, FMA            (8)
//   NVFP4:  2 x vpermb (or 3 AND / shift + 2 x vpshufb), 2 x vpdpbusd, cvt, permps, mul, FMA
// and each further digit adds two vpdpbusd and a shift. The lane -> scale indices are
// compile-time constants (the loops over one block of 16 scales are unrolled), and NVFP4's +12
// weight bias is removed by starting the integer dot at x_q8_nvfp4_offset (one digit) or adding
// it at the end (three) rather than by multiplying it out.
//
// Affine: W . x = sum_g scale_g * (codes_g . x^_g) + bias_g * sum(x^_g), with x^ the quantized x
// throughout, so the result is exactly W . x^ (no cancellation error from the bias split). With
// one digit both nibbles enter the integer dot as 16 * code (the high one in place, byte & 0xF0)
// and the row's sum is scaled by the exact factor 1/16 at the end; with three, as plain codes
// (range).
// NVFP4: vpdpbusd needs unsigned weights: the nibble is looked up as 2 * fp4 + 12 in [0, 24].

// One row at a time: each thread then reads a single stream strictly in order, which the
// prefetchers follow best. Cold (decode) matvecs stream 1.4-1.9x faster than with 4-row blocks
// (bench_kernels matvec/q4g64/expert_1024x2048: 12.0 -> 22.6 GB/s).
// Software prefetch 8 KiB ahead in the code stream, and the scales (and biases) of the rows as
// far ahead (prefetch_first_params; against no prefetch, with the scales two rows ahead: A/B, 8
// alternating runs, expert matvec +10%, 2048 x 8192 +5%). 8 KiB
// rather than 2: the one-digit kernel (--fast) then reads faster than one core's stream at 2 KiB
// (INKLING_THREADS=1 tools/ab_kernels.py, 6 rounds: 2048-column matvecs +4-12%), and whole-model
// decode gained in this host's fast phases (mlx-4bit +3.6% and +5.1%, NVFP4 +1.8%, 6 alternating
// rounds each; 0.99x in a slow phase, where two cores already saturate it).
// The code prefetch is kRowPrefetchBytes ahead, non-temporal (simd_common.h, with the A/B runs).
//
// The three-digit kernel (exact precision) also reads one row at a time. It used to take two
// adjacent rows per pass to share each load of x (3 x 128 bytes per 64 bytes of codes) between
// them, which is faster cache-resident, but since each thread reads one share in order
// (parallel_for_shares) one stream is faster from memory: a layer's eight MLX experts on two
// threads, exact, in-process alternation, 6 rounds each: 79.5% -> 94.8% and 78.0% -> 93.1% of the
// probe (fused w13: 79.7% -> 96.4%); whole-model exact mlx-4bit decode +3% tok/s (12 of 12
// alternating rounds, host at ~50 GB/s). Where the host gives two cores ~85 GB/s, two rows were
// level or up to 5% faster (NVFP4), the kernel being the limit there.

// Scales (and biases) are prefetched whole rows at a time, as far ahead as the codes (and at
// least kPrefetchRows rows). Two rows ahead was ~60 ns of a fast host's stream, less than a
// memory latency: a layer's eight MLX experts read 91% of the probe with two rows and 93-94%
// with 8 KiB (host at ~80 GB/s, two threads, variants alternated in one process, 6 rounds;
// NVFP4 level); level with the host at ~45 GB/s. Row r prefetches row r + ahead; this
// prefetches the params of the range's first `ahead` rows and returns `ahead`.
inline int64_t prefetch_first_params(const WeightMatrix& w, int64_t row_begin, int64_t row_end) {
  const int64_t ahead = std::max(kPrefetchRows, kRowPrefetchBytes / w.row_stride);
  const int64_t first = std::min(ahead, row_end - row_begin);
  prefetch_lines(w.scales + row_begin * w.scales_row_stride, first * w.scales_row_stride);
  if (w.biases) prefetch_lines(w.biases + row_begin * w.biases_row_stride, first * w.biases_row_stride);
  return ahead;
}

// The x digits of one chunk: kParts pairs of (even columns, odd columns), most significant first.
template <int kParts>
struct ChunkX {
  __m512i even[kParts], odd[kParts];
  __m512 scale;
};

template <int kParts>
inline ChunkX<kParts> load_chunk_x(const PreparedX& px, int64_t ch) {
  const int8_t* q = px.x_q8 + 128 * kParts * ch;
  ChunkX<kParts> x;
#pragma GCC unroll 3
  for (int part = 0; part < kParts; ++part) {
    x.even[part] = _mm512_loadu_si512(q + 128 * part);
    x.odd[part] = _mm512_loadu_si512(q + 128 * part + 64);
  }
  x.scale = _mm512_loadu_ps(px.x_q8_scale + 16 * ch);
  return x;
}

// Sum over each 32-bit lane of low * even + high * odd, for an x of kParts digits: exact in
// int32 (the callers bound the magnitudes). Digits are folded in most significant first,
// shifting the partial sum one byte left before each next digit.
template <int kParts>
inline __m512i digit_dots(__m512i start, __m512i low, __m512i high, const ChunkX<kParts>& x) {
  __m512i acc = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(start, low, x.even[0]), high, x.odd[0]);
#pragma GCC unroll 2
  for (int part = 1; part < kParts; ++part)
    acc = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_slli_epi32(acc, 8), low, x.even[part]), high,
                              x.odd[part]);
  return acc;
}

// 16 * (low nibble) of every byte of v.
template <bool kVbmi>
inline __m512i low_nibbles_x16(__m512i v) {
  if constexpr (kVbmi) {
    // vpermb reads the low 6 bits of each byte: a table that repeats every 16 entries sees only
    // the low nibble.
    const __m512i table = _mm512_broadcast_i32x4(
        _mm_setr_epi8(0, 16, 32, 48, 64, 80, 96, 112, -128, -112, -96, -80, -64, -48, -32, -16));
    return _mm512_permutexvar_epi8(v, table);
  } else {
    return _mm512_and_si512(_mm512_slli_epi16(v, 4), _mm512_set1_epi8(char(0xF0)));
  }
}

// The low nibble of every byte of v.
template <bool kVbmi>
inline __m512i low_nibbles(__m512i v) {
  if constexpr (kVbmi) {
    const __m512i table = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    return _mm512_permutexvar_epi8(v, table);
  } else {
    return _mm512_and_si512(v, _mm512_set1_epi8(15));
  }
}

// kGroup: the affine group size, 8 .. 128 (vnni_matvec_shape). kParts: digits of x (1 or 3).
// Row r against kTokens x's (a decode batch; the matvec is kTokens = 1): the codes are loaded and
// decoded once for all of them, and each token's integer dots, FMAs and sums are those of
// kTokens = 1 in the same order, so its value is bit for bit its matvec's. kPrefetch: prefetch
// the codes ahead and the params of row r + prefetch_rows (the first pass over a block of rows).
template <bool kVbmi, int kGroup, int kParts, int kTokens, bool kPrefetch>
void affine4_row(const WeightMatrix& w, int64_t r, const PreparedX* xs, int64_t prefetch_rows, float* y,
                 int64_t ldy) {
  constexpr int kGroupsPerChunk = 128 / kGroup;
  constexpr int kChunksPerBlock = 16 / kGroupsPerChunk;  // chunks sharing one vector of 16 scales
  constexpr int kLaneShift = __builtin_ctz(unsigned(kGroup));
  // One digit: both nibbles as 16 * code (one op fewer; 240 * 127 * 8 fits easily). Three digits
  // (|Q| < 2^23): plain codes, so 15 * 2^23 * 8 stays below 2^31.
  constexpr bool kTimes16 = kParts == 1;
  const uint8_t* codes = w.data + r * w.row_stride;
  const uint8_t* scales = w.scales + r * w.scales_row_stride;
  const uint8_t* biases = w.biases + r * w.biases_row_stride;
  // Two chains for the codes, alternating chunks: with one, the 4-cycle FMA latency per chunk
  // bounded a cache-resident row. The bias term has its own: in a cold stream the bias row may
  // arrive after the codes, and a shared chain would hold every FMA of the row back for it.
  __m512 acc[kTokens][2], bias_acc[kTokens];
#pragma GCC unroll 4
  for (int t = 0; t < kTokens; ++t) acc[t][0] = acc[t][1] = bias_acc[t] = _mm512_setzero_ps();
  const int64_t chunks = w.cols / 128, groups = w.cols / kGroup;
  const int64_t param_bytes = groups * (w.scale_dtype == DType::F32 ? 4 : 2);  // BF16 / F16 / F32
  if constexpr (kPrefetch) {
    prefetch_lines(scales + prefetch_rows * w.scales_row_stride, param_bytes);
    prefetch_lines(biases + prefetch_rows * w.biases_row_stride, param_bytes);
  }
  const __m512i high_nibbles = _mm512_set1_epi8(char(0xF0));
  const __m512i lane_column =
      _mm512_setr_epi32(0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120);
  // One block: the chunks that share a vector of 16 scales. Full blocks (all but perhaps the
  // last) run without bounds checks or masks: the per-row scalar work showed in the hot rate.
  auto block = [&](int64_t first_chunk, auto full) {
    constexpr bool kFull = decltype(full)::value;
    const int64_t first_group = first_chunk * kGroupsPerChunk;
    const __mmask16 mask = kFull ? __mmask16(0xffff) : tail_mask(groups - first_group);
    const __m512 scale_block = load_params16(scales, w.scale_dtype, first_group, mask);
    const __m512 bias_block = load_params16(biases, w.scale_dtype, first_group, mask);
#pragma GCC unroll 4
    for (int t = 0; t < kTokens; ++t)
      bias_acc[t] = _mm512_fmadd_ps(bias_block, _mm512_maskz_loadu_ps(mask, xs[t].group_sums_q8 + first_group),
                                    bias_acc[t]);
#pragma GCC unroll 16
    for (int c = 0; c < kChunksPerBlock; ++c) {
      const int64_t ch = first_chunk + c;
      if (!kFull && ch >= chunks) break;
      // Lane l of chunk c belongs to group c * kGroupsPerChunk + 8 l / kGroup of the block.
      const __m512i lane_scale = _mm512_add_epi32(_mm512_srli_epi32(lane_column, kLaneShift),
                                                  _mm512_set1_epi32(c * kGroupsPerChunk));
      if constexpr (kPrefetch)
        prefetch_stream(reinterpret_cast<const char*>(codes + 64 * ch + kRowPrefetchBytes));
      const __m512i v = _mm512_loadu_si512(codes + 64 * ch);
      __m512i low, high;
      if constexpr (kTimes16) {
        low = low_nibbles_x16<kVbmi>(v);
        high = _mm512_and_si512(v, high_nibbles);
      } else {
        low = low_nibbles<kVbmi>(v);
        high = low_nibbles<kVbmi>(_mm512_srli_epi16(v, 4));
      }
      const __m512 weight_scales = _mm512_permutexvar_ps(lane_scale, scale_block);
#pragma GCC unroll 4
      for (int t = 0; t < kTokens; ++t) {
        const ChunkX<kParts> x = load_chunk_x<kParts>(xs[t], ch);
        const __m512i dots = digit_dots<kParts>(_mm512_setzero_si512(), low, high, x);
        acc[t][c & 1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dots), _mm512_mul_ps(weight_scales, x.scale), acc[t][c & 1]);
      }
    }
  };
  const int64_t full_blocks = chunks / kChunksPerBlock;
  for (int64_t b = 0; b < full_blocks; ++b) block(b * kChunksPerBlock, std::true_type());
  if (full_blocks * kChunksPerBlock < chunks) block(full_blocks * kChunksPerBlock, std::false_type());
#pragma GCC unroll 4
  for (int t = 0; t < kTokens; ++t) {
    const __m512 codes_sum = _mm512_add_ps(acc[t][0], acc[t][1]);
    // One digit entered the codes as 16 * code: scaling the sum by the exact 1/16 rounds as
    // scaling each scale did.
    y[t * ldy] = _mm512_reduce_add_ps(kTimes16 ? _mm512_fmadd_ps(codes_sum, _mm512_set1_ps(1.0f / 16.0f), bias_acc[t])
                                               : _mm512_add_ps(codes_sum, bias_acc[t]));
  }
}

// 2 * fp4 + 12 for each E2M1 code at byte index & 15 (vpermb: the table repeats every 16
// entries; vpshufb: per 128-bit lane, and the index must be masked to 4 bits first).
inline __m512i nvfp4_biased_table() {
  return _mm512_broadcast_i32x4(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
}

template <bool kVbmi>
inline __m512i nvfp4_lookup(__m512i indices, __m512i table) {
  if constexpr (kVbmi) {
    return _mm512_permutexvar_epi8(indices, table);
  } else {
    return _mm512_shuffle_epi8(table, _mm512_and_si512(indices, _mm512_set1_epi8(15)));
  }
}

// True when none of the n E4M3 bytes has its sign bit set or is NaN (0x7F): then the scales
// decode with a shift and a multiply (e4m3x16_nonnegative_to_f32). ModelOpt's block scales are
// amax / 6 / global scale, never negative; the general decode stays for other files. Only rows of
// matrices the binder did not mark (WeightMatrix::scales_nonnegative_finite) are checked here.
inline bool e4m3_nonnegative_finite(const uint8_t* bytes, int64_t n) {
  const __m512i largest = _mm512_set1_epi8(0x7e);
  __mmask64 outside = 0;
  int64_t i = 0;
  for (; i + 64 <= n; i += 64)
    outside |= _mm512_cmpgt_epu8_mask(_mm512_loadu_si512(bytes + i), largest);
  if (i < n) {
    const __mmask64 tail = _cvtu64_mask64(~uint64_t(0) >> (64 - (n - i)));
    outside |= _mm512_mask_cmpgt_epu8_mask(tail, _mm512_maskz_loadu_epi8(tail, bytes + i), largest);
  }
  return outside == 0;
}

// kParts: digits of x (1 or 3). With 3, |Q| < 2^23: 24 * 2^23 * 8 still fits in int32.
// kNonNegativeScales: every block scale of the row passed e4m3_nonnegative_finite. Row r against
// kTokens x's, each token's arithmetic that of kTokens = 1 in the same order (affine4_row).
template <bool kVbmi, int kParts, bool kNonNegativeScales, int kTokens, bool kPrefetch>
void nvfp4_row(const WeightMatrix& w, int64_t r, const PreparedX* xs, int64_t prefetch_rows, float* y, int64_t ldy) {
  const uint8_t* codes = w.data + r * w.row_stride;
  const uint8_t* scales = w.scales + r * w.scales_row_stride;
  __m512 acc[kTokens][2];
#pragma GCC unroll 4
  for (int t = 0; t < kTokens; ++t) acc[t][0] = acc[t][1] = _mm512_setzero_ps();
  const __m512i table = nvfp4_biased_table();
  const int64_t chunks = w.cols / 128;
  if constexpr (kPrefetch) prefetch_lines(scales + prefetch_rows * w.scales_row_stride, w.cols / 16);
  // One vector of 16 block scales covers two chunks (8 blocks of 16 columns each). As in
  // affine4_row, only the last pair may be a single chunk.
  auto pair = [&](int64_t first_chunk, auto both) {
    constexpr int kChunks = decltype(both)::value ? 2 : 1;
    const __mmask16 mask = kChunks == 2 ? __mmask16(0xffff) : __mmask16(0xff);
    const __m512 block_scales = kNonNegativeScales ? e4m3x16_nonnegative_to_f32(scales + 8 * first_chunk, mask)
                                                   : e4m3x16_to_f32(scales + 8 * first_chunk, mask);
#pragma GCC unroll 2
    for (int c = 0; c < kChunks; ++c) {
      const int64_t ch = first_chunk + c;
      // Lane l covers columns 8 l .. 8 l + 7: block l / 2 of this chunk.
      const __m512i spread = _mm512_add_epi32(
          _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7), _mm512_set1_epi32(8 * c));
      if constexpr (kPrefetch)
        prefetch_stream(reinterpret_cast<const char*>(codes + 64 * ch + kRowPrefetchBytes));
      const __m512i v = _mm512_loadu_si512(codes + 64 * ch);
      const __m512i low = nvfp4_lookup<kVbmi>(v, table);
      const __m512i high = nvfp4_lookup<kVbmi>(_mm512_srli_epi16(v, 4), table);
      const __m512 weight_scales = _mm512_permutexvar_ps(spread, block_scales);
#pragma GCC unroll 4
      for (int t = 0; t < kTokens; ++t) {
        const ChunkX<kParts> x = load_chunk_x<kParts>(xs[t], ch);
        // -12 * sum(Q) takes the +12 of the weights back out: as the start of a one-digit dot, or
        // added at the end of a three-digit one (its digits are shifted as they fold in).
        const __m512i offset = _mm512_loadu_si512(xs[t].x_q8_nvfp4_offset + 16 * ch);
        __m512i dots;
        if constexpr (kParts == 1) {
          dots = digit_dots<kParts>(offset, low, high, x);
        } else {
          dots = _mm512_add_epi32(digit_dots<kParts>(_mm512_setzero_si512(), low, high, x), offset);
        }
        acc[t][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dots), _mm512_mul_ps(weight_scales, x.scale), acc[t][c]);
      }
    }
  };
  int64_t first_chunk = 0;
  for (; first_chunk + 2 <= chunks; first_chunk += 2) pair(first_chunk, std::true_type());
  if (first_chunk < chunks) pair(first_chunk, std::false_type());
  // The table held 2 * fp4.
#pragma GCC unroll 4
  for (int t = 0; t < kTokens; ++t)
    y[t * ldy] = _mm512_reduce_add_ps(_mm512_add_ps(acc[t][0], acc[t][1])) * (0.5f * w.global_scale);
}

// Row at a time, each a call: computing the rows of a range in one function and reducing them
// four at a time was 10-16% faster cache-resident (one core, aligned data), but a layer's eight
// MLX experts then read 5-8 points less of the probe where the host gives two cores ~45-50 GB/s
// (in-process variants and alternating builds, 9 of 9 pairs), and no faster where it gives ~80.
template <bool kVbmi, int kGroup, int kParts>
void affine4_rows(const WeightMatrix& w, const PreparedX& px, int64_t row_begin, int64_t row_end,
                  float* y) {
  const int64_t prefetch_rows = prefetch_first_params(w, row_begin, row_end);
  for (int64_t r = row_begin; r < row_end; ++r)
    affine4_row<kVbmi, kGroup, kParts, 1, true>(w, r, &px, prefetch_rows, y + (r - row_begin), 1);
}

// Tokens per pass of a decode batch: one digit keeps 4 tokens' x (2 registers each) and
// accumulators (3) in registers beside the codes; three digits (6 registers of x) take 2.
template <int kParts>
constexpr int kAffinePassTokens = kParts == 1 ? 4 : 2;

// A decode batch: per block of ~8 KiB of rows (they stay in L1 from one pass to the next), the
// tokens in passes of kAffinePassTokens; only the first pass prefetches.
template <bool kVbmi, int kGroup, int kParts>
void affine4_rows_multi(const WeightMatrix& w, const PreparedX* xs, int n, int64_t row_begin, int64_t row_end,
                        float* y, int64_t ldy) {
  const int64_t prefetch_rows = prefetch_first_params(w, row_begin, row_end);
  const int64_t fitting = (int64_t(8) << 10) / w.row_stride, block_rows = fitting > 1 ? fitting : 1;
  in_token_passes<kAffinePassTokens<kParts>>(n, row_begin, row_end, block_rows,
                                             [&](auto tokens, auto first, int64_t r, int t) {
    affine4_row<kVbmi, kGroup, kParts, decltype(tokens)::value, bool(decltype(first)::value)>(
        w, r, xs + t, prefetch_rows, y + t * ldy + (r - row_begin), ldy);
  });
}

template <bool kVbmi, int kParts>
void nvfp4_rows(const WeightMatrix& w, const PreparedX& px, int64_t row_begin, int64_t row_end,
                float* y) {
  const int64_t scale_bytes = w.cols / 16, prefetch_rows = prefetch_first_params(w, row_begin, row_end);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const bool nonnegative =
        w.scales_nonnegative_finite || e4m3_nonnegative_finite(w.scales + r * w.scales_row_stride, scale_bytes);
    float* out = y + (r - row_begin);
    if (nonnegative)
      nvfp4_row<kVbmi, kParts, true, 1, true>(w, r, &px, prefetch_rows, out, 1);
    else
      nvfp4_row<kVbmi, kParts, false, 1, true>(w, r, &px, prefetch_rows, out, 1);
  }
}

template <bool kVbmi, int kParts>
void vnni_rows_parts(const WeightMatrix& w, const PreparedX& px, int64_t row_begin, int64_t row_end,
                     float* y) {
  if (w.format == WeightFormat::NvFp4) return nvfp4_rows<kVbmi, kParts>(w, px, row_begin, row_end, y);
  switch (w.group_size) {
    case 8: return affine4_rows<kVbmi, 8, kParts>(w, px, row_begin, row_end, y);
    case 16: return affine4_rows<kVbmi, 16, kParts>(w, px, row_begin, row_end, y);
    case 32: return affine4_rows<kVbmi, 32, kParts>(w, px, row_begin, row_end, y);
    case 64: return affine4_rows<kVbmi, 64, kParts>(w, px, row_begin, row_end, y);
    default: return affine4_rows<kVbmi, 128, kParts>(w, px, row_begin, row_end, y);  // vnni_matvec_shape
  }
}

template <bool kVbmi>
void vnni_rows(const WeightMatrix& w, const PreparedX& px, int64_t row_begin, int64_t row_end,
               float* y) {
  if (px.x_q8_parts == 3) return vnni_rows_parts<kVbmi, 3>(w, px, row_begin, row_end, y);
  vnni_rows_parts<kVbmi, 1>(w, px, row_begin, row_end, y);
}

// The same for NVFP4 rows.
template <bool kVbmi, int kParts>
void nvfp4_rows_multi(const WeightMatrix& w, const PreparedX* xs, int n, int64_t row_begin, int64_t row_end, float* y,
                      int64_t ldy) {
  const int64_t scale_bytes = w.cols / 16, prefetch_rows = prefetch_first_params(w, row_begin, row_end);
  const int64_t fitting = (int64_t(8) << 10) / w.row_stride, block_rows = fitting > 1 ? fitting : 1;
  in_token_passes<kAffinePassTokens<kParts>>(n, row_begin, row_end, block_rows,
                                             [&](auto tokens, auto first, int64_t r, int t) {
    constexpr int kTokens = decltype(tokens)::value;
    constexpr bool kFirst = bool(decltype(first)::value);
    const bool nonnegative =
        w.scales_nonnegative_finite || e4m3_nonnegative_finite(w.scales + r * w.scales_row_stride, scale_bytes);
    float* out = y + t * ldy + (r - row_begin);
    if (nonnegative)
      nvfp4_row<kVbmi, kParts, true, kTokens, kFirst>(w, r, xs + t, prefetch_rows, out, ldy);
    else
      nvfp4_row<kVbmi, kParts, false, kTokens, kFirst>(w, r, xs + t, prefetch_rows, out, ldy);
  });
}

// A decode batch of affine 4-bit rows, every token with x_q8 of kParts digits.
template <bool kVbmi, int kParts>
void affine4_rows_multi_parts(const WeightMatrix& w, const PreparedX* xs, int n, int64_t row_begin, int64_t row_end,
                              float* y, int64_t ldy) {
  switch (w.group_size) {
    case 8: return affine4_rows_multi<kVbmi, 8, kParts>(w, xs, n, row_begin, row_end, y, ldy);
    case 16: return affine4_rows_multi<kVbmi, 16, kParts>(w, xs, n, row_begin, row_end, y, ldy);
    case 32: return affine4_rows_multi<kVbmi, 32, kParts>(w, xs, n, row_begin, row_end, y, ldy);
    case 64: return affine4_rows_multi<kVbmi, 64, kParts>(w, xs, n, row_begin, row_end, y, ldy);
    default: return affine4_rows_multi<kVbmi, 128, kParts>(w, xs, n, row_begin, row_end, y, ldy);
  }
}

template <bool kVbmi>
void vnni_rows_multi(const WeightMatrix& w, const PreparedX* xs, int n, int64_t row_begin, int64_t row_end, float* y,
                     int64_t ldy) {
  if (w.format == WeightFormat::NvFp4) {
    if (xs[0].x_q8_parts == 3) return nvfp4_rows_multi<kVbmi, 3>(w, xs, n, row_begin, row_end, y, ldy);
    return nvfp4_rows_multi<kVbmi, 1>(w, xs, n, row_begin, row_end, y, ldy);
  }
  if (xs[0].x_q8_parts == 3) return affine4_rows_multi_parts<kVbmi, 3>(w, xs, n, row_begin, row_end, y, ldy);
  affine4_rows_multi_parts<kVbmi, 1>(w, xs, n, row_begin, row_end, y, ldy);
}
