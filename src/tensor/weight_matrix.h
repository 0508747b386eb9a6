// A weight matrix [rows (out), cols (in)] viewed in its stored format, zero-copy.
//
// Rows need not be contiguous: row r starts at data + r * row_stride bytes. This is how the
// row-interleaved w13 tensors are split without copying (gate = even rows, up = odd rows:
// same data pointer offset by one row, doubled stride) and how one expert of a stacked
// [E, out, in] tensor is addressed.
#pragma once

#include <cstdint>
#include <string>

#include "tensor/dtype.h"
#include "tensor/ggml_types.h"

namespace inkling {

enum class WeightFormat : uint8_t {
  F32,
  BF16,
  F16,
  // MLX affine quantization: `bits` (4 or 8) unsigned codes packed little-endian into uint32
  // words (code j of a word sits at bits [j*bits, (j+1)*bits)), so element c of a row is at
  // byte c*bits/8 (low nibble first for 4-bit). w = scale * code + bias per group of
  // `group_size` columns; scales / biases are [rows, cols / group_size] of `scale_dtype`.
  Affine,
  // NVFP4: E2M1 codes, two per byte, low nibble first; one E4M3 scale per 16 columns
  // ([rows, cols / 16] bytes); w = fp4 * e4m3 * global_scale.
  NvFp4,
  // A ggml block type (GGUF files): each row is cols / block_elements blocks of `ggml_type`,
  // scales inside the blocks (tensor/ggml_types.h). Computed by the scalar reference kernels.
  Ggml,
};

const char* weight_format_name(WeightFormat format);

struct WeightMatrix;
// weight_format_name, with a ggml matrix's type: "ggml Q4_K".
std::string weight_format_label(const WeightMatrix& matrix);

struct WeightMatrix {
  WeightFormat format = WeightFormat::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  const uint8_t* data = nullptr;
  int64_t row_stride = 0;  // bytes between consecutive rows

  // Affine and NvFp4 only.
  int bits = 0;
  int group_size = 0;
  DType scale_dtype = DType::BF16;  // Affine: BF16/F16/F32; NvFp4: F8_E4M3
  const uint8_t* scales = nullptr;
  int64_t scales_row_stride = 0;    // bytes
  const uint8_t* biases = nullptr;  // Affine only, same dtype and layout as scales
  int64_t biases_row_stride = 0;
  float global_scale = 1.0f;  // NvFp4 per-expert scale2
  // NvFp4: every block scale is known to be a non-negative finite E4M3 value (the checkpoint
  // binder scans them once, when they were copied into memory). The kernels then decode the
  // scales without checking each row first; false means unknown, and they check row by row.
  bool scales_nonnegative_finite = false;
  GgmlType ggml_type = GgmlType::F32;  // Ggml only

  // Bytes a full pass over the matrix reads (weights + scales + biases).
  int64_t bytes_read() const;
};

// Scalar dequantization of one row into out[cols]: the reference every kernel is tested against.
void dequantize_row(const WeightMatrix& matrix, int64_t row, float* out);

}  // namespace inkling
