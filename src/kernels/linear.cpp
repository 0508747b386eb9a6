// Portable implementation (dequantize a row, dot it). The ISA-specific kernels replace these.
#include "kernels/linear.h"

#include <cmath>
#include <vector>

namespace inkling::kernels {

namespace {
inline float silu(float v) { return v / (1.0f + std::exp(-v)); }
}  // namespace

void matmul(const WeightMatrix& w, const float* x, int64_t n, float* y) {
#pragma omp parallel
  {
    std::vector<float> row(size_t(w.cols));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < w.rows; ++r) {
      dequantize_row(w, r, row.data());
      for (int64_t t = 0; t < n; ++t) {
        const float* xt = x + t * w.cols;
        float sum = 0.0f;
        for (int64_t c = 0; c < w.cols; ++c) sum += row[size_t(c)] * xt[c];
        y[t * w.rows + r] = sum;
      }
    }
  }
}

void matvec(const WeightMatrix& w, const float* x, float* y) { matmul(w, x, 1, y); }

void swiglu_matmul(const WeightMatrix& gate, const WeightMatrix& up, const float* x, int64_t n,
                   float* out) {
  std::vector<float> up_out(size_t(n * up.rows));
  matmul(gate, x, n, out);
  matmul(up, x, n, up_out.data());
  for (int64_t i = 0; i < n * gate.rows; ++i) out[i] = silu(out[i]) * up_out[size_t(i)];
}

void swiglu_matvec(const WeightMatrix& gate, const WeightMatrix& up, const float* x, float* out) {
  swiglu_matmul(gate, up, x, 1, out);
}

}  // namespace inkling::kernels
