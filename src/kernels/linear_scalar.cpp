// Portable kernels: the fallback on CPUs without AVX2, and the path for shapes the SIMD kernels
// do not special-case (e.g. affine group sizes that are not a multiple of the vector width).
#include <cmath>
#include <vector>

#include "kernels/backend.h"
#include "tensor/dtype.h"

namespace inkling::kernels::detail {
namespace {

float dot(const float* a, const float* b, int64_t n) {
  // Eight partial sums: more accurate than one running sum and lets the compiler pipeline.
  float partial[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) partial[j] += a[i + j] * b[i + j];
  float sum = 0.0f;
  for (; i < n; ++i) sum += a[i] * b[i];
  for (float p : partial) sum += p;
  return sum;
}

void matvec_rows(const WeightMatrix& w, const PreparedX& px, int64_t row_begin, int64_t row_end,
                 float* y) {
  std::vector<float> row(size_t(w.cols));
  for (int64_t r = row_begin; r < row_end; ++r) {
    dequantize_row(w, r, row.data());
    y[r - row_begin] = dot(row.data(), px.x, w.cols);
  }
}

void matmul_rows(const WeightMatrix& w, const float* x, int64_t n, int64_t row_begin,
                 int64_t row_end, float* y, int64_t ldy) {
  std::vector<float> row(size_t(w.cols));
  for (int64_t r = row_begin; r < row_end; ++r) {
    dequantize_row(w, r, row.data());
    for (int64_t t = 0; t < n; ++t) y[t * ldy + r - row_begin] = dot(row.data(), x + t * w.cols, w.cols);
  }
}

float sum_squares(const float* x, int64_t n) { return dot(x, x, n); }

void axpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

double fma_burn(int64_t iterations, float* sink) {
  constexpr int kChains = 8;
  float acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = float(i);
  for (int64_t it = 0; it < iterations; ++it)
    for (int i = 0; i < kChains; ++i) acc[i] = std::fma(acc[i], 0.999999f, 1e-7f);
  float total = 0.0f;
  for (float a : acc) total += a;
  *sink = total;
  return double(iterations) * kChains * 2;
}

}  // namespace

const Backend& scalar_backend() {
  static const Backend backend{Isa::Scalar, 0, 0,   1,           matvec_rows, matmul_rows,
                               dot,         axpy, sum_squares, fma_burn};
  return backend;
}

const Backend& backend_for(Isa isa) {
  switch (isa) {
    case Isa::Avx512: return avx512_backend();
    case Isa::Avx2: return avx2_backend();
    case Isa::Scalar: break;
  }
  return scalar_backend();
}

const float* e4m3_table() {
  static const std::vector<float> table = [] {
    std::vector<float> values(256);
    for (int i = 0; i < 256; ++i) values[size_t(i)] = e4m3_to_f32(uint8_t(i));
    return values;
  }();
  return table.data();
}

}  // namespace inkling::kernels::detail
