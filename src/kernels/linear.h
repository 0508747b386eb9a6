// Products with a weight matrix in its stored format. Activations are f32.
// The functions parallelise internally over output rows (thread_pool.h); called from inside a
// parallel body they run on the calling thread alone.
#pragma once

#include <cstdint>
#include <span>

#include "tensor/weight_matrix.h"

namespace inkling::kernels {

// How the AVX-512 paths may trade activation precision for speed.
//  Exact: activations stay f32 everywhere (max error ~2e-5 of the output RMS).
//  Bf16Activations (default): prefill matmul / swiglu_matmul (n > kDecodeBatchMaxTokens) round
//    X to bf16 and use vdpbf16ps (CPUs with AVX512_BF16; ~2e-3 RMS, < 1.5e-2 worst, of the output RMS), bf16
//    matvecs do the same with x, and the 4-bit matvecs quantize x to int8 per 8 columns for VNNI
//    (CPUs with AVX512_VNNI; ~4e-3 RMS). Elsewhere both modes compute the same thing.
//  LlamaCppActivations: Bf16Activations, except that GGUF block-type weights on the integer decode
//    kernels see x rounded as llama.cpp's CPU backend rounds it for that type (Q8_0 with an f16
//    scale, Q8_1, or Q8_K per 256 columns): part of the agreement experiment of docs/gguf.md
//    (RunOptions::llama_rounding also rounds attention's inputs).
// INKLING_EXACT=1 in the environment selects Exact at start-up.
enum class MatmulPrecision { Exact, Bf16Activations, LlamaCppActivations };
void set_matmul_precision(MatmulPrecision precision);
MatmulPrecision matmul_precision();

// Batch invariance: when on, products of more than kDecodeBatchMaxTokens rows also go through the
// decode-batch kernels, kDecodeBatchMaxTokens rows at a time, so every row of X gets bit for bit
// its own matvec whatever n is (a prefilled token the bits of a decoded one). Off (the default),
// they take the tiled kernels: each row still depends only on itself, but is summed in another
// order than the matvec sums it, and prefill runs 1.6-1.7x faster.
void set_batch_invariant(bool on);
bool batch_invariant();

// y[rows] = W x[cols]
void matvec(const WeightMatrix& w, const float* x, float* y);

// Several independent products in one parallel pass: y_i[rows_i] = W_i x_i. One fork/join for
// the lot, and threads move from one matrix to the next without waiting for each other (a
// decode step's q / k / v / r, or every active expert's down projection).
struct MatvecProduct {
  const WeightMatrix* w;
  const float* x;
  float* y;
};
void matvec_batch(std::span<const MatvecProduct> products);

// Up to this many tokens, matmul and swiglu_matmul are a decode batch (one token each of several
// sequences): row t of the result is bit for bit what matvec / swiglu_matvec give for X[t] alone,
// in either precision, so a sequence computes the same in a batched step as on its own. Each
// weight row is still read once for all n tokens. Larger n (prefill) take the tiled path.
// Where the two cross on the AVX2 host (one thread, 2048 x 2048, per token): the one-digit 4-bit
// decode stays ~2x cheaper than the tiles at any n measured (up to 64), but the three-digit one
// (exact) goes from ~0.9x of the tiles at 32 tokens to up to 1.4x past it, bf16 rows are level at
// 33 and 1.25x dearer at 64, and on AVX-512 the prefill tiles are faster still (vdpbf16ps).
inline constexpr int64_t kDecodeBatchMaxTokens = 32;

// Y[n, rows] = X[n, cols] W^T  (X and Y row-major, contiguous)
void matmul(const WeightMatrix& w, const float* x, int64_t n, float* y);

// A batched step's rows in one call: X's first decode_rows rows are decode tokens, each of which
// gets bit for bit its own matvec (however many there are); the other n - decode_rows rows are
// prompt rows, always through the prefill (tiled) kernels, whose outputs depend only on their own
// row of X (so a prompt row gets the same bits whatever else shares the call; plain matmul sends
// n <= kDecodeBatchMaxTokens to the decode kernels instead). 0 <= decode_rows <= n.
void matmul_mixed(const WeightMatrix& w, const float* x, int64_t n, int64_t decode_rows, float* y);

// out[rows] = silu(gate x) * (up x): the fused SwiGLU front half (gate and up share shape).
void swiglu_matvec(const WeightMatrix& gate, const WeightMatrix& up, const float* x, float* out);

// swiglu_matvec over several (gate, up, x, out) in one parallel pass (every active expert).
struct SwigluProduct {
  const WeightMatrix* gate;
  const WeightMatrix* up;
  const float* x;
  float* out;
};
void swiglu_matvec_batch(std::span<const SwigluProduct> products);

// Batched form: out[n, rows] = silu(X gate^T) * (X up^T).
void swiglu_matmul(const WeightMatrix& gate, const WeightMatrix& up, const float* x, int64_t n,
                   float* out);

// swiglu_matmul with matmul_mixed's rows: the first decode_rows give what swiglu_matvec gives each.
void swiglu_matmul_mixed(const WeightMatrix& gate, const WeightMatrix& up, const float* x, int64_t n,
                         int64_t decode_rows, float* out);

}  // namespace inkling::kernels
