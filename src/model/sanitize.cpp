#include "model/sanitize.h"

#include <regex>
#include <utility>

namespace inkling {

namespace {

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.compare(0, prefix.size(), prefix) == 0;
}
bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Renames inside one layer (the part after "model.layers.{i}."). Returns pairs of
// (canonical suffix, row selection); empty when the suffix is not recognised.
std::vector<std::pair<std::string, RowSelect>> rename_layer_suffix(const std::string& s) {
  using P = std::pair<std::string, RowSelect>;
  static const std::vector<std::pair<std::string, std::string>> kPrefixRenames = {
      {"attn.wq_du.", "self_attn.q_proj."},
      {"attn.wk_dv.", "self_attn.k_proj."},
      {"attn.wv_dv.", "self_attn.v_proj."},
      {"attn.wr_du.", "self_attn.r_proj."},
      {"attn.wo_ud.", "self_attn.o_proj."},
      {"attn.q_norm.", "self_attn.q_norm."},
      {"attn.k_norm.", "self_attn.k_norm."},
      {"attn_norm.", "input_layernorm."},
      {"mlp_norm.", "post_attention_layernorm."},
      {"mlp.w2_md.", "mlp.down_proj."},
      {"mlp.experts.w2_weight", "mlp.switch_mlp.down_proj.weight"},
      {"mlp.shared_experts.shared_w2_weight", "mlp.shared_experts.down_proj.weight"},
      {"mlp.experts.gate_proj.", "mlp.switch_mlp.gate_proj."},
      {"mlp.experts.up_proj.", "mlp.switch_mlp.up_proj."},
      {"mlp.experts.down_proj.", "mlp.switch_mlp.down_proj."},
  };
  static const std::map<std::string, std::string> kExact = {
      {"attn.rel_logits_proj.proj", "self_attn.rel_proj"},
      {"attn.k_sconv.weight", "self_attn.k_sconv.conv.weight"},
      {"attn.v_sconv.weight", "self_attn.v_sconv.conv.weight"},
      {"attn_sconv.weight", "attn_sconv.conv.weight"},
      {"mlp_sconv.weight", "mlp_sconv.conv.weight"},
      {"mlp.gate.weight", "mlp.gate_weight"},
      {"mlp.gate.bias", "mlp.e_score_correction_bias"},
      {"mlp.gate.global_scale", "mlp.global_scale"},
  };
  if (auto it = kExact.find(s); it != kExact.end()) return {P{it->second, RowSelect::All}};
  // Row-interleaved fused gate/up tensors (rules 4, 6, 7), with their NVFP4 sidecars.
  static const std::vector<std::pair<std::string, std::string>> kInterleaved = {
      {"mlp.w13_dn.", "mlp."},
      {"mlp.experts.w13_weight", "mlp.switch_mlp."},
      {"mlp.shared_experts.shared_w13_weight", "mlp.shared_experts."},
  };
  for (const auto& [from, to] : kInterleaved) {
    if (!starts_with(s, from)) continue;
    std::string tail = s.substr(from.size());  // "weight", ".scale", ".scale2", "" ...
    if (!tail.empty() && tail[0] == '.') tail = tail.substr(1);
    if (tail.empty()) tail = "weight";
    if (tail == "scale") tail = "scales";
    if (tail == "scale2") return {P{to + "gate_proj.scale2", RowSelect::All}, P{to + "up_proj.scale2", RowSelect::All}};
    return {P{to + "gate_proj." + tail, RowSelect::Even}, P{to + "up_proj." + tail, RowSelect::Odd}};
  }
  for (const auto& [from, to] : kPrefixRenames) {
    if (!starts_with(s, from)) continue;
    std::string renamed = to + s.substr(from.size());
    // ModelOpt spells the block scales ".scale"; canonical is ".scales" as in MLX.
    if (ends_with(renamed, ".weight.scale")) renamed = renamed.substr(0, renamed.size() - 13) + ".scales";
    else if (ends_with(renamed, ".weight.scale2")) renamed = renamed.substr(0, renamed.size() - 14) + ".scale2";
    return {P{renamed, RowSelect::All}};
  }
  // Already canonical (second application of sanitize) or MLX names that need no rename.
  static const std::regex kCanonical(
      R"((self_attn\.(q|k|v|r|o)_proj|mlp\.(gate|up|down)_proj|mlp\.switch_mlp\.(gate|up|down)_proj|mlp\.shared_experts\.(gate|up|down)_proj)\.(weight|scales|biases|scale2)|self_attn\.(q_norm|k_norm)\.weight|self_attn\.rel_proj|self_attn\.(k|v)_sconv\.conv\.weight|(attn|mlp)_sconv\.conv\.weight|(input|post_attention)_layernorm\.weight|mlp\.(gate_weight|e_score_correction_bias|global_scale))");
  if (std::regex_match(s, kCanonical)) return {P{s, RowSelect::All}};
  return {};
}

}  // namespace

bool is_dropped_key(const std::string& key) {
  return starts_with(key, "model.mtp.") || starts_with(key, "model.visual.") ||
         starts_with(key, "model.audio.") || starts_with(key, "mtp.") ||
         key.find("training_args") != std::string::npos || ends_with(key, ".input_amax") ||
         ends_with(key, ".original_shape");
}

SanitizeResult sanitize_names(const std::vector<std::string>& keys) {
  static const std::map<std::string, std::string> kTopLevel = {
      {"model.llm.embed.weight", "model.embed_tokens.weight"},
      {"model.llm.unembed.weight", "lm_head.weight"},
      {"model.llm.embed_norm.weight", "model.embed_norm.weight"},
      {"model.llm.norm.weight", "model.norm.weight"},
      {"model.embed_tokens.weight", "model.embed_tokens.weight"},
      {"lm_head.weight", "lm_head.weight"},
      {"model.embed_norm.weight", "model.embed_norm.weight"},
      {"model.norm.weight", "model.norm.weight"},
  };
  static const std::regex kLayer(R"((model\.llm\.layers|model\.layers)\.(\d+)\.(.+))");
  SanitizeResult result;
  for (const std::string& key : keys) {
    if (is_dropped_key(key)) {
      result.dropped.push_back(key);
      continue;
    }
    if (auto it = kTopLevel.find(key); it != kTopLevel.end()) {
      result.tensors[it->second] = {key, RowSelect::All};
      continue;
    }
    std::smatch match;
    if (std::regex_match(key, match, kLayer)) {
      std::string prefix = "model.layers." + match[2].str() + ".";
      auto renamed = rename_layer_suffix(match[3].str());
      if (!renamed.empty()) {
        for (const auto& [suffix, rows] : renamed) result.tensors[prefix + suffix] = {key, rows};
        continue;
      }
    }
    result.unknown.push_back(key);
  }
  return result;
}

}  // namespace inkling
