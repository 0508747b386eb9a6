#include "model/quantize.h"

#include <fstream>

#include "model/inspect.h"
#include "model/weights.h"
#include "tensor/error.h"

namespace inkling {

namespace {

// Removes the files of a checkpoint already in `dir` (an older quantization written there), so
// none of them (hf_quant_config.json of an NVFP4 run, shards past the new count) outlives it.
void remove_previous_checkpoint(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  if (!fs::exists(dir / "config.json")) return;
  const fs::path index_path = dir / "model.safetensors.index.json";
  if (fs::exists(index_path)) {
    nlohmann::json index = nlohmann::json::parse(std::ifstream(index_path), nullptr, false);
    if (index.is_object() && index.contains("weight_map") && index["weight_map"].is_object())
      for (const auto& [tensor, shard] : index["weight_map"].items())
        if (shard.is_string() && fs::path(shard.get<std::string>()).filename() == fs::path(shard.get<std::string>()))
          fs::remove(dir / shard.get<std::string>());
  }
  for (const char* name : {"model.safetensors.index.json", "model.safetensors", "config.json", "hf_quant_config.json",
                           "generation_config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"})
    fs::remove(dir / name);
}

}  // namespace

QuantizeReport quantize_checkpoint(const std::filesystem::path& input, const std::filesystem::path& output,
                                   const TargetFormat& target, const std::function<void(uint64_t, uint64_t)>& progress) {
  if (target.layout != TargetLayout::MlxAffine && target.layout != TargetLayout::NvFp4)
    throw Error("quantize targets mlx-4bit, mlx-8bit or nvfp4");
  std::unique_ptr<Checkpoint> source_ckpt = Checkpoint::open(input);
  if (source_ckpt->layout() != CheckpointLayout::OriginalF32 && source_ckpt->layout() != CheckpointLayout::OriginalBF16)
    throw Error(input.string() + " is already quantized (" + layout_name(source_ckpt->layout()) +
                "); quantize needs an original f32 or bf16 checkpoint");
  if (std::filesystem::exists(output) && std::filesystem::equivalent(output, input))
    throw Error("output directory must differ from the input");
  const TensorStore& store = source_ckpt->store();
  OriginalTensors source;
  for (const std::string& name : store.names()) {
    TensorView view = store.get(name);
    if (view.dtype != DType::F32 && view.dtype != DType::BF16 && view.dtype != DType::F16)
      throw Error(input.string() + ": tensor " + name + " has dtype " + std::string(dtype_name(view.dtype)) +
                  "; an original checkpoint holds only float tensors");
    source.specs.push_back({name, view.dtype, view.shape});
  }
  source.read = [&store](const TensorSpec& spec, std::vector<float>& out) {
    TensorView view = store.get(spec.name);
    out.resize(size_t(view.numel()));
    for (size_t i = 0; i < out.size(); ++i) out[i] = view.at_f32(i);
  };
  int first_moe_layer = -1;
  for (size_t i = 0; i < source_ckpt->text().layers.size(); ++i)
    if (!source_ckpt->text().layers[i].dense_mlp) {
      first_moe_layer = int(i);
      break;
    }
  remove_previous_checkpoint(output);
  std::filesystem::create_directories(output);
  WriteOptions options;
  options.progress = progress;
  write_layout_tensors(output, source, target, first_moe_layer, options);

  nlohmann::ordered_json config = nlohmann::ordered_json::parse(std::ifstream(input / "config.json"));
  config.erase("quantization");
  config.erase("quantization_config");
  if (target.layout == TargetLayout::MlxAffine) {
    nlohmann::ordered_json quant = {{"group_size", target.group_size}, {"bits", target.bits},
                                    {"mode", "affine"}, {"recipe", "experts_only"}};
    config["quantization"] = quant;
    config["quantization_config"] = quant;
  } else {
    nlohmann::ordered_json hf_quant = {{"producer", {{"name", "inkling.cpp"}, {"version", "0.1"}}},
                                       {"quantization", {{"quant_algo", "NVFP4"}, {"group_size", 16},
                                                         {"kv_cache_quant_algo", nullptr}}}};
    std::ofstream(output / "hf_quant_config.json") << hf_quant.dump(4) << "\n";
    config["quantization_config"] = {{"quant_method", "modelopt"}, {"quant_algo", "NVFP4"}, {"group_size", 16}};
  }
  std::ofstream(output / "config.json") << config.dump(2) << "\n";
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "generation_config.json", "chat_template.jinja"})
    if (std::filesystem::exists(input / name))
      std::filesystem::copy_file(input / name, output / name, std::filesystem::copy_options::overwrite_existing);

  std::unique_ptr<Checkpoint> result = Checkpoint::open(output);
  QuantizeReport report;
  report.relative_error = weight_difference(*source_ckpt, *result);
  report.input_bytes = store.total_file_bytes();
  report.output_bytes = result->store().total_file_bytes();
  return report;
}

}  // namespace inkling
