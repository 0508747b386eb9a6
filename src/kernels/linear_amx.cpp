// bf16 weights against bf16 x (MatmulPrecision::Bf16Activations decode and decode batches) with
// AMX tiles (tdpbf16ps), reached only after amx_active() (isa.h) and amx_bf16_shape().
//
// Why: a decode batch of B tokens on vdpbf16ps costs B multiply-adds per weight pair in vector
// registers, and from about 8 tokens the head and the attention projections stopped being bound
// by the weight stream (bench mlx-4bit, B=16: 4 passes of 4 tokens over each block of rows). One
// tdpbf16ps multiplies a 16-row x 32-column block of weights into 16 tokens at once, so a batch
// of up to 16 tokens costs what one token does and the step is the stream again.
//
// Batch invariance: every output element of tdpbf16ps is its own chain over the 32-column steps,
// in column order, whatever the tile's row and token counts, so a token's value is the same bits
// alone (n = 1) as in any batch, and the same whichever rows a thread's range holds. That is why
// single-token decode takes this path too (it is bound by memory either way).
//
// Layout: A = 16 weight rows x 32 bf16 columns, read in place (tileloadd with the row stride);
// B = 16 column pairs x 16 tokens (each dword a pair of one token's bf16 x), packed once per
// batch and thread (one token: its x as it is);
// C = 16 rows x 16 tokens of f32. Two row tiles and up to two token groups: 4 C + 2 A + 2 B
// tiles, all eight.
#include <immintrin.h>
#include <cstdlib>
#include <cstring>
#include <new>

#include "kernels/backend.h"

namespace inkling::kernels::detail {
namespace {

#include "kernels/simd_common.h"

constexpr int kTileRows = 16;    // weight rows per A / C tile
constexpr int kTileTokens = 16;  // tokens per B / C tile
constexpr int kStepCols = 32;    // bf16 columns per A tile row (64 bytes)
constexpr int kMaxGroups = 2;    // token groups per pass over the weights

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

// Tiles: C[r][g] = tmm(2 r + g), A[r] = tmm(4 + r), B[g] = tmm(6 + g). Row tile r holds
// rows_in[r] rows (0: unused), token group g is used when g < groups.
// token_bytes: 64 with packed tokens, 4 for one token read straight from its x.
void configure(int rows0, int rows1, int groups, int token_bytes) {
  TileConfig config;
  const int rows_in[2] = {rows0, rows1};
  for (int r = 0; r < 2; ++r) {
    if (rows_in[r] == 0) continue;
    for (int g = 0; g < groups; ++g) {
      config.rows[2 * r + g] = uint8_t(rows_in[r]);
      config.colsb[2 * r + g] = uint16_t(token_bytes);
    }
    config.rows[4 + r] = uint8_t(rows_in[r]);
    config.colsb[4 + r] = kStepCols * 2;
  }
  for (int g = 0; g < groups; ++g) {
    config.rows[6 + g] = kStepCols / 2;
    config.colsb[6 + g] = uint16_t(token_bytes);
  }
  // Not _tile_loadconfig: GCC 12 does not see that builtin read the struct and drops the stores
  // of every field but the palette as dead (tilezero then faults).
  asm volatile("ldtilecfg %0" : : "m"(config));
}

// packed[(j * groups + g) * 256 + p * 16 + t] = dword p of step j of token g * 16 + t: the pair
// (x[32 j + 2 p], x[32 j + 2 p + 1]). Columns of a group past its last token keep whatever they
// held: they only reach C columns that are never stored.
void pack_tokens(const uint16_t* const* xs, int n, int groups, int64_t steps, uint32_t* packed) {
  for (int t = 0; t < n; ++t) {
    const int g = t / kTileTokens, lane = t % kTileTokens;
    uint32_t pairs[kStepCols / 2];
    for (int64_t j = 0; j < steps; ++j) {
      std::memcpy(pairs, xs[t] + j * kStepCols, sizeof(pairs));
      uint32_t* tile = packed + (j * groups + g) * (kStepCols / 2) * kTileTokens;
      for (int p = 0; p < kStepCols / 2; ++p) tile[p * kTileTokens + lane] = pairs[p];
    }
  }
}

// Rows [r0, r0 + rows0 + rows1) against `groups` token groups (tiles configured for them), whose
// B tile of step j is at tokens + j * step_dwords (group 1's 256 dwords later), rows
// token_stride bytes apart. The lines `prefetch_steps` steps ahead are prefetched: in these rows
// while they last, then in the next block's (next_r0; -1: none).
template <int kGroups, bool kTwoRowTiles>
void block(const WeightMatrix& w, int64_t r0, int64_t steps, const uint32_t* tokens, int64_t step_dwords,
           int64_t token_stride, int64_t next_r0,
           int64_t next_rows, int64_t prefetch_steps, float (*c)[kTileRows][kTileTokens]) {
  const int64_t stride = w.row_stride;
  const uint8_t* a0 = w.data + r0 * stride;
  const uint8_t* a1 = a0 + kTileRows * stride;
  const int64_t rows = kTwoRowTiles ? 2 * kTileRows : kTileRows;
  _tile_zero(0);
  if constexpr (kGroups > 1) _tile_zero(1);
  if constexpr (kTwoRowTiles) {
    _tile_zero(2);
    if constexpr (kGroups > 1) _tile_zero(3);
  }
  for (int64_t j = 0; j < steps; ++j) {
    const int64_t ahead = j + prefetch_steps;
    if (ahead < steps) {
      for (int64_t i = 0; i < rows; ++i) prefetch_stream(a0 + i * stride + ahead * kStepCols * 2);
    } else if (next_r0 >= 0 && ahead - steps < steps) {
      const uint8_t* next = w.data + next_r0 * stride + (ahead - steps) * kStepCols * 2;
      for (int64_t i = 0; i < next_rows; ++i) prefetch_stream(next + i * stride);
    }
    const uint32_t* b = tokens + j * step_dwords;
    _tile_loadd(6, b, token_stride);
    if constexpr (kGroups > 1) _tile_loadd(7, b + (kStepCols / 2) * kTileTokens, token_stride);
    _tile_loadd(4, a0 + j * kStepCols * 2, stride);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (kGroups > 1) _tile_dpbf16ps(1, 4, 7);
    if constexpr (kTwoRowTiles) {
      _tile_loadd(5, a1 + j * kStepCols * 2, stride);
      _tile_dpbf16ps(2, 5, 6);
      if constexpr (kGroups > 1) _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, c[0], kTileTokens * 4);
  if constexpr (kGroups > 1) _tile_stored(1, c[1], kTileTokens * 4);
  if constexpr (kTwoRowTiles) {
    _tile_stored(2, c[2], kTileTokens * 4);
    if constexpr (kGroups > 1) _tile_stored(3, c[3], kTileTokens * 4);
  }
}

// n = 1 reads the token's x as its B tiles (16 dwords per step, one per row), the others
// packed tokens.
template <int kGroups>
void rows_in_blocks(const WeightMatrix& w, const uint32_t* tokens, int n, int64_t row_begin, int64_t row_end,
                    float* y, int64_t ldy) {
  const bool direct = n == 1;
  const int token_bytes = direct ? 4 : kTileTokens * 4;
  const int64_t step_dwords = direct ? kStepCols / 2 : kGroups * (kStepCols / 2) * kTileTokens;
  const int64_t steps = w.cols / kStepCols;
  const int64_t pair_rows = 2 * kTileRows;
  // kRowPrefetchBytes ahead of the 32 rows' joint stream (64 bytes of each per step).
  const int64_t prefetch_steps = kRowPrefetchBytes / (pair_rows * 64) > 0 ? kRowPrefetchBytes / (pair_rows * 64) : 1;
  alignas(64) float c[2 * kMaxGroups][kTileRows][kTileTokens];
  auto store = [&](int64_t r0, int64_t rows0, int64_t rows1) {
    for (int r = 0; r < 2; ++r) {
      const int64_t rows = r == 0 ? rows0 : rows1;
      for (int g = 0; g < kGroups; ++g) {
        const int tokens = n - g * kTileTokens < kTileTokens ? n - g * kTileTokens : kTileTokens;
        for (int t = 0; t < tokens; ++t) {
          float* out = y + int64_t(g * kTileTokens + t) * ldy + (r0 - row_begin) + r * kTileRows;
          for (int64_t i = 0; i < rows; ++i) out[i] = c[2 * r + g][i][t];
        }
      }
    }
  };
  int64_t r0 = row_begin;
  configure(kTileRows, kTileRows, kGroups, token_bytes);
  for (; r0 + pair_rows <= row_end; r0 += pair_rows) {
    const int64_t next = r0 + pair_rows, next_rows = min_i64(pair_rows, row_end - next);
    block<kGroups, true>(w, r0, steps, tokens, step_dwords, token_bytes, next_rows > 0 ? next : -1, next_rows, prefetch_steps, c);
    store(r0, kTileRows, kTileRows);
  }
  const int64_t left = row_end - r0;
  if (left == 0) return;
  if (left > kTileRows) {
    configure(kTileRows, int(left - kTileRows), kGroups, token_bytes);
    block<kGroups, true>(w, r0, steps, tokens, step_dwords, token_bytes, -1, 0, prefetch_steps, c);
    store(r0, kTileRows, left - kTileRows);
  } else {
    configure(int(left), 0, kGroups, token_bytes);
    block<kGroups, false>(w, r0, steps, tokens, step_dwords, token_bytes, -1, 0, prefetch_steps, c);
    store(r0, left, 0);
  }
}

// This thread's packed tokens, grown as needed (a plain buffer: std:: templates instantiated
// under these flags could be picked by the linker for callers on other paths, simd_common.h).
// A decode batch's matrix comes in chunks of rows, and packing per chunk took longer than the
// tile products (20.8% of a B = 16 profile against 17.3%), so the packing of the last tokens is kept: the same x pointers, count and columns at
// the same bf16_x_generation (bumped whenever a decode x is rounded again) are the same tokens.
struct PackedTokens {
  uint32_t* data = nullptr;
  size_t size = 0;
  uint64_t generation = ~uint64_t(0);
  int count = 0, first = 0;
  int64_t cols = 0;
  const uint16_t* xs[kMaxGroups * kTileTokens] = {};
  bool holds(const uint16_t* const* tokens, int n, int first_token, int64_t columns, uint64_t now) const {
    if (generation != now || count != n || first != first_token || cols != columns) return false;
    for (int t = 0; t < n; ++t)
      if (xs[t] != tokens[t]) return false;
    return true;
  }
  uint32_t* reserve(size_t dwords) {
    if (dwords > size) {
      std::free(data);
      generation = ~uint64_t(0);
      size = 0;
      data = static_cast<uint32_t*>(std::aligned_alloc(64, (dwords * 4 + 63) / 64 * 64));
      if (!data) throw std::bad_alloc();
      size = dwords;
    }
    return data;
  }
  ~PackedTokens() { std::free(data); }
};

}  // namespace

void amx_bf16_rows(const WeightMatrix& w, const uint16_t* const* xs, int n, int64_t row_begin, int64_t row_end,
                   float* y, int64_t ldy) {
  if (row_end <= row_begin || n <= 0) return;
  const int64_t steps = w.cols / kStepCols;
  if (n == 1) {
    rows_in_blocks<1>(w, reinterpret_cast<const uint32_t*>(xs[0]), 1, row_begin, row_end, y, ldy);
    _tile_release();
    return;
  }
  thread_local PackedTokens packed;
  const uint64_t generation = __atomic_load_n(&bf16_x_generation, __ATOMIC_ACQUIRE);
  for (int first = 0; first < n; first += kMaxGroups * kTileTokens) {
    const int count = n - first < kMaxGroups * kTileTokens ? n - first : kMaxGroups * kTileTokens;
    const int groups = (count + kTileTokens - 1) / kTileTokens;
    const size_t size = size_t(steps * groups * (kStepCols / 2) * kTileTokens);
    uint32_t* tokens = packed.data;
    if (!packed.holds(xs + first, count, first, w.cols, generation)) {
      tokens = packed.reserve(size);
      pack_tokens(xs + first, count, groups, steps, tokens);
      packed.generation = generation;
      packed.count = count;
      packed.first = first;
      packed.cols = w.cols;
      for (int t = 0; t < count; ++t) packed.xs[t] = xs[first + t];
    }
    if (groups == 1)
      rows_in_blocks<1>(w, tokens, count, row_begin, row_end, y + first * ldy, ldy);
    else
      rows_in_blocks<2>(w, tokens, count, row_begin, row_end, y + first * ldy, ldy);
  }
  _tile_release();
}

}  // namespace inkling::kernels::detail
