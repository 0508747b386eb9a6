// Turns an original-layout (f32 / bf16) checkpoint into the MLX affine or the NVFP4 layout.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <string>

#include "model/checkpoint_writer.h"

namespace inkling {

struct QuantizeReport {
  std::map<std::string, double> relative_error;  // per tensor family, output vs input weights
  uint64_t input_bytes = 0;
  uint64_t output_bytes = 0;
};

QuantizeReport quantize_checkpoint(const std::filesystem::path& input, const std::filesystem::path& output,
                                   const TargetFormat& target,
                                   const std::function<void(uint64_t, uint64_t)>& progress = {});

}  // namespace inkling
