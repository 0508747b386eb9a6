// Internal: shared pieces of the per-ISA kernel files.
//
// Included only by the _avx2.cpp / _avx512.cpp files, and always inside an anonymous namespace:
// everything here then has internal linkage, so code compiled with wider ISA flags can never
// be picked by the linker for a caller on the scalar path (the classic ODR hazard of inline
// functions and templates in multi-ISA builds). For the same reason those files avoid std::
// templates.

inline int64_t min_i64(int64_t a, int64_t b) { return a < b ? a : b; }

// How far ahead the AVX-512 f32 / f16 decode rows prefetch their stream (T0): the hardware
// prefetchers restart at every 4 KiB page and at every new matrix, and decode is a sequence of
// short streams. 4 KiB ahead measured the same as 2. An f32 matvec of 100000 x 2048 read level
// with kRowPrefetchBytes' non-temporal prefetch (T0 2 KiB 93.0% of the probe, NTA 8 / 16 KiB
// 93.5 / 93.2%, T0 4 KiB 93.4%; 12 in-process rounds, host at ~90 GB/s).
constexpr int64_t kStreamPrefetchBytes = 2048;

// How far ahead the bf16 and 4-bit decode rows (AVX-512 fast bf16 and VNNI, AVX2 dense and q8)
// prefetch their stream, non-temporally (_MM_HINT_NTA) on AMD CPUs: there such a line goes to L1 only, is
// not kept in L2 and is not written into the L3 victim cache when it leaves L1, which a weight
// read once per token has no use for. Against T0 on this Zen 5 guest, variants alternated block
// by block in one process (median per-round ratios), whole-model --fast decode:
// - AVX-512, rounds with the probe over 78 GB/s (16, A/A control 0.996-1.009): mlx-4bit +3.2%,
//   NVFP4 +3.8%, bf16 +3.6%; phases mixed (24): +3.9%, +5.5%, +1.6%; exact (20): mlx-4bit +1-2%,
//   NVFP4 level (there the exact kernel, not memory, sets the pace in fast phases);
// - AVX2 (INKLING_ISA=avx2, 16 rounds; its dense rows had no prefetch, its 4-bit rows T0 2 KiB):
//   bf16 +23%, mlx-4bit +17%, NVFP4 +7% (T0 2 KiB in the dense rows: +1-3%).
// On an Intel Xeon (Emerald Rapids guest) NTA halved the stream instead (a read loop, two threads:
// 7-11 GB/s against 15-20 with T0 or no prefetch; whole-model mlx-4bit --fast decode 8.7 -> 14.5
// tok/s with T0), so other CPUs prefetch T0 (prefetch_stream, isa.h's StreamPrefetch).
// 16 KiB: 4-bit level, bf16 -3 / -4%. The bench head alone (820 MB) read 89% of the probe instead
// of 87% with T0 at 2 KiB (8 of 8 rounds, host at ~88 GB/s).
constexpr int64_t kRowPrefetchBytes = 8192;

// The software prefetch of a weight stream's line: NTA or T0 as stream_prefetch (isa.h) says,
// chosen per CPU at run time (a predictable branch on a flag in L1, next to a memory stream).
inline void prefetch_stream(const void* line) {
  if (__atomic_load_n(&stream_prefetch_nontemporal, __ATOMIC_RELAXED))
    _mm_prefetch(static_cast<const char*>(line), _MM_HINT_NTA);
  else
    _mm_prefetch(static_cast<const char*>(line), _MM_HINT_T0);
}

// The read-bandwidth probe (stream_sum) prefetches this far ahead, with the kernels' hint
// (prefetch_stream: NTA on AMD, T0 elsewhere). Of the
// read loops tried on this Zen 5 guest, two threads, 5 alternating passes each: T0 2 KiB (the
// probe until 2026-11-30) 43-48 GB/s, T0 8 KiB 46-49, T1 16 KiB 46-50, T1 32 KiB 46-48; with the
// host at ~75 GB/s: 73-75, 76, 77-78, 75. T1 16 KiB was the probe until 2026-12-01; NTA at 16 KiB
// then read 2.0% more (60 alternating rounds of the whole probe, median ratio; AVX2 loop: 2.6%,
// 40 rounds), NTA at 8 KiB 1.6%. The probe is the yardstick of decode efficiency, so it takes the
// fastest loop found rather than understate what the machine can stream.
constexpr int64_t kProbePrefetchBytes = 16384;

// The 4-bit kernels prefetch the whole scale (and bias) row this many rows ahead, every line of
// it (prefetch_lines, kernels/prefetch.h): a row of NVFP4 scales is cols / 16 bytes, two lines at
// 2048 columns, and a line left to demand costs a full memory latency per row (cold NVFP4 matvec
// ran at half the affine rate until its second line was prefetched too).
constexpr int64_t kPrefetchRows = 2;

// A compile-time count (std::integral_constant without the std:: template, see above).
template <int kCount>
struct Count {
  static constexpr int value = kCount;
};

// f(Count<count>()) for a run-time count in [1, kMax].
template <int kMax, class F>
inline void with_token_count(int count, const F& f) {
  if constexpr (kMax > 1) {
    if (count < kMax) return with_token_count<kMax - 1>(count, f);
  }
  f(Count<kMax>());
}

// A decode batch's loop: per block of `block_rows` rows, the n tokens in passes of up to kPass,
// each pass over every row of the block, whose weights then stay in L1 from one pass to the
// next. row(Count<tokens>(), Count<first pass>(), r, t) computes tokens t .. t + tokens - 1 of
// row r; only the first pass should prefetch.
template <int kPass, class RowFn>
inline void in_token_passes(int n, int64_t row_begin, int64_t row_end, int64_t block_rows, const RowFn& row) {
  for (int64_t begin = row_begin; begin < row_end; begin += block_rows) {
    const int64_t end = min_i64(row_end, begin + block_rows);
    for (int t = 0; t < n; t += kPass) {
      with_token_count<kPass>(n - t < kPass ? n - t : kPass, [&](auto tokens) {
        for (int64_t r = begin; r < end; ++r) {
          if (t == 0)
            row(tokens, Count<1>(), r, t);
          else
            row(tokens, Count<0>(), r, t);
        }
      });
    }
  }
}

// Tokens per block of X so the block (rows of `x_row_bytes`) stays in L2 (1 MiB on Zen 4) while
// weight row blocks stream past it; a multiple of the register tile's token count.
inline int64_t x_token_block(int64_t x_row_bytes, int64_t tile_tokens) {
  constexpr int64_t kXBlockBytes = 512 * 1024;
  const int64_t block = kXBlockBytes / x_row_bytes / tile_tokens * tile_tokens;
  return block < tile_tokens ? tile_tokens : block;
}

inline float bf16_bits_to_f32(uint16_t bits) {
  uint32_t widened = uint32_t(bits) << 16;
  float value;
  __builtin_memcpy(&value, &widened, 4);
  return value;
}

// One affine scale / bias element as f32. Always inlined: once the AVX2 q8 rows had an
// instantiation per token count (decode batches), GCC left it a call inside their loops, with the
// vector registers spilled around it every 64 columns.
__attribute__((always_inline)) inline float load_param(const uint8_t* p, DType dtype, int64_t index) {
  if (dtype == DType::BF16) {
    uint16_t bits;
    __builtin_memcpy(&bits, p + 2 * index, 2);
    return bf16_bits_to_f32(bits);
  }
  if (dtype == DType::F16) {
    uint16_t bits;
    __builtin_memcpy(&bits, p + 2 * index, 2);
    return _cvtsh_ss(bits);
  }
  float value;
  __builtin_memcpy(&value, p + 4 * index, 4);
  return value;
}

inline float fp4_value(uint8_t nibble) {
  static constexpr float kValues[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                        -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  return kValues[nibble & 15];
}

// Scalar tail of an NVFP4 row: columns [begin, cols), without the global scale.
inline float nvfp4_tail_dot(const uint8_t* codes, const uint8_t* scales, const float* x,
                            int64_t begin, int64_t cols) {
  const float* table = e4m3_table();
  float sum = 0.0f;
  for (int64_t c = begin; c < cols; ++c) {
    uint8_t byte = codes[c / 2];
    sum += fp4_value((c & 1) ? byte >> 4 : byte & 15) * table[scales[c / 16]] * x[c];
  }
  return sum;
}

// Scratch memory without std:: templates (see above).
struct Scratch {
  float* data = nullptr;
  explicit Scratch(int64_t count) {
    data = static_cast<float*>(__builtin_malloc(size_t(count) * sizeof(float) + 64));
  }
  ~Scratch() { __builtin_free(data); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

using TileFn = void (*)(const float* w, int64_t ldw, const float* x, int64_t ldx, int64_t cols,
                        float* y, int64_t ldy);
template <int kCount>
struct TileTable {
  TileFn fns[kCount];
};
// fns[(R - 1) * kTokens + T - 1] = K::tile<R, T>.
template <class K, int... kIndex>
constexpr TileTable<sizeof...(kIndex)> make_tiles(std::integer_sequence<int, kIndex...>) {
  return {{&K::template tile<kIndex / K::kTokens + 1, kIndex % K::kTokens + 1>...}};
}

// Prefill: Y[t, r] = W[r] . X[t] over a thread's rows. Kernel K supplies kLanes, kRows,
// kTokens, decode_row(w, r, out) (row r as f32, natural column order) and
// tile<R, T>(w, ldw, x, ldx, cols, y, ldy). A block of kRows weight rows is decoded once and
// reused by every token of a token block; the token block is sized so its X rows stay in L2.
template <class K>
void matmul_rows_tiled(const WeightMatrix& w, const float* x, int64_t n, int64_t row_begin,
                       int64_t row_end, float* y, int64_t ldy) {
  constexpr int kR = K::kRows;
  constexpr int kT = K::kTokens;
  static constexpr TileTable<kR * kT> kTiles =
      make_tiles<K>(std::make_integer_sequence<int, kR * kT>());
  const int64_t cols = w.cols;
  const int64_t ldw = (cols + K::kLanes - 1) / K::kLanes * K::kLanes;
  Scratch buffer(kR * ldw);
  for (int64_t i = 0; i < kR * ldw; ++i) buffer.data[i] = 0.0f;

  const int64_t token_block = x_token_block(cols * 4, kT);

  for (int64_t t_begin = 0; t_begin < n; t_begin += token_block) {
    const int64_t t_end = min_i64(n, t_begin + token_block);
    for (int64_t r0 = row_begin; r0 < row_end; r0 += kR) {
      const int64_t row_count = min_i64(kR, row_end - r0);
      for (int64_t i = 0; i < row_count; ++i) K::decode_row(w, r0 + i, buffer.data + i * ldw);
      for (int64_t t0 = t_begin; t0 < t_end; t0 += kT) {
        const int64_t token_count = min_i64(kT, t_end - t0);
        kTiles.fns[(row_count - 1) * kT + token_count - 1](buffer.data, ldw, x + t0 * cols, cols, cols,
                                               y + t0 * ldy + (r0 - row_begin), ldy);
      }
    }
  }
}
