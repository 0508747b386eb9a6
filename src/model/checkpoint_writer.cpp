#include "model/checkpoint_writer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "model/sanitize.h"
#include "tensor/error.h"

namespace inkling {

TargetFormat parse_target_format(const std::string& name) {
  if (name == "original-f32") return {TargetLayout::OriginalF32, 0, 0};
  if (name == "original-bf16") return {TargetLayout::OriginalBF16, 0, 0};
  if (name == "nvfp4") return {TargetLayout::NvFp4, 4, 16};
  if (name == "mlx-4bit") return {TargetLayout::MlxAffine, 4, 64};
  if (name == "mlx-8bit") return {TargetLayout::MlxAffine, 8, 64};
  throw Error("unknown layout \"" + name + "\" (expected original-f32, original-bf16, nvfp4, mlx-4bit or mlx-8bit)");
}

void quantize_affine_row(const float* values, int64_t cols, int bits, int group_size, uint8_t* codes,
                         uint16_t* scales_bf16, uint16_t* biases_bf16) {
  int max_code = (1 << bits) - 1;
  if (bits == 4) std::memset(codes, 0, size_t(cols / 2));
  for (int64_t g = 0; g < cols / group_size; ++g) {
    const float* group = values + g * group_size;
    float lo = *std::min_element(group, group + group_size);
    float hi = *std::max_element(group, group + group_size);
    float scale = (hi - lo) / float(max_code);
    if (scale == 0.0f) scale = 1e-8f;
    // Codes are chosen against the bf16-rounded scale and bias the file will hold.
    uint16_t scale_bits = f32_to_bf16(scale), bias_bits = f32_to_bf16(lo);
    float stored_scale = bf16_to_f32(scale_bits), stored_bias = bf16_to_f32(bias_bits);
    scales_bf16[g] = scale_bits;
    biases_bf16[g] = bias_bits;
    for (int64_t i = 0; i < group_size; ++i) {
      int64_t c = g * group_size + i;
      float code = std::nearbyint((values[c] - stored_bias) / stored_scale);
      uint8_t q = uint8_t(std::clamp(code, 0.0f, float(max_code)));
      if (bits == 8) codes[c] = q;
      else codes[c / 2] |= uint8_t((c & 1) ? q << 4 : q);
    }
  }
}

void quantize_nvfp4_row(const float* values, int64_t cols, float scale2, uint8_t* codes, uint8_t* block_scales) {
  std::memset(codes, 0, size_t(cols / 2));
  for (int64_t b = 0; b < cols / 16; ++b) {
    float amax = 0.0f;
    for (int i = 0; i < 16; ++i) amax = std::max(amax, std::fabs(values[b * 16 + i]));
    uint8_t scale_code = f32_to_e4m3(amax / 6.0f / scale2);
    block_scales[b] = scale_code;
    float step = e4m3_to_f32(scale_code) * scale2;
    for (int i = 0; i < 16; ++i) {
      int64_t c = b * 16 + i;
      uint8_t q = step > 0.0f ? f32_to_fp4_e2m1(values[c] / step) : 0;
      codes[c / 2] |= uint8_t((c & 1) ? q << 4 : q);
    }
  }
}

namespace {

enum class Part { Copy, Weight, Scales, Biases, Scale2, InputAmax };

struct OutputTensor {
  TensorSpec spec;
  size_t source = 0;  // index into OriginalTensors::specs
  Part part = Part::Copy;
  RowSelect rows = RowSelect::All;
  bool quantized = false;
};

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

int layer_of(const std::string& name) {
  const std::string prefix = "model.llm.layers.";
  if (name.compare(0, prefix.size(), prefix) != 0) return -1;
  return std::atoi(name.c_str() + prefix.size());
}

// Quantization results for one (source tensor, row selection), cached across its parts.
struct QuantizedTensor {
  size_t source = SIZE_MAX;
  RowSelect rows = RowSelect::All;
  std::vector<uint8_t> codes, scales, biases;
  std::vector<float> scale2;
};

}  // namespace

std::vector<TensorSpec> write_layout_tensors(const std::filesystem::path& dir, const OriginalTensors& source,
                                             const TargetFormat& target, int first_moe_layer,
                                             const WriteOptions& options) {
  std::vector<OutputTensor> outputs;
  for (size_t i = 0; i < source.specs.size(); ++i) {
    const TensorSpec& spec = source.specs[i];
    const std::string& name = spec.name;
    DType copy_dtype = target.layout == TargetLayout::OriginalF32 && (spec.dtype == DType::BF16 || spec.dtype == DType::F16)
                           ? DType::F32 : spec.dtype;
    if (is_dropped_key(name) || target.layout == TargetLayout::OriginalF32 || target.layout == TargetLayout::OriginalBF16) {
      outputs.push_back({{name, copy_dtype, spec.shape}, i});
      continue;
    }
    int64_t cols = spec.shape.back();
    auto quant_shape = [&](int64_t last, bool halve_rows) {
      std::vector<int64_t> shape = spec.shape;
      shape.back() = last;
      if (halve_rows) shape[shape.size() - 2] /= 2;
      return shape;
    };
    if (target.layout == TargetLayout::NvFp4) {
      bool expert = ends_with(name, ".mlp.experts.w13_weight") || ends_with(name, ".mlp.experts.w2_weight");
      if (expert && layer_of(name) != first_moe_layer) {
        std::vector<int64_t> experts_only = {spec.shape[0]};
        outputs.push_back({{name, DType::U8, quant_shape(cols / 2, false)}, i, Part::Weight});
        outputs.push_back({{name + ".scale", DType::F8_E4M3, quant_shape(cols / 16, false)}, i, Part::Scales});
        outputs.push_back({{name + ".scale2", DType::F32, experts_only}, i, Part::Scale2});
        outputs.push_back({{name + ".input_amax", DType::F32, experts_only}, i, Part::InputAmax});
        for (size_t k = outputs.size() - 4; k < outputs.size(); ++k) outputs[k].quantized = true;
      } else {
        outputs.push_back({{name, copy_dtype, spec.shape}, i});
      }
      continue;
    }
    // MLX affine.
    std::string layer_prefix = name.substr(0, name.find(".mlp.") + 5);
    std::vector<std::pair<std::string, RowSelect>> targets;
    if (ends_with(name, ".mlp.w13_dn.weight")) {
      targets = {{layer_prefix + "gate_proj", RowSelect::Even}, {layer_prefix + "up_proj", RowSelect::Odd}};
    } else if (ends_with(name, ".mlp.w2_md.weight")) {
      targets = {{layer_prefix + "down_proj", RowSelect::All}};
    } else if (ends_with(name, ".mlp.experts.w13_weight")) {
      targets = {{layer_prefix + "experts.gate_proj", RowSelect::Even}, {layer_prefix + "experts.up_proj", RowSelect::Odd}};
    } else if (ends_with(name, ".mlp.experts.w2_weight")) {
      targets = {{layer_prefix + "experts.down_proj", RowSelect::All}};
    } else if (ends_with(name, ".mlp.shared_experts.shared_w13_weight")) {
      targets = {{layer_prefix + "shared_experts.gate_proj", RowSelect::Even},
                 {layer_prefix + "shared_experts.up_proj", RowSelect::Odd}};
    } else if (ends_with(name, ".mlp.shared_experts.shared_w2_weight")) {
      targets = {{layer_prefix + "shared_experts.down_proj", RowSelect::All}};
    }
    if (targets.empty()) {
      std::vector<int64_t> shape = spec.shape;
      if (ends_with(name, "sconv.weight") && shape.size() == 3 && shape[1] == 1) std::swap(shape[1], shape[2]);
      outputs.push_back({{name, copy_dtype, shape}, i});
      continue;
    }
    if (cols % target.group_size != 0)
      throw Error("cannot quantize " + name + ": its input width " + std::to_string(cols) +
                  " is not a multiple of the group size " + std::to_string(target.group_size));
    for (const auto& [base, rows] : targets) {
      bool halve = rows != RowSelect::All;
      outputs.push_back({{base + ".weight", DType::U32, quant_shape(cols * target.bits / 32, halve)}, i, Part::Weight, rows, true});
      outputs.push_back({{base + ".scales", DType::BF16, quant_shape(cols / target.group_size, halve)}, i, Part::Scales, rows, true});
      outputs.push_back({{base + ".biases", DType::BF16, quant_shape(cols / target.group_size, halve)}, i, Part::Biases, rows, true});
    }
  }

  std::vector<TensorSpec> specs;
  for (const OutputTensor& output : outputs) specs.push_back(output.spec);

  size_t cursor = 0;
  size_t cached_source = SIZE_MAX;
  std::vector<float> values;
  QuantizedTensor quantized;
  auto load_source = [&](size_t index) {
    if (cached_source == index) return;
    source.read(source.specs[index], values);
    cached_source = index;
  };
  TensorFiller fill = [&](const TensorSpec& spec, std::span<uint8_t> out) {
    const OutputTensor& output = outputs[cursor++];
    (void)spec;
    const TensorSpec& src = source.specs[output.source];
    load_source(output.source);
    if (!output.quantized) {
      size_t n = values.size();
      for (size_t k = 0; k < n; ++k) {
        switch (output.spec.dtype) {
          case DType::F32: std::memcpy(out.data() + 4 * k, &values[k], 4); break;
          case DType::BF16: { uint16_t b = f32_to_bf16(values[k]); std::memcpy(out.data() + 2 * k, &b, 2); break; }
          case DType::F16: { uint16_t b = f32_to_f16(values[k]); std::memcpy(out.data() + 2 * k, &b, 2); break; }
          default: throw Error("cannot write " + src.name + " as " + std::string(dtype_name(output.spec.dtype)));
        }
      }
      return;
    }
    if (quantized.source != output.source || quantized.rows != output.rows) {
      quantized = QuantizedTensor{output.source, output.rows, {}, {}, {}, {}};
      int64_t cols = src.shape.back();
      int64_t total_rows = int64_t(values.size()) / cols;
      int64_t step = output.rows == RowSelect::All ? 1 : 2;
      int64_t first = output.rows == RowSelect::Odd ? 1 : 0;
      int64_t out_rows = total_rows / step;
      if (target.layout == TargetLayout::NvFp4) {
        int64_t experts = src.shape[0];
        int64_t rows_per_expert = total_rows / experts;
        quantized.scale2.resize(size_t(experts));
        for (int64_t e = 0; e < experts; ++e) {
          float amax = 0.0f;
          for (int64_t k = e * rows_per_expert * cols; k < (e + 1) * rows_per_expert * cols; ++k)
            amax = std::max(amax, std::fabs(values[size_t(k)]));
          quantized.scale2[size_t(e)] = amax > 0 ? amax / (6.0f * 448.0f) : 1.0f;
        }
        quantized.codes.resize(size_t(total_rows * cols / 2));
        quantized.scales.resize(size_t(total_rows * cols / 16));
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < total_rows; ++r)
          quantize_nvfp4_row(values.data() + r * cols, cols, quantized.scale2[size_t(r / rows_per_expert)],
                             quantized.codes.data() + r * cols / 2, quantized.scales.data() + r * cols / 16);
      } else {
        int64_t groups = cols / target.group_size;
        quantized.codes.resize(size_t(out_rows * cols * target.bits / 8));
        quantized.scales.resize(size_t(out_rows * groups * 2));
        quantized.biases.resize(size_t(out_rows * groups * 2));
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < out_rows; ++r)
          quantize_affine_row(values.data() + (first + r * step) * cols, cols, target.bits, target.group_size,
                              quantized.codes.data() + r * cols * target.bits / 8,
                              reinterpret_cast<uint16_t*>(quantized.scales.data()) + r * groups,
                              reinterpret_cast<uint16_t*>(quantized.biases.data()) + r * groups);
      }
    }
    const std::vector<uint8_t>* bytes = nullptr;
    switch (output.part) {
      case Part::Weight: bytes = &quantized.codes; break;
      case Part::Scales: bytes = &quantized.scales; break;
      case Part::Biases: bytes = &quantized.biases; break;
      case Part::Scale2: std::memcpy(out.data(), quantized.scale2.data(), out.size()); return;
      case Part::InputAmax:
        for (size_t e = 0; e < quantized.scale2.size(); ++e) {
          float amax = 1.0f;  // calibration statistic of activations; unused by inference
          std::memcpy(out.data() + 4 * e, &amax, 4);
        }
        return;
      case Part::Copy: break;
    }
    if (!bytes || bytes->size() != out.size())
      throw Error("internal: size mismatch writing " + output.spec.name);
    std::memcpy(out.data(), bytes->data(), out.size());
  };
  write_sharded(dir, specs, fill, options.max_shard_bytes, options.progress);
  return specs;
}

}  // namespace inkling
