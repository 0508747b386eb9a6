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
};

struct Backend {
  Isa isa;
  int nibble_chunk;  // columns per 4-bit unpack step (0: x_split not needed)
  int nibble_lanes_chunk;  // 128 when the 4-bit matvec can use x_nibble_lanes, else 0
  int matmul_row_block;  // rows a matmul thread range should be a multiple of
  // y[r - row_begin] = W[r] . x for r in [row_begin, row_end).
  void (*matvec_rows)(const WeightMatrix& w, const PreparedX& x, int64_t row_begin,
                      int64_t row_end, float* y);
  // y[t * ldy + r - row_begin] = W[r] . x[t] for t < n, r in [row_begin, row_end).
  void (*matmul_rows)(const WeightMatrix& w, const float* x, int64_t n, int64_t row_begin,
                      int64_t row_end, float* y, int64_t ldy);
  float (*dot_f32)(const float* a, const float* b, int64_t n);
  void (*axpy_f32)(float a, const float* x, float* y, int64_t n);
  float (*sum_squares_f32)(const float* x, int64_t n);
  // Runs `iterations` rounds of independent FMAs; returns the flops done (and a value the
  // compiler cannot drop through `sink`).
  double (*fma_burn)(int64_t iterations, float* sink);
};

const Backend& scalar_backend();
const Backend& avx2_backend();
const Backend& avx512_backend();
const Backend& backend_for(Isa isa);

// 256-entry E4M3 -> f32 table (NaN codes included) for the NVFP4 paths.
const float* e4m3_table();

}  // namespace inkling::kernels::detail
