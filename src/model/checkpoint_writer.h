// Writes Inkling checkpoints in each release layout from original-layout f32 tensors.
// `synth` feeds it random tensors; `quantize` feeds it the tensors of an existing checkpoint.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace inkling {

enum class TargetLayout { OriginalF32, OriginalBF16, NvFp4, MlxAffine };

struct TargetFormat {
  TargetLayout layout = TargetLayout::OriginalBF16;
  int bits = 4;         // MlxAffine
  int group_size = 64;  // MlxAffine
};

// Parses "original-f32", "original-bf16", "nvfp4", "mlx-4bit", "mlx-8bit" (group 64).
TargetFormat parse_target_format(const std::string& name);

// Tensors in the ORIGINAL layout (model.llm.* names, torch conv shapes, interleaved w13),
// each produced as f32 on request.
struct OriginalTensors {
  std::vector<TensorSpec> specs;  // dtype = the dtype of the original-layout release tensor
  std::function<void(const TensorSpec& spec, std::vector<float>& out)> read;
};

struct WriteOptions {
  uint64_t max_shard_bytes = 2ull << 30;
  std::function<void(uint64_t done, uint64_t total)> progress;
};

// Writes the safetensors shards + index of `target` into dir. `first_moe_layer` keeps its
// experts bf16 in the NVFP4 layout, as the release does. Returns the output tensor specs.
std::vector<TensorSpec> write_layout_tensors(const std::filesystem::path& dir, const OriginalTensors& source,
                                             const TargetFormat& target, int first_moe_layer,
                                             const WriteOptions& options);

// Encoders shared with tests: quantize one row of `cols` values.
// MLX affine: codes packed little-endian (low bits first), scale/bias per group (bf16 rounded).
void quantize_affine_row(const float* values, int64_t cols, int bits, int group_size, uint8_t* codes,
                         uint16_t* scales_bf16, uint16_t* biases_bf16);
// NVFP4 with a given per-tensor scale2: E2M1 codes (low nibble first) and E4M3 block scales.
void quantize_nvfp4_row(const float* values, int64_t cols, float scale2, uint8_t* codes, uint8_t* block_scales);

}  // namespace inkling
