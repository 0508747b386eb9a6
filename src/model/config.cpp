#include "model/config.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <limits>
#include <set>
#include <sstream>

#include "io/text_file.h"
#include "tensor/error.h"

namespace inkling {

namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& message) { throw Error("config.json: " + message); }

const json* field(const json& object, const char* name) {
  auto it = object.find(name);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

// Every integer the config gives is narrowed to int somewhere, and some size tables before any
// weight is read: each is checked against its range here, never cast blindly (a float like 9e66
// has no integer, and 2^32 + 4 must not become 4).
constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();

int64_t checked_int(const json& value, const std::string& what, int64_t lo = 0, int64_t hi = kIntMax) {
  int64_t v = 0;
  if (value.is_number_unsigned()) {
    uint64_t u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(hi)) fail(what + " is " + value.dump() + ", above its maximum " + std::to_string(hi));
    v = static_cast<int64_t>(u);
  } else if (value.is_number_integer()) {
    v = value.get<int64_t>();
  } else if (value.is_number_float()) {
    double d = value.get<double>();
    // 2^63 is exact as a double; the range test runs before any cast.
    if (!(std::isfinite(d) && d == std::trunc(d) && d >= -9223372036854775808.0 && d < 9223372036854775808.0))
      fail(what + " must be an integer, got " + value.dump());
    v = static_cast<int64_t>(d);
  } else {
    fail(what + " must be an integer, got " + value.dump());
  }
  if (v < lo || v > hi)
    fail(what + " is " + std::to_string(v) + ", outside " + std::to_string(lo) + ".." + std::to_string(hi));
  return v;
}

int64_t require_int(const json& object, const char* name, const char* where = "text_config", int64_t lo = INT32_MIN,
                    int64_t hi = kIntMax) {
  const json* value = field(object, name);
  if (!value) fail(std::string(where) + " has no \"" + name + "\"");
  return checked_int(*value, std::string(where) + "." + name, lo, hi);
}

std::optional<int64_t> optional_int(const json& object, const char* name, int64_t lo = INT32_MIN, int64_t hi = kIntMax) {
  if (!field(object, name)) return std::nullopt;
  return require_int(object, name, "text_config", lo, hi);
}

// The layer table is sized from num_hidden_layers before any tensor is read; the largest real
// Inkling has 66 layers.
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxExperts = 1 << 16;

double require_number(const json& object, const char* name) {
  const json* value = field(object, name);
  if (!value) fail(std::string("text_config has no \"") + name + "\"");
  if (!value->is_number()) fail(std::string("text_config.") + name + " must be a number, got " + value->dump());
  return value->get<double>();
}

double number_or(const json& object, const char* name, double fallback) {
  return field(object, name) ? require_number(object, name) : fallback;
}

void require_positive(int64_t value, const char* name) {
  if (value <= 0) fail(std::string("text_config.") + name + " must be positive, got " + std::to_string(value));
}

QuantizationConfig parse_quantization(const json& config, const json* hf_quant) {
  QuantizationConfig quant;
  const json* entry = field(config, "quantization");
  std::string source = "config.json quantization";
  if (!entry) {
    entry = field(config, "quantization_config");
    source = "config.json quantization_config";
  }
  if (!entry && hf_quant) {
    entry = field(*hf_quant, "quantization");
    if (!entry) entry = hf_quant;
    source = "hf_quant_config.json";
  }
  if (!entry) return quant;
  if (!entry->is_object()) fail(source + " must be an object");
  quant.source = source;
  std::string algo;
  if (const json* value = field(*entry, "quant_algo")) algo = value->get<std::string>();
  std::string method;
  if (const json* value = field(*entry, "quant_method")) method = value->get<std::string>();
  std::string mode;
  if (const json* value = field(*entry, "mode")) mode = value->get<std::string>();
  if (algo == "NVFP4" || mode == "nvfp4") {
    quant.mode = QuantMode::NvFp4;
    quant.group_size = 16;
    quant.bits = 4;
    if (const json* value = field(*entry, "group_size")) quant.group_size = int(checked_int(*value, source + ".group_size"));
    if (quant.group_size != 16)
      fail(source + ": NVFP4 needs group_size 16, got " + std::to_string(quant.group_size));
    return quant;
  }
  if (!algo.empty()) fail(source + ": unsupported quant_algo \"" + algo + "\" (supported: NVFP4)");
  if (!method.empty() && method != "mlx" && method != "affine")
    fail(source + ": unsupported quant_method \"" + method + "\"");
  if (!mode.empty() && mode != "affine")
    fail(source + ": unsupported quantization mode \"" + mode + "\" (supported: affine, nvfp4)");
  if (!field(*entry, "bits") || !field(*entry, "group_size"))
    fail(source + " needs \"bits\" and \"group_size\" (MLX affine) or quant_algo NVFP4");
  quant.mode = QuantMode::Affine;
  quant.bits = int(checked_int((*entry)["bits"], source + ".bits"));
  quant.group_size = int(checked_int((*entry)["group_size"], source + ".group_size"));
  if (quant.bits != 4 && quant.bits != 8)
    fail(source + ": unsupported bits " + std::to_string(quant.bits) + " (supported: 4, 8)");
  if (quant.group_size != 32 && quant.group_size != 64 && quant.group_size != 128)
    fail(source + ": unsupported group_size " + std::to_string(quant.group_size) + " (supported: 32, 64, 128)");
  if (const json* value = field(*entry, "recipe")) quant.recipe = value->get<std::string>();
  return quant;
}

}  // namespace

static ModelConfig parse_model_config_fields(const nlohmann::json& config, const nlohmann::json* hf_quant);

bool TextConfig::has_moe() const {
  for (const LayerSpec& layer : layers)
    if (!layer.dense_mlp) return true;
  return false;
}

TextConfig parse_text_config(const json& tc) {
  if (!tc.is_object()) fail("text_config must be an object");
  TextConfig c;
  c.hidden_size = int(require_int(tc, "hidden_size"));
  c.num_layers = int(require_int(tc, "num_hidden_layers", "text_config", 1, kMaxLayers));
  c.vocab_size = int(require_int(tc, "vocab_size"));
  c.unpadded_vocab_size = int(optional_int(tc, "unpadded_vocab_size").value_or(c.vocab_size));
  c.n_heads = int(require_int(tc, "num_attention_heads"));
  c.n_kv_heads = int(require_int(tc, "num_key_value_heads"));
  c.head_dim = int(optional_int(tc, "head_dim").value_or(c.n_heads ? c.hidden_size / c.n_heads : 0));
  c.swa_n_heads = int(optional_int(tc, "swa_num_attention_heads").value_or(c.n_heads));
  c.swa_n_kv_heads = int(optional_int(tc, "swa_num_key_value_heads").value_or(c.n_kv_heads));
  c.swa_head_dim = int(optional_int(tc, "swa_head_dim").value_or(c.head_dim));
  c.d_rel = int(require_int(tc, "d_rel"));
  c.rel_extent = int(require_int(tc, "rel_extent"));
  c.sliding_window = int(optional_int(tc, "sliding_window_size").value_or(
      optional_int(tc, "sliding_window").value_or(0)));
  auto kernel = optional_int(tc, "sconv_kernel_size");
  auto kernel_alias = optional_int(tc, "conv_kernel_size");
  if (kernel && kernel_alias && *kernel != *kernel_alias)
    fail("text_config.sconv_kernel_size (" + std::to_string(*kernel) + ") and conv_kernel_size (" +
         std::to_string(*kernel_alias) + ") disagree");
  c.conv_kernel = int(kernel.value_or(kernel_alias.value_or(4)));

  // The two spellings of the MLP widths (seed rule).
  if (auto moe = optional_int(tc, "moe_intermediate_size")) {
    c.moe_width = int(*moe);
    c.dense_width = int(require_int(tc, "intermediate_size"));
    if (auto dense = optional_int(tc, "dense_intermediate_size"); dense && *dense != c.dense_width)
      fail("text_config.dense_intermediate_size (" + std::to_string(*dense) +
           ") contradicts intermediate_size (" + std::to_string(c.dense_width) +
           ") while moe_intermediate_size is set");
  } else {
    c.moe_width = int(require_int(tc, "intermediate_size"));
    if (!field(tc, "dense_intermediate_size"))
      fail("text_config has neither \"moe_intermediate_size\" nor \"dense_intermediate_size\"; "
           "cannot tell the dense MLP width from the MoE width");
    c.dense_width = int(require_int(tc, "dense_intermediate_size"));
  }
  c.n_routed_experts = int(optional_int(tc, "n_routed_experts", 0, kMaxExperts).value_or(
      optional_int(tc, "num_local_experts", 0, kMaxExperts).value_or(0)));
  c.n_shared_experts = int(optional_int(tc, "n_shared_experts", 0, kMaxExperts).value_or(0));
  c.experts_per_token = int(optional_int(tc, "num_experts_per_tok").value_or(0));
  c.route_scale = float(number_or(tc, "route_scale", 1.0));
  c.mup_width_multiplier = float(number_or(tc, "logits_mup_width_multiplier", 1.0));
  c.log_scaling_n_floor = optional_int(tc, "log_scaling_n_floor");
  c.log_scaling_alpha = float(number_or(tc, "log_scaling_alpha", 0.1));
  c.rms_norm_eps = float(number_or(tc, "rms_norm_eps", 1e-6));
  if (const json* value = field(tc, "use_embed_norm")) c.use_embed_norm = value->get<bool>();
  c.max_position = optional_int(tc, "model_max_length", 1)
                       .value_or(optional_int(tc, "max_position_embeddings", 1).value_or(1 << 20));

  require_positive(c.hidden_size, "hidden_size");
  require_positive(c.num_layers, "num_hidden_layers");
  require_positive(c.vocab_size, "vocab_size");
  require_positive(c.n_heads, "num_attention_heads");
  require_positive(c.n_kv_heads, "num_key_value_heads");
  require_positive(c.head_dim, "head_dim");
  require_positive(c.swa_n_heads, "swa_num_attention_heads");
  require_positive(c.swa_n_kv_heads, "swa_num_key_value_heads");
  require_positive(c.swa_head_dim, "swa_head_dim");
  require_positive(c.d_rel, "d_rel");
  require_positive(c.rel_extent, "rel_extent");
  require_positive(c.sliding_window, "sliding_window_size");
  require_positive(c.conv_kernel, "sconv_kernel_size");
  if (c.unpadded_vocab_size <= 0 || c.unpadded_vocab_size > c.vocab_size)
    fail("text_config.unpadded_vocab_size " + std::to_string(c.unpadded_vocab_size) +
         " must be in 1.." + std::to_string(c.vocab_size));
  if (c.n_heads % c.n_kv_heads != 0 || c.swa_n_heads % c.swa_n_kv_heads != 0)
    fail("text_config: attention heads must be a multiple of key/value heads");
  if (c.mup_width_multiplier <= 0) fail("text_config.logits_mup_width_multiplier must be positive");
  if (c.log_scaling_n_floor && *c.log_scaling_n_floor <= 0)
    fail("text_config.log_scaling_n_floor must be positive");

  // Layer classification: layer_types, then local_layer_ids, then (i + 1) % 6 != 0.
  c.layers.resize(size_t(c.num_layers));
  const json* layer_types = field(tc, "layer_types");
  const json* local_ids = field(tc, "local_layer_ids");
  if (layer_types) {
    if (!layer_types->is_array() || int(layer_types->size()) != c.num_layers)
      fail("text_config.layer_types must list " + std::to_string(c.num_layers) + " entries");
    for (int i = 0; i < c.num_layers; ++i) {
      std::string kind = (*layer_types)[size_t(i)].get<std::string>();
      if (kind != "hybrid_sliding" && kind != "hybrid" && kind != "sliding_attention" && kind != "full_attention")
        fail("text_config.layer_types[" + std::to_string(i) + "] is \"" + kind +
             "\" (expected \"hybrid_sliding\" or \"hybrid\")");
      c.layers[size_t(i)].sliding = kind == "hybrid_sliding" || kind == "sliding_attention";
    }
  } else if (local_ids) {
    if (!local_ids->is_array()) fail("text_config.local_layer_ids must be a list");
    std::set<int> ids;
    for (const json& id : *local_ids) {
      int index = int(checked_int(id, "text_config.local_layer_ids entry", INT32_MIN));
      if (index < 0 || index >= c.num_layers)
        fail("text_config.local_layer_ids has " + std::to_string(index) + ", outside 0.." +
             std::to_string(c.num_layers - 1));
      ids.insert(index);
    }
    for (int i = 0; i < c.num_layers; ++i) c.layers[size_t(i)].sliding = ids.count(i) > 0;
  } else {
    for (int i = 0; i < c.num_layers; ++i) c.layers[size_t(i)].sliding = (i + 1) % 6 != 0;
  }
  // MLP kind: mlp_layer_types, then i < dense_mlp_idx.
  if (const json* mlp_types = field(tc, "mlp_layer_types")) {
    if (!mlp_types->is_array() || int(mlp_types->size()) != c.num_layers)
      fail("text_config.mlp_layer_types must list " + std::to_string(c.num_layers) + " entries");
    for (int i = 0; i < c.num_layers; ++i) {
      std::string kind = (*mlp_types)[size_t(i)].get<std::string>();
      if (kind != "dense" && kind != "sparse" && kind != "moe")
        fail("text_config.mlp_layer_types[" + std::to_string(i) + "] is \"" + kind +
             "\" (expected \"dense\" or \"sparse\")");
      c.layers[size_t(i)].dense_mlp = kind == "dense";
    }
  } else {
    int dense_idx = int(optional_int(tc, "dense_mlp_idx").value_or(0));
    for (int i = 0; i < c.num_layers; ++i) c.layers[size_t(i)].dense_mlp = i < dense_idx;
  }
  for (LayerSpec& layer : c.layers) {
    layer.n_heads = layer.sliding ? c.swa_n_heads : c.n_heads;
    layer.n_kv_heads = layer.sliding ? c.swa_n_kv_heads : c.n_kv_heads;
    layer.head_dim = layer.sliding ? c.swa_head_dim : c.head_dim;
    layer.rel_extent = layer.sliding ? c.sliding_window : c.rel_extent;
  }
  bool any_dense = false;
  for (const LayerSpec& layer : c.layers) any_dense |= layer.dense_mlp;
  if (any_dense) require_positive(c.dense_width, "dense MLP width");
  if (c.has_moe()) {
    require_positive(c.moe_width, "MoE width");
    require_positive(c.n_routed_experts, "n_routed_experts");
    require_positive(c.experts_per_token, "num_experts_per_tok");
    if (c.experts_per_token > c.n_routed_experts)
      fail("text_config.num_experts_per_tok (" + std::to_string(c.experts_per_token) +
           ") exceeds n_routed_experts (" + std::to_string(c.n_routed_experts) + ")");
  }
  return c;
}

ModelConfig parse_model_config(const json& config, const json* hf_quant) {
  try {
    return parse_model_config_fields(config, hf_quant);
  } catch (const json::exception& error) {
    throw Error(std::string("config.json: a field has the wrong type: ") + error.what());
  }
}

static ModelConfig parse_model_config_fields(const json& config, const json* hf_quant) {
  if (!config.is_object()) fail("top level must be a JSON object");
  ModelConfig m;
  if (const json* value = field(config, "architectures"))
    for (const json& name : *value) m.architectures.push_back(name.get<std::string>());
  if (const json* value = field(config, "model_type")) m.model_type = value->get<std::string>();
  bool known_type = m.model_type == "inkling_mm_model" || m.model_type == "inkling";
  bool known_arch = false;
  for (const std::string& name : m.architectures)
    known_arch |= name.rfind("Inkling", 0) == 0;
  if (!known_type) {
    std::string what = m.model_type.empty() ? "no model_type" : "model_type \"" + m.model_type + "\"";
    fail(what + " is not an Inkling model (expected \"inkling_mm_model\" or \"inkling\")");
  }
  if (!m.architectures.empty() && !known_arch)
    fail("architectures " + json(m.architectures).dump() + " name no Inkling class");
  if (const json* value = field(config, "eos_token_id")) {
    if (value->is_array()) {
      if (value->empty()) fail("eos_token_id is an empty list");
      m.eos_token_id = int(checked_int(value->front(), "eos_token_id"));
    } else {
      m.eos_token_id = int(checked_int(*value, "eos_token_id"));
    }
  }
  if (const json* value = field(config, "image_token_id")) m.image_token_id = int(checked_int(*value, "image_token_id"));
  if (const json* value = field(config, "audio_token_id")) m.audio_token_id = int(checked_int(*value, "audio_token_id"));
  const json* text = field(config, "text_config");
  // A text-only config ("model_type": "inkling") may carry the fields at the top level.
  m.text = parse_text_config(text ? *text : config);
  m.vocab_size = int(optional_int(config, "vocab_size").value_or(m.text.vocab_size));
  if (m.vocab_size != m.text.vocab_size)
    fail("vocab_size " + std::to_string(m.vocab_size) + " contradicts text_config.vocab_size " +
         std::to_string(m.text.vocab_size));
  m.quantization = parse_quantization(config, hf_quant);
  return m;
}

json read_json_file(const std::filesystem::path& path) {
  const std::string text = read_text_file(path, kMaxConfigFileBytes);
  try {
    return json::parse(text);
  } catch (const json::exception& error) {
    throw Error(path.string() + ": invalid JSON: " + error.what());
  }
}

ModelConfig load_model_config(const std::filesystem::path& dir) {
  std::filesystem::path config_path = dir / "config.json";
  if (!std::filesystem::exists(config_path))
    throw Error("no config.json in " + dir.string() + " (is this an Inkling checkpoint directory?)");
  json config = read_json_file(config_path);
  std::optional<json> hf_quant;
  if (std::filesystem::exists(dir / "hf_quant_config.json"))
    hf_quant = read_json_file(dir / "hf_quant_config.json");
  try {
    return parse_model_config(config, hf_quant ? &*hf_quant : nullptr);
  } catch (const json::exception& error) {
    throw Error(config_path.string() + ": field of the wrong type: " + error.what());
  } catch (const Error& error) {
    throw Error(dir.string() + "/" + error.what());
  }
}

}  // namespace inkling
