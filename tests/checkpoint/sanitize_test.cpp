// sanitize_names: the seed's rules 1-7 as a name mapping, on hand-written key lists for each
// release layout and on the tensor names of real synth output; idempotence.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "checkpoint_test_util.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/sanitize.h"

namespace inkling {
namespace {

using namespace ckpt_test;

std::set<std::string> keys_of(const SanitizeResult& result) {
  std::set<std::string> out;
  for (const auto& [name, entry] : result.tensors) out.insert(name);
  return out;
}

const SanitizedEntry& entry(const SanitizeResult& result, const std::string& canonical) {
  auto it = result.tensors.find(canonical);
  if (it == result.tensors.end()) {
    static SanitizedEntry missing{"<missing>", RowSelect::All};
    ADD_FAILURE() << "no canonical tensor " << canonical;
    return missing;
  }
  return it->second;
}

// Sanitizing the canonical names again maps every one to itself.
void expect_idempotent(const SanitizeResult& first) {
  std::vector<std::string> canonical;
  for (const auto& [name, e] : first.tensors) canonical.push_back(name);
  SanitizeResult second = sanitize_names(canonical);
  EXPECT_EQ(keys_of(second), keys_of(first));
  EXPECT_TRUE(second.dropped.empty());
  EXPECT_TRUE(second.unknown.empty()) << (second.unknown.empty() ? "" : second.unknown[0]);
  for (const auto& [name, e] : second.tensors) {
    EXPECT_EQ(e.source, name);
    EXPECT_EQ(e.rows, RowSelect::All) << name;
  }
}

// The original-layout (bf16 / f32) keys of one dense and one MoE layer, plus the top level.
std::vector<std::string> original_keys(bool with_nvfp4_layer = false) {
  std::vector<std::string> keys = {"model.llm.embed.weight", "model.llm.embed_norm.weight", "model.llm.norm.weight",
                                   "model.llm.unembed.weight"};
  for (int i = 0; i < 2; ++i) {
    std::string p = "model.llm.layers." + std::to_string(i) + ".";
    for (const char* s : {"attn_norm.weight", "mlp_norm.weight", "attn_sconv.weight", "mlp_sconv.weight",
                          "attn.wq_du.weight", "attn.wk_dv.weight", "attn.wv_dv.weight", "attn.wr_du.weight",
                          "attn.wo_ud.weight", "attn.q_norm.weight", "attn.k_norm.weight", "attn.k_sconv.weight",
                          "attn.v_sconv.weight", "attn.rel_logits_proj.proj"})
      keys.push_back(p + s);
  }
  for (const char* s : {"mlp.w13_dn.weight", "mlp.w2_md.weight", "mlp.global_scale"})
    keys.push_back(std::string("model.llm.layers.0.") + s);
  for (const char* s : {"mlp.gate.weight", "mlp.gate.bias", "mlp.gate.global_scale", "mlp.experts.w13_weight",
                        "mlp.experts.w2_weight", "mlp.shared_experts.shared_w13_weight",
                        "mlp.shared_experts.shared_w2_weight"})
    keys.push_back(std::string("model.llm.layers.1.") + s);
  if (with_nvfp4_layer) {
    std::string p = "model.llm.layers.2.";
    for (const char* s : {"attn_norm.weight", "mlp.gate.weight", "mlp.gate.bias", "mlp.gate.global_scale",
                          "mlp.experts.w13_weight", "mlp.experts.w13_weight.scale", "mlp.experts.w13_weight.scale2",
                          "mlp.experts.w13_weight.input_amax", "mlp.experts.w2_weight", "mlp.experts.w2_weight.scale",
                          "mlp.experts.w2_weight.scale2", "mlp.experts.w2_weight.input_amax",
                          "mlp.experts.w13_weight.original_shape", "mlp.shared_experts.shared_w13_weight",
                          "mlp.shared_experts.shared_w2_weight"})
      keys.push_back(p + s);
  }
  return keys;
}

const std::vector<std::string> kSkippedKeys = {
    "model.mtp.layers.0.input_layernorm.weight", "model.visual.patch_embed.proj.weight",
    "model.audio.encoder.weight",                "model.audio.encoder.scales",
    "model.llm.training_args",                   "training_args.bin",
};

TEST(Sanitize, OriginalLayoutCanonicalKeySet) {
  SanitizeResult r = sanitize_names(original_keys());
  std::set<std::string> expected = {"model.embed_tokens.weight", "model.embed_norm.weight", "model.norm.weight",
                                    "lm_head.weight"};
  for (int i = 0; i < 2; ++i) {
    std::string p = "model.layers." + std::to_string(i) + ".";
    for (const char* s : {"input_layernorm.weight", "post_attention_layernorm.weight", "attn_sconv.conv.weight",
                          "mlp_sconv.conv.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                          "self_attn.v_proj.weight", "self_attn.r_proj.weight", "self_attn.o_proj.weight",
                          "self_attn.q_norm.weight", "self_attn.k_norm.weight", "self_attn.k_sconv.conv.weight",
                          "self_attn.v_sconv.conv.weight", "self_attn.rel_proj"})
      expected.insert(p + s);
  }
  for (const char* s : {"mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight", "mlp.global_scale"})
    expected.insert(std::string("model.layers.0.") + s);
  for (const char* s : {"mlp.gate_weight", "mlp.e_score_correction_bias", "mlp.global_scale",
                        "mlp.switch_mlp.gate_proj.weight", "mlp.switch_mlp.up_proj.weight",
                        "mlp.switch_mlp.down_proj.weight", "mlp.shared_experts.gate_proj.weight",
                        "mlp.shared_experts.up_proj.weight", "mlp.shared_experts.down_proj.weight"})
    expected.insert(std::string("model.layers.1.") + s);
  EXPECT_EQ(keys_of(r), expected);
  EXPECT_TRUE(r.dropped.empty());
  EXPECT_TRUE(r.unknown.empty());
}

TEST(Sanitize, OriginalLayoutSourcesAndRowSelection) {
  SanitizeResult r = sanitize_names(original_keys());
  // w13 interleave: gate = even rows, up = odd rows, for dense, routed and shared experts.
  struct Fused {
    const char* source;
    const char* gate;
    const char* up;
  };
  for (const Fused& f : {Fused{"model.llm.layers.0.mlp.w13_dn.weight", "model.layers.0.mlp.gate_proj.weight",
                               "model.layers.0.mlp.up_proj.weight"},
                         Fused{"model.llm.layers.1.mlp.experts.w13_weight",
                               "model.layers.1.mlp.switch_mlp.gate_proj.weight",
                               "model.layers.1.mlp.switch_mlp.up_proj.weight"},
                         Fused{"model.llm.layers.1.mlp.shared_experts.shared_w13_weight",
                               "model.layers.1.mlp.shared_experts.gate_proj.weight",
                               "model.layers.1.mlp.shared_experts.up_proj.weight"}}) {
    EXPECT_EQ(entry(r, f.gate).source, f.source);
    EXPECT_EQ(entry(r, f.gate).rows, RowSelect::Even) << f.gate;
    EXPECT_EQ(entry(r, f.up).source, f.source);
    EXPECT_EQ(entry(r, f.up).rows, RowSelect::Odd) << f.up;
  }
  std::map<std::string, std::string> plain = {
      {"model.embed_tokens.weight", "model.llm.embed.weight"},
      {"lm_head.weight", "model.llm.unembed.weight"},
      {"model.embed_norm.weight", "model.llm.embed_norm.weight"},
      {"model.norm.weight", "model.llm.norm.weight"},
      {"model.layers.0.mlp.down_proj.weight", "model.llm.layers.0.mlp.w2_md.weight"},
      {"model.layers.0.mlp.global_scale", "model.llm.layers.0.mlp.global_scale"},
      {"model.layers.1.mlp.switch_mlp.down_proj.weight", "model.llm.layers.1.mlp.experts.w2_weight"},
      {"model.layers.1.mlp.shared_experts.down_proj.weight", "model.llm.layers.1.mlp.shared_experts.shared_w2_weight"},
      // router names (rule 5)
      {"model.layers.1.mlp.gate_weight", "model.llm.layers.1.mlp.gate.weight"},
      {"model.layers.1.mlp.e_score_correction_bias", "model.llm.layers.1.mlp.gate.bias"},
      {"model.layers.1.mlp.global_scale", "model.llm.layers.1.mlp.gate.global_scale"},
      // conv names (rule 3)
      {"model.layers.1.attn_sconv.conv.weight", "model.llm.layers.1.attn_sconv.weight"},
      {"model.layers.1.mlp_sconv.conv.weight", "model.llm.layers.1.mlp_sconv.weight"},
      {"model.layers.1.self_attn.k_sconv.conv.weight", "model.llm.layers.1.attn.k_sconv.weight"},
      {"model.layers.1.self_attn.v_sconv.conv.weight", "model.llm.layers.1.attn.v_sconv.weight"},
      // attention (rule 3)
      {"model.layers.0.self_attn.q_proj.weight", "model.llm.layers.0.attn.wq_du.weight"},
      {"model.layers.0.self_attn.k_proj.weight", "model.llm.layers.0.attn.wk_dv.weight"},
      {"model.layers.0.self_attn.v_proj.weight", "model.llm.layers.0.attn.wv_dv.weight"},
      {"model.layers.0.self_attn.r_proj.weight", "model.llm.layers.0.attn.wr_du.weight"},
      {"model.layers.0.self_attn.o_proj.weight", "model.llm.layers.0.attn.wo_ud.weight"},
      {"model.layers.0.self_attn.rel_proj", "model.llm.layers.0.attn.rel_logits_proj.proj"},
      {"model.layers.0.input_layernorm.weight", "model.llm.layers.0.attn_norm.weight"},
      {"model.layers.0.post_attention_layernorm.weight", "model.llm.layers.0.mlp_norm.weight"},
  };
  for (const auto& [canonical, source] : plain) {
    EXPECT_EQ(entry(r, canonical).source, source) << canonical;
    EXPECT_EQ(entry(r, canonical).rows, RowSelect::All) << canonical;
  }
  expect_idempotent(r);
}

TEST(Sanitize, SkippedTowersMtpTrainingArgs) {
  std::vector<std::string> keys = original_keys();
  keys.insert(keys.end(), kSkippedKeys.begin(), kSkippedKeys.end());
  SanitizeResult r = sanitize_names(keys);
  EXPECT_EQ(keys_of(r), keys_of(sanitize_names(original_keys())));
  std::set<std::string> dropped(r.dropped.begin(), r.dropped.end());
  EXPECT_EQ(dropped, std::set<std::string>(kSkippedKeys.begin(), kSkippedKeys.end()));
  EXPECT_TRUE(r.unknown.empty());
  for (const std::string& key : kSkippedKeys) EXPECT_TRUE(is_dropped_key(key)) << key;
  EXPECT_FALSE(is_dropped_key("model.llm.embed.weight"));
}

TEST(Sanitize, UnknownKeysAreReportedNotBound) {
  SanitizeResult r = sanitize_names({"model.llm.layers.0.attn.wz_xx.weight", "something.else", "model.llm.embed.weight"});
  EXPECT_EQ(keys_of(r), (std::set<std::string>{"model.embed_tokens.weight"}));
  std::set<std::string> unknown(r.unknown.begin(), r.unknown.end());
  EXPECT_EQ(unknown, (std::set<std::string>{"model.llm.layers.0.attn.wz_xx.weight", "something.else"}));
}

TEST(Sanitize, Nvfp4Sidecars) {
  SanitizeResult r = sanitize_names(original_keys(/*with_nvfp4_layer=*/true));
  const std::string p = "model.layers.2.mlp.switch_mlp.";
  const std::string src = "model.llm.layers.2.mlp.experts.";
  // .scale -> .scales, de-interleaved like the codes.
  EXPECT_EQ(entry(r, p + "gate_proj.scales").source, src + "w13_weight.scale");
  EXPECT_EQ(entry(r, p + "gate_proj.scales").rows, RowSelect::Even);
  EXPECT_EQ(entry(r, p + "up_proj.scales").source, src + "w13_weight.scale");
  EXPECT_EQ(entry(r, p + "up_proj.scales").rows, RowSelect::Odd);
  EXPECT_EQ(entry(r, p + "down_proj.scales").source, src + "w2_weight.scale");
  EXPECT_EQ(entry(r, p + "down_proj.scales").rows, RowSelect::All);
  // .scale2 is per expert: the same vector for gate and up, All rows.
  for (const char* proj : {"gate_proj", "up_proj"}) {
    EXPECT_EQ(entry(r, p + proj + ".scale2").source, src + "w13_weight.scale2");
    EXPECT_EQ(entry(r, p + proj + ".scale2").rows, RowSelect::All);
  }
  EXPECT_EQ(entry(r, p + "down_proj.scale2").source, src + "w2_weight.scale2");
  EXPECT_EQ(entry(r, p + "gate_proj.weight").source, src + "w13_weight");
  EXPECT_EQ(entry(r, p + "gate_proj.weight").rows, RowSelect::Even);
  // input_amax and original_shape are dropped (rule 1).
  std::set<std::string> dropped(r.dropped.begin(), r.dropped.end());
  EXPECT_EQ(dropped, (std::set<std::string>{src + "w13_weight.input_amax", src + "w2_weight.input_amax",
                                            src + "w13_weight.original_shape"}));
  for (const auto& [name, e] : r.tensors) {
    EXPECT_EQ(name.find("input_amax"), std::string::npos) << name;
    EXPECT_EQ(name.find(".scale."), std::string::npos) << name;
    EXPECT_FALSE(name.size() >= 6 && name.compare(name.size() - 6, 6, ".scale") == 0) << name;
  }
  EXPECT_TRUE(r.unknown.empty()) << (r.unknown.empty() ? "" : r.unknown[0]);
  expect_idempotent(r);
}

TEST(Sanitize, PreconvertedMlxNames) {
  std::vector<std::string> keys = {"model.llm.embed.weight", "model.llm.unembed.weight", "model.audio.encoder.weight",
                                   "model.audio.encoder.scales", "model.audio.encoder.biases"};
  const std::string p = "model.llm.layers.1.";
  for (const char* proj : {"gate_proj", "up_proj", "down_proj"})
    for (const char* part : {"weight", "scales", "biases"}) {
      keys.push_back(p + "mlp.experts." + proj + "." + part);
      keys.push_back(p + "mlp.shared_experts." + proj + "." + part);
      keys.push_back("model.llm.layers.0.mlp." + std::string(proj) + "." + part);
    }
  keys.push_back(p + "mlp.gate.weight");
  keys.push_back(p + "mlp.gate.bias");
  keys.push_back(p + "mlp.gate.global_scale");
  keys.push_back("model.llm.layers.0.mlp.global_scale");
  keys.push_back(p + "attn.wq_du.weight");
  keys.push_back(p + "attn.wq_du.scales");
  keys.push_back(p + "attn.wq_du.biases");
  SanitizeResult r = sanitize_names(keys);
  const std::string q = "model.layers.1.";
  for (const char* proj : {"gate_proj", "up_proj", "down_proj"})
    for (const char* part : {"weight", "scales", "biases"}) {
      std::string suffix = std::string(proj) + "." + part;
      EXPECT_EQ(entry(r, q + "mlp.switch_mlp." + suffix).source, p + "mlp.experts." + suffix);
      EXPECT_EQ(entry(r, q + "mlp.switch_mlp." + suffix).rows, RowSelect::All);
      EXPECT_EQ(entry(r, q + "mlp.shared_experts." + suffix).source, p + "mlp.shared_experts." + suffix);
      EXPECT_EQ(entry(r, "model.layers.0.mlp." + suffix).source, "model.llm.layers.0.mlp." + suffix);
    }
  EXPECT_EQ(entry(r, q + "self_attn.q_proj.scales").source, p + "attn.wq_du.scales");
  EXPECT_EQ(entry(r, q + "self_attn.q_proj.biases").source, p + "attn.wq_du.biases");
  for (const auto& [name, e] : r.tensors) EXPECT_EQ(name.find("mlp.experts."), std::string::npos) << name;
  EXPECT_EQ(r.dropped.size(), 3u);
  EXPECT_TRUE(r.unknown.empty()) << (r.unknown.empty() ? "" : r.unknown[0]);
  expect_idempotent(r);
}

// ---- on real synth output ----

// The canonical names every layout must produce, computed from config.json by hand.
std::set<std::string> expected_canonical(const TextConfig& c, const std::string& layout) {
  std::set<std::string> out = {"model.embed_tokens.weight", "lm_head.weight", "model.embed_norm.weight",
                               "model.norm.weight"};
  int first_moe = -1;
  for (int i = 0; i < c.num_layers; ++i) {
    std::string p = "model.layers." + std::to_string(i) + ".";
    for (const char* s : {"input_layernorm.weight", "post_attention_layernorm.weight", "attn_sconv.conv.weight",
                          "mlp_sconv.conv.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                          "self_attn.v_proj.weight", "self_attn.r_proj.weight", "self_attn.o_proj.weight",
                          "self_attn.q_norm.weight", "self_attn.k_norm.weight", "self_attn.k_sconv.conv.weight",
                          "self_attn.v_sconv.conv.weight", "self_attn.rel_proj"})
      out.insert(p + s);
    std::vector<std::string> groups;
    if (c.layers[size_t(i)].dense_mlp) {
      out.insert(p + "mlp.global_scale");
      groups = {"mlp."};
    } else {
      if (first_moe < 0) first_moe = i;
      for (const char* s : {"mlp.gate_weight", "mlp.e_score_correction_bias", "mlp.global_scale"}) out.insert(p + s);
      groups = {"mlp.switch_mlp.", "mlp.shared_experts."};
    }
    for (const std::string& g : groups)
      for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
        out.insert(p + g + proj + ".weight");
        if (layout == "mlx-4bit" || layout == "mlx-8bit") {
          out.insert(p + g + proj + ".scales");
          out.insert(p + g + proj + ".biases");
        }
        if (layout == "nvfp4" && g == "mlp.switch_mlp." && i != first_moe) {
          out.insert(p + g + proj + ".scales");
          out.insert(p + g + proj + ".scale2");
        }
      }
  }
  return out;
}

class SanitizeSynth : public ::testing::TestWithParam<std::string> {};

TEST_P(SanitizeSynth, RealTensorNamesGiveTheCanonicalSet) {
  const fs::path& dir = synth_tiny(GetParam());
  TensorStore store = TensorStore::open_dir(dir);
  ModelConfig config = load_model_config(dir);
  SanitizeResult r = sanitize_names(store.names());
  EXPECT_EQ(keys_of(r), expected_canonical(config.text, GetParam()));
  EXPECT_TRUE(r.unknown.empty()) << (r.unknown.empty() ? "" : r.unknown[0]);
  // Every source exists in the store; the towers and MTP head are dropped.
  for (const auto& [name, e] : r.tensors) EXPECT_TRUE(store.contains(e.source)) << name << " <- " << e.source;
  std::set<std::string> dropped(r.dropped.begin(), r.dropped.end());
  for (const char* key : {"model.visual.patch_embed.proj.weight", "model.audio.encoder.weight",
                          "model.mtp.layers.0.input_layernorm.weight"})
    EXPECT_TRUE(dropped.count(key)) << key;
  for (const std::string& key : r.dropped) EXPECT_TRUE(is_dropped_key(key)) << key;
  size_t amax = std::count_if(r.dropped.begin(), r.dropped.end(),
                              [](const std::string& k) { return k.find("input_amax") != std::string::npos; });
  EXPECT_EQ(amax, GetParam() == "nvfp4" ? 4u : 0u);  // w13 + w2 of the two quantized MoE layers
  // Every store name is accounted for: bound, dropped or unknown.
  std::set<std::string> sources;
  for (const auto& [name, e] : r.tensors) sources.insert(e.source);
  for (const std::string& name : store.names()) EXPECT_TRUE(sources.count(name) || dropped.count(name)) << name;
  expect_idempotent(r);
}

INSTANTIATE_TEST_SUITE_P(Layouts, SanitizeSynth,
                         ::testing::Values("original-f32", "original-bf16", "nvfp4", "mlx-4bit", "mlx-8bit"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace inkling
