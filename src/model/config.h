// Inkling config.json: top level, text_config, quantization, and the per-layer plan.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

namespace inkling {

enum class QuantMode { None, Affine, NvFp4 };

struct QuantizationConfig {
  QuantMode mode = QuantMode::None;
  int group_size = 0;
  int bits = 0;
  std::string recipe;  // MLX "experts_only" etc.
  std::string source;  // "config.json quantization", "hf_quant_config.json", ...
};

struct LayerSpec {
  bool sliding = true;
  bool dense_mlp = false;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int rel_extent = 0;  // R: rel_extent on global layers, the window on sliding ones
};

struct TextConfig {
  int hidden_size = 0;
  int num_layers = 0;
  int vocab_size = 0;
  int unpadded_vocab_size = 0;
  int n_heads = 0, n_kv_heads = 0, head_dim = 0;              // global layers
  int swa_n_heads = 0, swa_n_kv_heads = 0, swa_head_dim = 0;  // sliding layers
  int d_rel = 0;
  int rel_extent = 0;
  int sliding_window = 0;
  int conv_kernel = 4;
  int dense_width = 0;
  int moe_width = 0;
  int n_routed_experts = 0;
  int n_shared_experts = 0;
  int experts_per_token = 0;
  float route_scale = 1.0f;
  float mup_width_multiplier = 1.0f;
  std::optional<int64_t> log_scaling_n_floor;
  float log_scaling_alpha = 0.1f;
  float rms_norm_eps = 1e-6f;
  bool use_embed_norm = true;
  int64_t max_position = 1 << 20;
  std::vector<LayerSpec> layers;

  bool has_moe() const;
};

struct ModelConfig {
  std::vector<std::string> architectures;
  std::string model_type;
  int eos_token_id = 200006;
  int image_token_id = 200054;
  int audio_token_id = 200053;
  int vocab_size = 0;
  TextConfig text;
  QuantizationConfig quantization;
};

// Parses a whole config.json object; `hf_quant` is hf_quant_config.json when present.
// Throws inkling::Error naming the field for anything missing or contradictory.
ModelConfig parse_model_config(const nlohmann::json& config, const nlohmann::json* hf_quant = nullptr);
TextConfig parse_text_config(const nlohmann::json& text_config);
// Reads DIR/config.json (+ DIR/hf_quant_config.json).
ModelConfig load_model_config(const std::filesystem::path& dir);

// Reads a JSON file; errors name the file.
nlohmann::json read_json_file(const std::filesystem::path& path);

}  // namespace inkling
