// Small vector helpers the forward pass needs between the matrix products.
// Each dispatches to the active ISA (isa.h); they are single-threaded (vectors are short).
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace inkling::kernels {

// A 1-D weight (a norm's gain) in its stored dtype: F32, BF16 or F16.
struct WeightVector {
  const void* data = nullptr;
  DType dtype = DType::F32;
};

float dot_f32(const float* a, const float* b, int64_t n);
// y += a * x
void axpy_f32(float a, const float* x, float* y, int64_t n);
// out = x / sqrt(mean(x^2) + eps) * weight. out may alias x.
void rmsnorm(const float* x, WeightVector weight, float eps, int64_t n, float* out);

// Machine measurements for `inkling bench` and the kernel benchmarks.
// Streaming read of a `bytes` buffer (advised for transparent huge pages) with `threads` threads;
// the median of 7 passes, in GB/s.
double measure_read_bandwidth_gbs(size_t bytes, int threads);
// The same read loop over memory the caller owns, read in place (each thread one contiguous
// share, as decode threads read theirs): `inkling bench` measures over the weights themselves.
// Only the first bytes / 256 * 256 are read; data must be 64-byte aligned.
double measure_read_bandwidth_gbs(const void* data, size_t bytes, int threads);
// Independent FMA chains on the active ISA, in GFLOP/s (2 flops per FMA lane).
double measure_fma_peak_gflops(int threads);

}  // namespace inkling::kernels
