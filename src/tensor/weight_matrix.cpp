#include "tensor/weight_matrix.h"

namespace inkling {

const char* weight_format_name(WeightFormat format) {
  switch (format) {
    case WeightFormat::F32: return "f32";
    case WeightFormat::BF16: return "bf16";
    case WeightFormat::F16: return "f16";
    case WeightFormat::Affine: return "mlx-affine";
    case WeightFormat::NvFp4: return "nvfp4";
    case WeightFormat::Ggml: return "ggml";
  }
  return "?";
}

std::string weight_format_label(const WeightMatrix& matrix) {
  if (matrix.format != WeightFormat::Ggml) return weight_format_name(matrix.format);
  return "ggml " + std::string(ggml_type_name(matrix.ggml_type));
}

int64_t WeightMatrix::bytes_read() const {
  switch (format) {
    case WeightFormat::F32: return rows * cols * 4;
    case WeightFormat::BF16:
    case WeightFormat::F16: return rows * cols * 2;
    case WeightFormat::Affine:
      return rows * (cols * bits / 8 + 2 * (cols / group_size) * int64_t(dtype_size(scale_dtype)));
    case WeightFormat::NvFp4: return rows * (cols / 2 + cols / 16);
    case WeightFormat::Ggml: return rows * int64_t(ggml_row_bytes(ggml_type, cols).value_or(0));
  }
  return 0;
}

void dequantize_row(const WeightMatrix& m, int64_t row, float* out) {
  const uint8_t* src = m.data + row * m.row_stride;
  switch (m.format) {
    case WeightFormat::F32:
    case WeightFormat::BF16:
    case WeightFormat::F16: {
      DType dtype = m.format == WeightFormat::F32    ? DType::F32
                    : m.format == WeightFormat::BF16 ? DType::BF16
                                                     : DType::F16;
      for (int64_t c = 0; c < m.cols; ++c) out[c] = load_as_f32(src, dtype, size_t(c));
      return;
    }
    case WeightFormat::Affine: {
      const uint8_t* scales = m.scales + row * m.scales_row_stride;
      const uint8_t* biases = m.biases + row * m.biases_row_stride;
      for (int64_t c = 0; c < m.cols; ++c) {
        uint32_t code;
        if (m.bits == 8) {
          code = src[c];
        } else {
          uint8_t byte = src[c / 2];
          code = (c & 1) ? (byte >> 4) : (byte & 0xf);
        }
        int64_t group = c / m.group_size;
        float scale = load_as_f32(scales, m.scale_dtype, size_t(group));
        float bias = load_as_f32(biases, m.scale_dtype, size_t(group));
        out[c] = scale * float(code) + bias;
      }
      return;
    }
    case WeightFormat::NvFp4: {
      const uint8_t* scales = m.scales + row * m.scales_row_stride;
      for (int64_t c = 0; c < m.cols; ++c) {
        uint8_t byte = src[c / 2];
        uint8_t nibble = (c & 1) ? (byte >> 4) : (byte & 0xf);
        out[c] = fp4_e2m1_to_f32(nibble) * e4m3_to_f32(scales[c / 16]) * m.global_scale;
      }
      return;
    }
    case WeightFormat::Ggml: dequantize_ggml_row(m.ggml_type, src, out, m.cols); return;
  }
}

}  // namespace inkling
