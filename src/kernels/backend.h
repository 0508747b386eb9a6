// Internal: the per-ISA kernel table linear.cpp dispatches through. Not part of the API.
#pragma once

#include <cstdint>

#include "kernels/isa.h"
#include "tensor/weight_matrix.h"

namespace inkling::kernels::detail {

// The activation vector of one matvec, prepared once per call and shared by all threads.
struct PreparedX {
  const float* x = nullptr;  // [cols] as given
  // 4-bit formats: x with each chunk of `nibble_chunk` columns reordered to [even cols, odd
  // cols], the order in which the SIMD paths unpack low and high nibbles. Tail columns that do
  // not fill a chunk are not included (kernels read them from x).
  const float* x_split = nullptr;
  // 4-bit formats on paths with nibble_lanes_chunk > 0, when cols is a multiple of it (128):
  // per 128 columns, 8 vectors of 16 where vector k lane l is x[8 l + k]. A 64-byte load of
  // codes then holds in 32-bit lane l the 8 nibbles of columns 8 l .. 8 l + 7, and nibble k of
  // every lane comes out with one shift: no byte widening shuffles at all.
  const float* x_nibble_lanes = nullptr;
  // Affine: sum of x over each group of group_size columns.
  const float* group_sums = nullptr;
  // 4-bit formats on the VNNI matvec: x as integers per 8 columns, x[c] ~= x_q8_scale[lane] *
  // Q[c] with Q = x at L / max|x| of the lane's 8 columns, written as x_q8_parts int8 digits
  // (balanced base 256, most significant first):
  //   fast precision, 1 part, L = 127: llama.cpp's q8 activations on a finer grid (~0.2% RMS
  //     error per element);
  //   exact precision, 3 parts, L = 127 * 2^16: error <= 2^-24 of the lane's max|x|, the size of
  //     f32 rounding; the integer dot products themselves are exact.
  // Per 128 columns (a "chunk"):
  //   x_q8: 128 bytes per part: the digits of the even columns, then of the odd ones (byte b of
  //         each half is column 2 b or 2 b + 1, so 32-bit lane l covers columns 8 l .. 8 l + 7);
  //   x_q8_scale: 16 floats, lane l's scale;
  //   x_q8_nvfp4_offset: 16 ints, -12 * (sum of Q over lane l): the NVFP4 kernel's weights are
  //         biased by +12 (vpdpbusd multiplies unsigned bytes), and its integer dots start here.
  int x_q8_parts = 0;
  const int8_t* x_q8 = nullptr;
  const float* x_q8_scale = nullptr;
  const int32_t* x_q8_nvfp4_offset = nullptr;
  // bf16 weights in fast precision on CPUs with AVX512_BF16: x rounded to bf16, zero padded to
  // bf16_ldx(cols), for vdpbf16ps (llama.cpp's BF16 decode does the same).
  const uint16_t* x_bf16 = nullptr;
  // Affine with x_q8: group sums of the dequantized x (so bias and codes see the same x).
  const float* group_sums_q8 = nullptr;
  // ggml block types with an integer decode kernel, fast precision on the AVX2 path (llama.cpp's
  // q8 activations, Q8_0's layout): x^[c] = x_g8_scale[c / 32] * x_g8[c] in column order, the
  // scale max|x| / 127 of each 32 columns (|x_g8| <= 127), and the sums of x^ over each 16 and
  // 32 columns (for the types' offsets: mins, Q6_K's 32).
  const int8_t* x_g8 = nullptr;
  const float* x_g8_scale = nullptr;
  const float* x_g8_sum16 = nullptr;
  const float* x_g8_sum32 = nullptr;
  // The 512-bit Q4_K and IQ4_XS kernels (VNNI) take a super-block's 8 groups of 32 together,
  // 8 codes of each group per vector, qword j from group j: per 256 columns, x_g8 reordered
  // from [group j][eighth k][8 digits] to [k][j][8], so that the 64 bytes at 64 k meet every
  // group's eighth k. Their 32-bit lanes 2 j and 2 j + 1 sum group j's columns 8 k .. 8 k + 3
  // and 8 k + 4 .. 8 k + 7 over the four k in the integers, and one float FMA per super-block
  // applies the factors. Per 256 columns, 16 lanes each of:
  //   x_g8_eighths_scale: lane 2 j + h: group j's x_g8_scale;
  //   x_g8_eighths_scale_high16: the same divided by 16 where j is odd (Q4_K dots its high
  //     nibbles in place, 16 times their codes);
  //   x_g8_eighths_sum32: lane 2 j + 1: group j's x_g8_sum32, lane 2 j: 0 (Q4_K's vector of d
  //     scale_j and dmin min_j, alternating, times it gives the mins' offsets);
  //   x_g8_eighths_offsets: -128 times the sum of the lane's 16 digits (IQ4_XS's values are
  //     biased by +128 for vpdpbusd, which multiplies unsigned bytes; its dots start here, so
  //     they come out exact and unbiased).
  // Only the whole 256-column blocks are written.
  const int8_t* x_g8_eighths = nullptr;
  const float* x_g8_eighths_scale = nullptr;
  const float* x_g8_eighths_scale_high16 = nullptr;
  const float* x_g8_eighths_sum32 = nullptr;
  const int32_t* x_g8_eighths_offsets = nullptr;
};

// Where quantize_q8 writes PreparedX::x_q8 and friends for `chunks` chunks of 128 columns:
// digits [chunks * 128 * parts], scales and nvfp4_offsets [chunks * 16], and x_hat [chunks * 128],
// the dequantized x (scale * Q) in column order, from which the affine group sums are taken.
struct Q8Buffers {
  int8_t* digits;
  float* scales;
  int32_t* nvfp4_offsets;
  float* x_hat;
};

// x as `parts` int8 digits per column (backend.h, PreparedX). False, with the buffers partly
// written, when x has an inf or NaN (the f32 paths then propagate it as usual). Every backend's
// version writes bit-identical buffers.
bool quantize_q8_scalar(const float* x, int64_t chunks, int parts, const Q8Buffers& out);
// The same, vectorised for AVX2 (quantize_q8_avx2.cpp; call only where AVX2 runs).
bool quantize_q8_avx2(const float* x, int64_t chunks, int parts, const Q8Buffers& out);
// Lanes whose largest |x| is below this are quantized as zeros (see quantize_q8_scalar).
inline constexpr float kQ8SmallestLaneMax = 0x1p-100f;

using MatvecRowsFn = void (*)(const WeightMatrix& w, const PreparedX& x, int64_t row_begin, int64_t row_end,
                              float* y);

// matvec_rows_multi for the kernels without a multi-token form: `rows` for each token in turn,
// over blocks of rows small enough to stay in cache from one token to the next (linear.cpp).
void matvec_rows_each_token(MatvecRowsFn rows, const WeightMatrix& w, const PreparedX* xs, int n,
                            int64_t row_begin, int64_t row_end, float* y, int64_t ldy);

struct Backend {
  Isa isa;
  int nibble_chunk;  // columns per 4-bit unpack step (0: x_split not needed)
  int nibble_lanes_chunk;  // 128 when the 4-bit matvec can use x_nibble_lanes, else 0
  int matmul_row_block;  // rows a matmul thread range should be a multiple of
  // y[r - row_begin] = W[r] . x for r in [row_begin, row_end).
  void (*matvec_rows)(const WeightMatrix& w, const PreparedX& x, int64_t row_begin,
                      int64_t row_end, float* y);
  // A decode batch: y[t * ldy + r - row_begin] = W[r] . xs[t] for t < n, r in [row_begin,
  // row_end), each token's values bit for bit those matvec_rows gives it alone (a sequence in a
  // batched step gets what it would get on its own), with each row read from memory once for all
  // n tokens.
  void (*matvec_rows_multi)(const WeightMatrix& w, const PreparedX* xs, int n, int64_t row_begin,
                            int64_t row_end, float* y, int64_t ldy);
  // y[t * ldy + r - row_begin] = W[r] . x[t] for t < n, r in [row_begin, row_end).
  void (*matmul_rows)(const WeightMatrix& w, const float* x, int64_t n, int64_t row_begin,
                      int64_t row_end, float* y, int64_t ldy);
  float (*dot_f32)(const float* a, const float* b, int64_t n);
  void (*axpy_f32)(float a, const float* x, float* y, int64_t n);
  float (*sum_squares_f32)(const float* x, int64_t n);
  // Runs `iterations` rounds of independent FMAs; returns the flops done (and a value the
  // compiler cannot drop through `sink`).
  double (*fma_burn)(int64_t iterations, float* sink);
  // Sum of `words` 64-bit integers (a multiple of 32) with enough independent accumulators
  // that the loop runs at load throughput, prefetched ahead as the decode kernels are: the
  // bandwidth probe's read loop (a plain loop read 4-7% slower on Zen 5).
  uint64_t (*stream_sum)(const uint64_t* data, size_t words);
  // quantize_q8_scalar's contract; vectorised where it pays (decode prepares several x per layer).
  bool (*quantize_q8)(const float* x, int64_t chunks, int parts, const Q8Buffers& out);
};

const Backend& scalar_backend();
const Backend& avx2_backend();
const Backend& avx512_backend();
const Backend& backend_for(Isa isa);

// CPU probes for the optional AVX-512 extensions (isa.cpp).
bool cpu_has_avx512_bf16();
bool cpu_has_avx512_vnni();
bool cpu_has_avx512_vbmi();

// Set from stream_prefetch (isa.h) and read by every decode row through prefetch_stream
// (simd_common.h) with a relaxed atomic load: true means _MM_HINT_NTA, false _MM_HINT_T0.
extern bool stream_prefetch_nontemporal;

// The 4-bit matvec shapes linear_avx512vnni.cpp handles: NVFP4 or affine 4-bit with a group
// that divides 128 into whole 8-column lanes, cols a multiple of 128.
inline bool vnni_matvec_shape(const WeightMatrix& w) {
  if (w.cols % 128 != 0) return false;
  if (w.format == WeightFormat::NvFp4) return true;
  return w.format == WeightFormat::Affine && w.bits == 4 && w.group_size % 8 == 0 &&
         128 % w.group_size == 0;
}

// linear_avx512vnni.cpp (AVX-512 + VNNI; call only when cpu_has_avx512_vnni()): the matvec of
// a vnni_matvec_shape matrix with x given as x_q8 (+ group_sums_q8 for affine). Where the CPU
// has AVX512_VBMI, nibbles are decoded with vpermb unless set_vnni_vbmi(false) (tests force
// both variants; they give bit-identical results).
void vnni_matvec_rows(const WeightMatrix& w, const PreparedX& x, int64_t row_begin,
                      int64_t row_end, float* y);
// A decode batch of such a matrix, every xs[t] with x_q8 of the same number of digits:
// y[t * ldy + r - row_begin] = W[r] . xs[t], each bit for bit vnni_matvec_rows' value, the codes
// of a row decoded once for up to four tokens.
void vnni_matvec_rows_multi(const WeightMatrix& w, const PreparedX* xs, int n, int64_t row_begin, int64_t row_end,
                             float* y, int64_t ldy);
void set_vnni_vbmi(bool enabled);
bool vnni_vbmi();

// linear_avx512bf16.cpp (AVX-512 + BF16; call only when cpu_has_avx512_bf16()): the
// Bf16Activations prefill. X [n, cols] f32 -> bf16 bits [n, ldx] (ldx = bf16_ldx(cols), zero
// padded), then y[t * ldy + r - row_begin] = W[r] . X[t] with vdpbf16ps.
inline int64_t bf16_ldx(int64_t cols) { return (cols + 31) / 32 * 32; }
void bf16_round_rows(const float* x, int64_t n, int64_t cols, uint16_t* out);
void bf16_matmul_rows(const WeightMatrix& w, const uint16_t* x, int64_t n, int64_t row_begin,
                      int64_t row_end, float* y, int64_t ldy);
// y[r - row_begin] = W[r] . x for bf16 W and x in bf16 (as bf16_round_rows writes it).
void bf16_matvec_rows(const WeightMatrix& w, const uint16_t* x, int64_t row_begin, int64_t row_end,
                      float* y);
// The same for a decode batch: y[t * ldy + r - row_begin] = W[r] . xs[t] for t < n, each bit for
// bit bf16_matvec_rows' value, each row read once for up to four tokens.
void bf16_matvec_rows_multi(const WeightMatrix& w, const uint16_t* const* xs, int n, int64_t row_begin,
                            int64_t row_end, float* y, int64_t ldy);
// linear_amx.cpp (AVX-512 + AMX-BF16; call only when amx_active() and amx_bf16_shape(w)): the
// same products with tdpbf16ps, y[t * ldy + r - row_begin] = W[r] . xs[t] for t < n, every
// token's value the same bits whatever n and the row range are. Used for n = 1 as well, so decode
// and decode batches agree bit for bit.
inline bool amx_bf16_shape(const WeightMatrix& w) {
  return w.format == WeightFormat::BF16 && w.cols % 32 == 0 && w.cols >= 32;
}
// Bumped (atomically) each time a decode x is rounded to bf16 into a prepared buffer, which the
// next x may reuse: amx_bf16_rows keeps its packing of a batch's tokens while it is unchanged.
extern uint64_t bf16_x_generation;
void amx_bf16_rows(const WeightMatrix& w, const uint16_t* const* xs, int n, int64_t row_begin, int64_t row_end,
                   float* y, int64_t ldy);
// linear_avx512.cpp: row r of w decoded to f32 (natural column order), any format.
void avx512_decode_row(const WeightMatrix& w, int64_t r, float* out);

// ggml_dot_avx2.cpp (AVX2 + FMA + F16C; call only where AVX2 runs): row . x for a ggml block type
// with an AVX2 decode kernel (Q8_0, Q4_K, Q5_K, Q6_K, IQ4_XS), each block decoded in registers
// rather than the row dequantized first; `blocks` blocks of the type, x [blocks * block
// elements]. nullptr for the other types (they take the scalar reference).
using GgmlRowDot = float (*)(const uint8_t* row, const float* x, int64_t blocks);
GgmlRowDot ggml_row_dot_avx2(GgmlType type);

// ggml_q8_avx2.cpp (AVX2; call only where AVX2 runs): PreparedX::x_g8 and friends for cols (a
// multiple of 32) columns: digits [cols], scales and sums32 [cols / 32], sums16 [cols / 16],
// and the eighths (PreparedX) [cols / 256 * 256] and eighths_scale / _scale_high16 / _sum32 /
// _offsets [cols / 256 * 16]. False, with the buffers partly written, when x has an inf or NaN.
struct GgmlQ8Buffers {
  int8_t* digits;
  float* scales;
  float* sums16;
  float* sums32;
  int8_t* eighths;
  float* eighths_scale;
  float* eighths_scale_high16;
  float* eighths_sum32;
  int32_t* eighths_offsets;
};
// The eighths from the digits, scales and sums32 (both quantizers end with it; portable).
void ggml_x_eighths(int64_t cols, const GgmlQ8Buffers& out);
bool ggml_quantize_x_avx2(const float* x, int64_t cols, const GgmlQ8Buffers& out);
// How x_g8 is rounded. Fine32: ours above (Q8_0's codes with an f32 scale, for every type). The
// others: as llama.cpp's CPU kernels round x for a weight type (its vec_dot_type), so a GGUF's
// products follow llama.cpp's to f32 rounding. Q8_0 (Q8_0, Q4_0, Q5_0, IQ4_NL weights): the f16
// scale. Q8_1 (Q4_1, Q5_1): Q8_0's codes and scale, sums32 = f16(d * sum of codes). Q8_K (the K
// and the other IQ types): one scale per 256 columns, -127 over the signed largest x, in every
// per-32 slot of x_g8_scale.
enum class GgmlXRounding { Fine32, Q8_0, Q8_1, Q8_K };  // Q8_K last: PrepareCache sizes by it
GgmlXRounding llama_x_rounding(GgmlType type);
// x_g8 and friends rounded as `rounding` says (not Fine32; ggml_llama_rounding.cpp, portable).
// False when x has an inf or NaN, or Q8_K's cols is not a multiple of 256.
bool ggml_quantize_x_like_llama(const float* x, int64_t cols, GgmlXRounding rounding, const GgmlQ8Buffers& out);
// The integer decode of a ggml block type on x_g8 (every block type; nullptr for F32, F16 and
// BF16): y[t * ldy + r - row_begin] = W[r] . x^_t for t < n, every xs[t] with x_g8, each token's
// value bit for bit the same whatever n is (a decode batch reads each row once).
using GgmlRowsQ8 = void (*)(const WeightMatrix& w, const PreparedX* xs, int n, int64_t row_begin, int64_t row_end,
                            float* y, int64_t ldy);
GgmlRowsQ8 ggml_rows_q8_avx2(GgmlType type);
// The AVX2 build with the IQ1 / IQ2 / IQ3 grid entries gathered (vpgatherdd / vpgatherdq)
// instead of loaded one by one: the same results bit for bit; taken on non-AMD CPUs.
GgmlRowsQ8 ggml_rows_q8_avx2_gathers(GgmlType type);
// The same kernels built with AVX-512 VNNI (ggml_q8_avx512vnni.cpp; call only when
// cpu_has_avx512_vnni()): bit for bit the AVX2 ones' results, fewer instructions per dot.
GgmlRowsQ8 ggml_rows_q8_avx512vnni(GgmlType type);
// The VNNI build with IQ4_XS's value lookups by vpermb (ggml_q8_avx512vbmi.cpp; call only when
// cpu_has_avx512_vbmi() too): bit for bit the VNNI build's results.
GgmlRowsQ8 ggml_rows_q8_avx512vbmi(GgmlType type);
// The build the active ISA takes: VNNI (with VBMI where the CPU has it) when it is AVX-512, the
// CPU has VNNI and the type's dots are vpdpbusd there (ggml_q8_avx2.cpp), else AVX2 (with the
// grid gathers except on AMD).
GgmlRowsQ8 ggml_rows_q8(GgmlType type);

// 256-entry E4M3 -> f32 table (NaN codes included) for the NVFP4 paths.
const float* e4m3_table();

}  // namespace inkling::kernels::detail
