// Products with a weight matrix in its stored format. Activations are f32.
// The functions parallelise internally (OpenMP) over output rows; call them from one thread.
#pragma once

#include <cstdint>

#include "tensor/weight_matrix.h"

namespace inkling::kernels {

// y[rows] = W x[cols]
void matvec(const WeightMatrix& w, const float* x, float* y);

// Y[n, rows] = X[n, cols] W^T  (X and Y row-major, contiguous)
void matmul(const WeightMatrix& w, const float* x, int64_t n, float* y);

// out[rows] = silu(gate x) * (up x): the fused SwiGLU front half (gate and up share shape).
void swiglu_matvec(const WeightMatrix& gate, const WeightMatrix& up, const float* x, float* out);

// Batched form: out[n, rows] = silu(X gate^T) * (X up^T).
void swiglu_matmul(const WeightMatrix& gate, const WeightMatrix& up, const float* x, int64_t n,
                   float* out);

}  // namespace inkling::kernels
