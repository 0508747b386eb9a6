// Test matrices in every weight format, built from random codes, and the double-precision
// references the kernels are checked against.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <ostream>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/isa.h"
#include "kernels/linear.h"
#include "tensor/dtype.h"
#include "tensor/weight_matrix.h"

namespace inkling::test {

struct FormatSpec {
  WeightFormat format = WeightFormat::F32;
  int bits = 0;
  int group_size = 0;
  DType scale_dtype = DType::BF16;

  std::string name() const {
    std::string s = weight_format_name(format);
    if (format == WeightFormat::Affine)
      s += "_q" + std::to_string(bits) + "_g" + std::to_string(group_size) + "_" +
           std::string(dtype_name(scale_dtype));
    for (char& ch : s)
      if (ch == '-') ch = '_';
    return s;
  }
};

inline void PrintTo(const FormatSpec& spec, std::ostream* os) { *os << spec.name(); }

// Owns the bytes of a [stack * rows, cols] matrix. view(k) is the k-th of `stack` row-interleaved
// matrices (rows k, k + stack, ...), which is how gate / up are cut out of a w13 tensor.
class TestMatrix {
 public:
  TestMatrix(const FormatSpec& spec, int64_t rows, int64_t cols, int stack, std::mt19937& rng)
      : spec_(spec), rows_(rows), cols_(cols), stack_(stack) {
    const int64_t total_rows = rows * stack;
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
    switch (spec.format) {
      case WeightFormat::F32:
      case WeightFormat::BF16:
      case WeightFormat::F16: {
        const int64_t elem = spec.format == WeightFormat::F32 ? 4 : 2;
        row_bytes_ = cols * elem;
        data_.resize(size_t(total_rows * row_bytes_));
        for (int64_t i = 0; i < total_rows * cols; ++i) {
          float v = normal(rng);
          if (spec.format == WeightFormat::F32) {
            std::memcpy(&data_[size_t(i * 4)], &v, 4);
          } else {
            uint16_t bits = spec.format == WeightFormat::BF16 ? f32_to_bf16(v) : f32_to_f16(v);
            std::memcpy(&data_[size_t(i * 2)], &bits, 2);
          }
        }
        break;
      }
      case WeightFormat::Affine: {
        row_bytes_ = cols * spec.bits / 8;
        data_.resize(size_t(total_rows * row_bytes_));
        for (auto& byte : data_) byte = uint8_t(rng());
        const int64_t groups = cols / spec.group_size;
        const int64_t param_size = int64_t(dtype_size(spec.scale_dtype));
        param_row_bytes_ = groups * param_size;
        scales_.resize(size_t(total_rows * param_row_bytes_));
        biases_.resize(scales_.size());
        const float max_code = float((1 << spec.bits) - 1);
        for (int64_t i = 0; i < total_rows * groups; ++i) {
          float scale = (0.5f + uniform(rng)) / max_code;
          // Bias near -scale * mid-code, as real quantizers produce: the two halves of
          // scale * dot + bias * sum then nearly cancel, which is the hard case for accuracy.
          float bias = -scale * max_code * (0.4f + 0.2f * uniform(rng));
          store_param(scales_, i, scale);
          store_param(biases_, i, bias);
        }
        break;
      }
      case WeightFormat::NvFp4: {
        row_bytes_ = cols / 2;
        data_.resize(size_t(total_rows * row_bytes_));
        for (auto& byte : data_) byte = uint8_t(rng());
        param_row_bytes_ = cols / 16;
        scales_.resize(size_t(total_rows * param_row_bytes_));
        for (auto& scale : scales_) scale = f32_to_e4m3(0.05f + 2.0f * uniform(rng));
        break;
      }
      case WeightFormat::Ggml:  // built by ggml_linear_test.cpp from random blocks instead
        throw std::logic_error("TestMatrix does not build ggml block matrices");
    }
  }

  // The scale bytes of row `row` of view(k) (NVFP4: cols / 16 E4M3 bytes), to plant values in.
  uint8_t* scales_of_row(int k, int64_t row) { return scales_.data() + (row * stack_ + k) * param_row_bytes_; }

  WeightMatrix view(int k) const {
    WeightMatrix w;
    w.format = spec_.format;
    w.rows = rows_;
    w.cols = cols_;
    w.data = data_.data() + k * row_bytes_;
    w.row_stride = row_bytes_ * stack_;
    w.bits = spec_.bits;
    w.group_size = spec_.format == WeightFormat::NvFp4 ? 16 : spec_.group_size;
    if (spec_.format == WeightFormat::Affine) {
      w.scale_dtype = spec_.scale_dtype;
      w.scales = scales_.data() + k * param_row_bytes_;
      w.biases = biases_.data() + k * param_row_bytes_;
      w.scales_row_stride = w.biases_row_stride = param_row_bytes_ * stack_;
    } else if (spec_.format == WeightFormat::NvFp4) {
      w.scale_dtype = DType::F8_E4M3;
      w.scales = scales_.data() + k * param_row_bytes_;
      w.scales_row_stride = param_row_bytes_ * stack_;
      w.global_scale = 0.37f;
    }
    return w;
  }

 private:
  void store_param(std::vector<uint8_t>& out, int64_t index, float value) {
    if (spec_.scale_dtype == DType::F32) {
      std::memcpy(&out[size_t(index * 4)], &value, 4);
    } else {
      uint16_t bits =
          spec_.scale_dtype == DType::BF16 ? f32_to_bf16(value) : f32_to_f16(value);
      std::memcpy(&out[size_t(index * 2)], &bits, 2);
    }
  }

  FormatSpec spec_;
  int64_t rows_, cols_;
  int stack_;
  int64_t row_bytes_ = 0, param_row_bytes_ = 0;
  std::vector<uint8_t> data_, scales_, biases_;
};

inline std::vector<float> random_vector(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = normal(rng);
  return v;
}

// Y[n, rows] = X W^T with the scalar dequantization and double accumulation.
inline std::vector<double> reference_matmul(const WeightMatrix& w, const float* x, int64_t n) {
  std::vector<double> y(size_t(n * w.rows));
  std::vector<float> row(size_t(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    dequantize_row(w, r, row.data());
    for (int64_t t = 0; t < n; ++t) {
      double sum = 0.0;
      for (int64_t c = 0; c < w.cols; ++c) sum += double(row[size_t(c)]) * x[t * w.cols + c];
      y[size_t(t * w.rows + r)] = sum;
    }
  }
  return y;
}

inline double silu(double v) { return v / (1.0 + std::exp(-v)); }

// Largest |got - want| relative to the RMS of want (floored so all-zero outputs still compare).
inline double relative_error(const std::vector<float>& got, const std::vector<double>& want) {
  double square_sum = 0.0, worst = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    square_sum += want[i] * want[i];
    worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
  }
  double rms = std::sqrt(square_sum / double(want.size()));
  return worst / std::max(rms, 1e-30);
}

// The expected output magnitude of X W^T for random data: sqrt(mean over outputs of
// sum_c (w_c x_c)^2). Unlike the RMS of a handful of outputs it cannot be small by chance
// (one output of a 1-row matrix can be near zero), so approximate kernels are judged by it.
inline double term_rms(const WeightMatrix& w, const float* x, int64_t n) {
  std::vector<float> row(size_t(w.cols));
  double sum = 0.0;
  for (int64_t r = 0; r < w.rows; ++r) {
    dequantize_row(w, r, row.data());
    for (int64_t t = 0; t < n; ++t)
      for (int64_t c = 0; c < w.cols; ++c) {
        const double term = double(row[size_t(c)]) * x[t * w.cols + c];
        sum += term * term;
      }
  }
  return std::sqrt(sum / double(w.rows * n));
}

// Worst and RMS |got - want| relative to `scale`.
inline double max_error_over(const std::vector<float>& got, const std::vector<double>& want,
                             double scale) {
  double worst = 0.0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
  return worst / scale;
}
inline double rms_error_over(const std::vector<float>& got, const std::vector<double>& want,
                             double scale) {
  double sum = 0.0;
  for (size_t i = 0; i < want.size(); ++i) sum += (got[i] - want[i]) * (got[i] - want[i]);
  return std::sqrt(sum / double(want.size())) / scale;
}

// Every ISA path compiled in and supported by this CPU.
inline std::vector<kernels::Isa> testable_isas() {
  std::vector<kernels::Isa> isas;
  for (kernels::Isa isa : {kernels::Isa::Scalar, kernels::Isa::Avx2, kernels::Isa::Avx512})
    if (kernels::isa_supported(isa)) isas.push_back(isa);
  return isas;
}

// Restores the ISA a test started with.
class IsaGuard {
 public:
  IsaGuard() : saved_(kernels::active_isa()) {}
  ~IsaGuard() { kernels::set_isa(saved_); }

 private:
  kernels::Isa saved_;
};

// Sets a matmul precision for the scope of a test, then restores the previous one.
class PrecisionGuard {
 public:
  explicit PrecisionGuard(kernels::MatmulPrecision precision)
      : saved_(kernels::matmul_precision()) {
    kernels::set_matmul_precision(precision);
  }
  ~PrecisionGuard() { kernels::set_matmul_precision(saved_); }

 private:
  kernels::MatmulPrecision saved_;
};

}  // namespace inkling::test
