#include "model/inspect.h"

#include <charconv>
#include <cstdlib>

#include <cmath>
#include <map>
#include <string>
#include <string_view>

namespace inkling {

namespace {

int64_t elements(const WeightMatrix& m) { return m.rows * m.cols; }
int64_t elements(const GatedExpert& e) { return elements(e.gate) + elements(e.up) + elements(e.down); }

template <typename Visit>
void visit_families(const Checkpoint& ckpt, Visit&& visit) {
  const ModelWeights& w = ckpt.weights();
  visit("embed", w.embed);
  visit("lm_head", w.lm_head);
  for (const LayerWeights& layer : w.layers) {
    for (const WeightMatrix* m : {&layer.attn.q, &layer.attn.k, &layer.attn.v, &layer.attn.r, &layer.attn.o})
      visit("attention", *m);
    auto gated = [&](const char* family, const GatedExpert& e) {
      visit(family, e.gate);
      visit(family, e.up);
      visit(family, e.down);
    };
    if (layer.mlp.dense) {
      gated("dense_mlp", layer.mlp.dense_mlp);
    } else {
      visit("router", layer.mlp.router);
      for (const GatedExpert& e : layer.mlp.experts) gated("routed_experts", e);
      for (const GatedExpert& e : layer.mlp.shared) gated("shared_experts", e);
    }
  }
}

}  // namespace

ParameterCounts count_parameters(const Checkpoint& ckpt) {
  ParameterCounts counts;
  const ModelWeights& w = ckpt.weights();
  const TextConfig& c = ckpt.text();
  counts.total += elements(w.embed) + elements(w.lm_head) + w.norm.numel() + w.embed_norm.numel();
  counts.active += c.hidden_size + elements(w.lm_head) + w.norm.numel() + w.embed_norm.numel();
  for (const LayerWeights& layer : w.layers) {
    int64_t attention = elements(layer.attn.q) + elements(layer.attn.k) + elements(layer.attn.v) +
                        elements(layer.attn.r) + elements(layer.attn.o) + layer.attn.q_norm.numel() +
                        layer.attn.k_norm.numel() + layer.attn.k_conv.numel() + layer.attn.v_conv.numel() +
                        layer.attn.rel_proj.numel() + layer.attn_norm.numel() + layer.mlp_norm.numel() +
                        layer.attn_conv.numel() + layer.mlp_conv.numel();
    counts.total += attention;
    counts.active += attention;
    if (layer.mlp.dense) {
      counts.total += elements(layer.mlp.dense_mlp) + 1;
      counts.active += elements(layer.mlp.dense_mlp) + 1;
    } else {
      int64_t router = elements(layer.mlp.router) + int64_t(layer.mlp.correction_bias.size()) + 1;
      int64_t per_expert = layer.mlp.experts.empty() ? 0 : elements(layer.mlp.experts[0]);
      int64_t shared = 0;
      for (const GatedExpert& e : layer.mlp.shared) shared += elements(e);
      counts.total += router + per_expert * int64_t(layer.mlp.experts.size()) + shared;
      counts.active += router + per_expert * c.experts_per_token + shared;
    }
  }
  return counts;
}

namespace {

// A float config value as the double JSON prints the way config.json wrote it: 0.1, not the
// float's exact 0.10000000149011612.
double shortest(float value) {
  char text[32];
  auto [end, ec] = std::to_chars(text, text + sizeof(text), value);
  return ec == std::errc() ? std::strtod(std::string(text, end).c_str(), nullptr) : double(value);
}

}  // namespace

namespace {

// llama.cpp's general.file_type numbering (llama_ftype): the type most tensors were quantized to.
std::string file_type_name(uint64_t code) {
  static const std::map<uint64_t, std::string> names = {
      {0, "F32"},      {1, "F16"},     {2, "Q4_0"},     {3, "Q4_1"},    {7, "Q8_0"},     {8, "Q5_0"},
      {9, "Q5_1"},     {10, "Q2_K"},   {11, "Q3_K_S"},  {12, "Q3_K_M"}, {13, "Q3_K_L"},  {14, "Q4_K_S"},
      {15, "Q4_K_M"},  {16, "Q5_K_S"}, {17, "Q5_K_M"},  {18, "Q6_K"},   {19, "IQ2_XXS"}, {20, "IQ2_XS"},
      {21, "Q2_K_S"},  {22, "IQ3_XS"}, {23, "IQ3_XXS"}, {24, "IQ1_S"},  {25, "IQ4_NL"},  {26, "IQ3_S"},
      {27, "IQ3_M"},   {28, "IQ2_S"},  {29, "IQ2_M"},   {30, "IQ4_XS"}, {31, "IQ1_M"},   {32, "BF16"},
      {36, "TQ1_0"},   {37, "TQ2_0"},  {38, "MXFP4_MOE"}};
  auto it = names.find(code);
  return it == names.end() ? "type " + std::to_string(code) : it->second;
}

// "blk.12.attn_q.weight" -> "attn_q", "token_embd.weight" -> "token_embd", "blk.3.exp_probs_b.bias"
// -> "exp_probs_b.bias".
std::string tensor_family(std::string name) {
  if (name.rfind("blk.", 0) == 0) {
    const size_t dot = name.find('.', 4);
    if (dot != std::string::npos) name.erase(0, dot + 1);
  }
  static constexpr std::string_view kWeight = ".weight";
  if (name.size() > kWeight.size() && name.compare(name.size() - kWeight.size(), kWeight.size(), kWeight) == 0)
    name.erase(name.size() - kWeight.size());
  return name;
}

}  // namespace

nlohmann::ordered_json describe_gguf(const GgufModelFiles& model) {
  using ojson = nlohmann::ordered_json;
  const GgufFile& first = model.first();
  auto optional_string = [&](std::string_view key) { return first.find(key) ? ojson(first.string(key)) : ojson(nullptr); };
  auto optional_unsigned = [&](std::string_view key) {
    return first.find(key) ? ojson(first.unsigned_integer(key)) : ojson(nullptr);
  };
  ojson out = ojson::object();
  out["version"] = first.version();
  out["alignment"] = first.alignment();
  out["key_count"] = first.keys().size();
  size_t tensors = 0;
  ojson files = ojson::array();
  for (const auto& file : model.files()) {
    files.push_back(file->path().string());
    tensors += file->tensors().size();
  }
  out["tensor_count"] = tensors;
  out["split_count"] = model.files().size();
  out["files"] = files;
  out["architecture"] = optional_string("general.architecture");
  out["name"] = optional_string("general.name");
  const std::string arch = first.find("general.architecture") ? std::string(first.string("general.architecture")) : "";
  out["context_length"] = optional_unsigned(arch + ".context_length");
  if (first.find("general.file_type")) {
    const uint64_t code = first.unsigned_integer("general.file_type");
    out["file_type"] = {{"code", code}, {"name", file_type_name(code)}};
  } else {
    out["file_type"] = nullptr;
  }
  out["quantization_version"] = optional_unsigned("general.quantization_version");
  ojson tokenizer = ojson::object();
  tokenizer["model"] = optional_string("tokenizer.ggml.model");
  tokenizer["pre"] = optional_string("tokenizer.ggml.pre");
  tokenizer["tokens"] = first.find("tokenizer.ggml.tokens") ? ojson(first.string_array("tokenizer.ggml.tokens").size()) : ojson(nullptr);
  tokenizer["merges"] = first.find("tokenizer.ggml.merges") ? ojson(first.string_array("tokenizer.ggml.merges").size()) : ojson(nullptr);
  tokenizer["eos_token_id"] = optional_unsigned("tokenizer.ggml.eos_token_id");
  tokenizer["bos_token_id"] = optional_unsigned("tokenizer.ggml.bos_token_id");
  tokenizer["padding_token_id"] = optional_unsigned("tokenizer.ggml.padding_token_id");
  tokenizer["add_bos_token"] = first.find("tokenizer.ggml.add_bos_token") ? ojson(first.boolean("tokenizer.ggml.add_bos_token")) : ojson(nullptr);
  tokenizer["chat_template"] = first.find("tokenizer.chat_template") != nullptr;
  out["tokenizer"] = tokenizer;
  std::map<std::string, std::map<std::string, int>> families;
  for (const std::string& name : model.names()) families[tensor_family(name)][std::string(ggml_type_name(model.find(name)->type))]++;
  ojson types = ojson::object();
  for (const auto& [family, counts] : families) types[family] = counts;
  out["tensor_types"] = types;
  return out;
}

nlohmann::ordered_json describe_checkpoint(const Checkpoint& ckpt) {
  using ojson = nlohmann::ordered_json;
  const ModelConfig& mc = ckpt.config();
  const TextConfig& c = mc.text;
  ojson out = ojson::object();
  out["path"] = ckpt.gguf() ? ckpt.gguf()->first().path().string() : ckpt.dir().string();
  out["layout"] = layout_label(ckpt.layout(), mc.quantization);
  out["model_type"] = mc.model_type;
  out["architectures"] = mc.architectures;
  ojson quant = ojson::object();
  quant["mode"] = mc.quantization.mode == QuantMode::None ? "none" : mc.quantization.mode == QuantMode::Affine ? "affine" : "nvfp4";
  if (mc.quantization.mode != QuantMode::None) {
    quant["bits"] = mc.quantization.bits;
    quant["group_size"] = mc.quantization.group_size;
    quant["source"] = mc.quantization.source;
    if (!mc.quantization.recipe.empty()) quant["recipe"] = mc.quantization.recipe;
  }
  out["quantization"] = quant;
  out["config"] = {{"hidden_size", c.hidden_size}, {"num_layers", c.num_layers}, {"vocab_size", c.vocab_size},
                   {"unpadded_vocab_size", c.unpadded_vocab_size}, {"d_rel", c.d_rel}, {"rel_extent", c.rel_extent},
                   {"sliding_window", c.sliding_window}, {"conv_kernel", c.conv_kernel},
                   {"dense_width", c.dense_width}, {"moe_width", c.moe_width},
                   {"n_routed_experts", c.n_routed_experts}, {"n_shared_experts", c.n_shared_experts},
                   {"experts_per_token", c.experts_per_token}, {"route_scale", shortest(c.route_scale)},
                   {"logits_mup_width_multiplier", shortest(c.mup_width_multiplier)},
                   {"log_scaling_n_floor", c.log_scaling_n_floor ? ojson(*c.log_scaling_n_floor) : ojson(nullptr)},
                   {"log_scaling_alpha", shortest(c.log_scaling_alpha)}, {"rms_norm_eps", shortest(c.rms_norm_eps)},
                   {"eos_token_id", mc.eos_token_id}, {"max_position", c.max_position}};
  ojson layers = ojson::array();
  for (size_t i = 0; i < ckpt.weights().layers.size(); ++i) {
    const LayerWeights& layer = ckpt.weights().layers[i];
    const LayerSpec& s = layer.spec;
    std::string mlp_format = layer.mlp.dense            ? weight_format_label(layer.mlp.dense_mlp.gate)
                             : layer.mlp.experts.empty() ? weight_format_name(WeightFormat::F32)
                                                         : weight_format_label(layer.mlp.experts[0].gate);
    layers.push_back({{"index", i}, {"attention", s.sliding ? "sliding" : "global"},
                      {"mlp", layer.mlp.dense ? "dense" : "moe"}, {"heads", s.n_heads}, {"kv_heads", s.n_kv_heads},
                      {"head_dim", s.head_dim}, {"window", s.sliding ? ojson(c.sliding_window) : ojson(nullptr)},
                      {"rel_extent", s.rel_extent}, {"mlp_format", mlp_format},
                      {"attention_format", weight_format_label(layer.attn.q)}});
  }
  out["layers"] = layers;
  ParameterCounts counts = count_parameters(ckpt);
  out["parameters"] = {{"total", counts.total}, {"active_per_token", counts.active}};
  std::map<std::string, uint64_t> bytes_per_dtype;
  uint64_t tensor_bytes = 0;
  for (const auto& file : ckpt.store().files())
    for (const TensorEntry& entry : file->entries()) {
      bytes_per_dtype[std::string(dtype_name(entry.dtype))] += entry.end - entry.begin;
      tensor_bytes += entry.end - entry.begin;
    }
  if (const GgufModelFiles* gguf = ckpt.gguf())
    for (const auto& file : gguf->files())
      for (const GgufTensor& tensor : file->tensors()) {
        bytes_per_dtype[std::string(ggml_type_name(tensor.type))] += tensor.nbytes;
        tensor_bytes += tensor.nbytes;
      }
  out["bytes_per_dtype"] = bytes_per_dtype;
  out["file_bytes"] = ckpt.file_bytes();
  std::map<std::string, std::map<std::string, int>> families;
  visit_families(ckpt, [&](const char* family, const WeightMatrix& m) { families[family][weight_format_label(m)]++; });
  ojson formats = ojson::object();
  for (const auto& [family, counts_by_format] : families) {
    ojson entry = ojson::object();
    for (const auto& [format, count] : counts_by_format) entry[format] = count;
    formats[family] = entry;
  }
  out["formats_per_family"] = formats;
  out["skipped_tensors"] = ckpt.skipped();
  out["warnings"] = ckpt.warnings();
  if (const GgufModelFiles* gguf = ckpt.gguf()) out["gguf"] = describe_gguf(*gguf);
  return out;
}

std::map<std::string, double> weight_difference(const Checkpoint& a, const Checkpoint& b) {
  std::map<std::string, std::vector<const WeightMatrix*>> lhs, rhs;
  visit_families(a, [&](const char* family, const WeightMatrix& m) { lhs[family].push_back(&m); });
  visit_families(b, [&](const char* family, const WeightMatrix& m) { rhs[family].push_back(&m); });
  std::map<std::string, double> out;
  for (const auto& [family, matrices] : lhs) {
    const auto& other = rhs[family];
    if (other.size() != matrices.size()) {
      out[family] = INFINITY;
      continue;
    }
    double diff = 0.0, ref = 0.0;
    for (size_t i = 0; i < matrices.size(); ++i) {
      const WeightMatrix& x = *matrices[i];
      const WeightMatrix& y = *other[i];
      std::vector<float> rx(static_cast<size_t>(x.cols)), ry(size_t(y.cols));
      // Sample rows so the report on a multi-GB checkpoint stays quick.
      int64_t step = std::max<int64_t>(1, x.rows / 64);
      for (int64_t r = 0; r < x.rows; r += step) {
        dequantize_row(x, r, rx.data());
        dequantize_row(y, r, ry.data());
        for (int64_t col = 0; col < x.cols; ++col) {
          double d = double(rx[size_t(col)]) - double(ry[size_t(col)]);
          diff += d * d;
          ref += double(rx[size_t(col)]) * double(rx[size_t(col)]);
        }
      }
    }
    out[family] = ref > 0 ? std::sqrt(diff / ref) : 0.0;
  }
  return out;
}

}  // namespace inkling
