#include "model/inspect.h"

#include <charconv>
#include <cstdlib>

#include <cmath>
#include <map>

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
