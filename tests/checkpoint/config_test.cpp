// config.json parsing: detection, text_config (layer plan, MLP width spellings, aliases,
// required fields) and the quantization entry (MLX affine, NVFP4 via hf_quant_config.json).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

#include "checkpoint_test_util.h"
#include "model/config.h"
#include "tensor/error.h"

namespace inkling {
namespace {

using nlohmann::json;
using namespace ckpt_test;

// A complete, small text_config in the native (Inkling-Small) spelling, written by hand.
json base_text_config(int layers = 6) {
  return json{{"hidden_size", 64},
              {"num_hidden_layers", layers},
              {"num_attention_heads", 4},
              {"num_key_value_heads", 1},
              {"head_dim", 16},
              {"swa_num_attention_heads", 8},
              {"swa_num_key_value_heads", 2},
              {"swa_head_dim", 8},
              {"d_rel", 4},
              {"rel_extent", 24},
              {"sliding_window_size", 16},
              {"sconv_kernel_size", 4},
              {"dense_mlp_idx", 1},
              {"intermediate_size", 64},
              {"dense_intermediate_size", 128},
              {"n_routed_experts", 8},
              {"num_experts_per_tok", 2},
              {"n_shared_experts", 2},
              {"route_scale", 8.0},
              {"logits_mup_width_multiplier", 4.0},
              {"vocab_size", 1000},
              {"unpadded_vocab_size", 900}};
}

json base_config(json text = base_text_config()) {
  return json{{"architectures", {"InklingForConditionalGeneration"}},
              {"model_type", "inkling_mm_model"},
              {"eos_token_id", 200006},
              {"vocab_size", text["vocab_size"]},
              {"text_config", text}};
}

std::set<int> global_layers(const TextConfig& c) {
  std::set<int> out;
  for (int i = 0; i < c.num_layers; ++i)
    if (!c.layers[size_t(i)].sliding) out.insert(i);
  return out;
}

std::set<int> dense_layers(const TextConfig& c) {
  std::set<int> out;
  for (int i = 0; i < c.num_layers; ++i)
    if (c.layers[size_t(i)].dense_mlp) out.insert(i);
  return out;
}

// Runs `fn`, expects an inkling::Error and returns its message.
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& error) {
    return error.what();
  } catch (const std::exception& error) {
    ADD_FAILURE() << "threw a non-inkling exception: " << error.what();
    return error.what();
  }
  ADD_FAILURE() << "no error thrown";
  return "";
}

// ---- layer classification (seed: layer_classification_layer_types_then_local_ids_then_modulo) ----

TEST(LayerClassification, ModuloDefaultGivesGlobalsEverySixth) {
  json tc = base_text_config(42);
  TextConfig c = parse_text_config(tc);
  ASSERT_EQ(c.layers.size(), 42u);
  EXPECT_EQ(global_layers(c), (std::set<int>{5, 11, 17, 23, 29, 35, 41}));
  tc["num_hidden_layers"] = 13;
  EXPECT_EQ(global_layers(parse_text_config(tc)), (std::set<int>{5, 11}));
}

TEST(LayerClassification, InklingSmallLocalLayerIds) {
  // Inkling-Small: local_layer_ids lists every layer except 5, 11, ..., 41.
  json tc = base_text_config(42);
  json local = json::array();
  for (int i = 0; i < 42; ++i)
    if ((i + 1) % 6 != 0) local.push_back(i);
  tc["local_layer_ids"] = local;
  EXPECT_EQ(global_layers(parse_text_config(tc)), (std::set<int>{5, 11, 17, 23, 29, 35, 41}));
}

TEST(LayerClassification, LocalLayerIdsWinOverModulo) {
  json tc = base_text_config(12);
  json local = json::array();
  for (int i = 0; i < 12; ++i)
    if (i != 0 && i != 7) local.push_back(i);  // globals 0 and 7: not the modulo pattern
  tc["local_layer_ids"] = local;
  EXPECT_EQ(global_layers(parse_text_config(tc)), (std::set<int>{0, 7}));
}

TEST(LayerClassification, LayerTypesWinOverLocalLayerIds) {
  json tc = base_text_config(12);
  json types = json::array();
  for (int i = 0; i < 12; ++i) types.push_back(i == 2 || i == 9 ? "hybrid" : "hybrid_sliding");
  tc["layer_types"] = types;
  json local = json::array();
  for (int i = 0; i < 12; ++i)
    if (i != 0) local.push_back(i);  // contradicts layer_types on purpose
  tc["local_layer_ids"] = local;
  EXPECT_EQ(global_layers(parse_text_config(tc)), (std::set<int>{2, 9}));
}

TEST(LayerClassification, LayerTypesOfWrongLengthOrUnknownKindAreErrors) {
  json tc = base_text_config(4);
  tc["layer_types"] = {"hybrid_sliding", "hybrid"};
  EXPECT_NE(error_of([&] { parse_text_config(tc); }).find("layer_types"), std::string::npos);
  tc["layer_types"] = {"hybrid_sliding", "hybrid", "banana", "hybrid"};
  std::string message = error_of([&] { parse_text_config(tc); });
  EXPECT_NE(message.find("banana"), std::string::npos) << message;
}

TEST(LayerClassification, LocalLayerIdOutOfRangeIsAnError) {
  json tc = base_text_config(4);
  tc["local_layer_ids"] = {0, 1, 7};
  std::string message = error_of([&] { parse_text_config(tc); });
  EXPECT_NE(message.find("local_layer_ids"), std::string::npos) << message;
  EXPECT_NE(message.find("7"), std::string::npos) << message;
}

TEST(LayerClassification, DenseMlpIdxAndMlpLayerTypesOverride) {
  json tc = base_text_config(6);
  tc["dense_mlp_idx"] = 2;
  EXPECT_EQ(dense_layers(parse_text_config(tc)), (std::set<int>{0, 1}));
  tc["mlp_layer_types"] = {"sparse", "dense", "sparse", "dense", "sparse", "sparse"};
  EXPECT_EQ(dense_layers(parse_text_config(tc)), (std::set<int>{1, 3}));
  tc.erase("mlp_layer_types");
  tc.erase("dense_mlp_idx");
  EXPECT_TRUE(dense_layers(parse_text_config(tc)).empty());
}

TEST(LayerClassification, PerLayerAttentionShapesFollowSlidingOrGlobal) {
  json tc = base_text_config(6);
  TextConfig c = parse_text_config(tc);
  for (int i = 0; i < 6; ++i) {
    const LayerSpec& s = c.layers[size_t(i)];
    bool global = i == 5;
    EXPECT_EQ(s.sliding, !global) << i;
    EXPECT_EQ(s.n_heads, global ? 4 : 8) << i;
    EXPECT_EQ(s.n_kv_heads, global ? 1 : 2) << i;
    EXPECT_EQ(s.head_dim, global ? 16 : 8) << i;
    EXPECT_EQ(s.rel_extent, global ? 24 : 16) << i;  // R = rel_extent on global, the window on sliding
  }
}

// ---- MLP widths (seed: mlp_width_resolution_accepts_both_spellings) ----

TEST(MlpWidth, HfSpelling) {
  json tc = base_text_config();
  tc.erase("dense_intermediate_size");
  tc["intermediate_size"] = 4096;
  tc["moe_intermediate_size"] = 512;
  TextConfig c = parse_text_config(tc);
  EXPECT_EQ(c.dense_width, 4096);
  EXPECT_EQ(c.moe_width, 512);
}

TEST(MlpWidth, NativeSpelling) {
  json tc = base_text_config();
  tc["intermediate_size"] = 2048;
  tc["dense_intermediate_size"] = 16384;
  TextConfig c = parse_text_config(tc);
  EXPECT_EQ(c.dense_width, 16384);
  EXPECT_EQ(c.moe_width, 2048);
}

TEST(MlpWidth, NeitherSecondFieldIsAnErrorNamingIt) {
  json tc = base_text_config();
  tc.erase("dense_intermediate_size");
  std::string message = error_of([&] { parse_text_config(tc); });
  EXPECT_NE(message.find("dense_intermediate_size"), std::string::npos) << message;
  EXPECT_NE(message.find("moe_intermediate_size"), std::string::npos) << message;
}

TEST(MlpWidth, MissingIntermediateSizeIsAnErrorNamingIt) {
  json tc = base_text_config();
  tc.erase("intermediate_size");
  tc["moe_intermediate_size"] = 64;
  std::string message = error_of([&] { parse_text_config(tc); });
  EXPECT_NE(message.find("intermediate_size"), std::string::npos) << message;
}

// ---- detection ----

TEST(Detection, BothModelTypeSpellings) {
  for (const char* type : {"inkling_mm_model", "inkling"}) {
    json config = base_config();
    config["model_type"] = type;
    ModelConfig m = parse_model_config(config);
    EXPECT_EQ(m.model_type, type);
    EXPECT_EQ(m.text.hidden_size, 64);
    EXPECT_EQ(m.text.num_layers, 6);
  }
}

TEST(Detection, TextOnlyConfigWithFieldsAtTopLevel) {
  json config = base_text_config();
  config["model_type"] = "inkling";
  ModelConfig m = parse_model_config(config);
  EXPECT_EQ(m.text.hidden_size, 64);
  EXPECT_EQ(m.text.dense_width, 128);
}

TEST(Detection, OtherModelTypeIsAnErrorNamingIt) {
  json config = base_config();
  config["model_type"] = "llama";
  std::string message = error_of([&] { parse_model_config(config); });
  EXPECT_NE(message.find("llama"), std::string::npos) << message;
  config.erase("model_type");
  message = error_of([&] { parse_model_config(config); });
  EXPECT_NE(message.find("model_type"), std::string::npos) << message;
}

TEST(Detection, ForeignArchitectureIsAnError) {
  json config = base_config();
  config["architectures"] = {"LlamaForCausalLM"};
  std::string message = error_of([&] { parse_model_config(config); });
  EXPECT_NE(message.find("LlamaForCausalLM"), std::string::npos) << message;
}

TEST(Detection, TopLevelFieldsAndDefaults) {
  json config = base_config();
  ModelConfig m = parse_model_config(config);
  EXPECT_EQ(m.eos_token_id, 200006);
  EXPECT_EQ(m.image_token_id, 200054);
  EXPECT_EQ(m.audio_token_id, 200053);
  EXPECT_EQ(m.vocab_size, 1000);
  EXPECT_EQ(m.text.unpadded_vocab_size, 900);
  EXPECT_EQ(m.quantization.mode, QuantMode::None);
  config["eos_token_id"] = {200006, 200010};
  EXPECT_EQ(parse_model_config(config).eos_token_id, 200006);
  config["vocab_size"] = 2000;
  std::string message = error_of([&] { parse_model_config(config); });
  EXPECT_NE(message.find("vocab_size"), std::string::npos) << message;
}

// An empty eos_token_id list must be a clean error, not an out-of-bounds read. Run in a child
// process (a crash there fails this test instead of the whole binary).
TEST(Detection, EmptyEosTokenListIsAnError) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_EXIT(
      {
        json config = base_config();
        config["eos_token_id"] = json::array();
        int code = 3;  // no exception
        try {
          parse_model_config(config);
        } catch (const Error& error) {
          code = std::string(error.what()).find("eos_token_id") != std::string::npos ? 0 : 4;
        } catch (...) {
          code = 5;
        }
        std::fflush(nullptr);
        std::_Exit(code);
      },
      ::testing::ExitedWithCode(0), "");
}

// ---- aliases and required fields ----

TEST(TextConfigFields, ConvKernelAlias) {
  json tc = base_text_config();
  tc.erase("sconv_kernel_size");
  EXPECT_EQ(parse_text_config(tc).conv_kernel, 4);  // default
  tc["conv_kernel_size"] = 3;
  EXPECT_EQ(parse_text_config(tc).conv_kernel, 3);
  tc["sconv_kernel_size"] = 3;
  EXPECT_EQ(parse_text_config(tc).conv_kernel, 3);
  tc["sconv_kernel_size"] = 5;
  std::string message = error_of([&] { parse_text_config(tc); });
  EXPECT_NE(message.find("sconv_kernel_size"), std::string::npos) << message;
  EXPECT_NE(message.find("conv_kernel_size"), std::string::npos) << message;
}

TEST(TextConfigFields, MissingRequiredFieldsAreNamed) {
  for (const char* name : {"hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "d_rel",
                           "rel_extent", "vocab_size"}) {
    json config = base_config();
    config["text_config"].erase(name);
    config.erase("vocab_size");
    std::string message = error_of([&] { parse_model_config(config); });
    EXPECT_NE(message.find(name), std::string::npos) << name << ": " << message;
  }
}

TEST(TextConfigFields, WrongTypeAndNonPositiveValuesAreNamed) {
  json tc = base_text_config();
  tc["hidden_size"] = "64";
  std::string message = error_of([&] { parse_text_config(tc); });
  EXPECT_NE(message.find("hidden_size"), std::string::npos) << message;
  tc["hidden_size"] = 0;
  message = error_of([&] { parse_text_config(tc); });
  EXPECT_NE(message.find("hidden_size"), std::string::npos) << message;
  tc = base_text_config();
  tc["num_experts_per_tok"] = 9;  // more than the 8 routed experts
  message = error_of([&] { parse_text_config(tc); });
  EXPECT_NE(message.find("num_experts_per_tok"), std::string::npos) << message;
  tc = base_text_config();
  tc["num_key_value_heads"] = 3;  // 4 heads are not a multiple of 3
  EXPECT_FALSE(error_of([&] { parse_text_config(tc); }).empty());
}

TEST(TextConfigFields, RealInklingSmallValues) {
  json tc = {{"hidden_size", 4096},        {"num_hidden_layers", 42},          {"num_attention_heads", 32},
             {"num_key_value_heads", 8},   {"swa_num_attention_heads", 32},    {"swa_num_key_value_heads", 8},
             {"head_dim", 128},            {"d_rel", 16},                      {"rel_extent", 1024},
             {"sliding_window_size", 512}, {"dense_mlp_idx", 2},               {"intermediate_size", 2048},
             {"dense_intermediate_size", 16384}, {"n_routed_experts", 256},   {"num_experts_per_tok", 6},
             {"n_shared_experts", 2},      {"route_scale", 8.0},               {"logits_mup_width_multiplier", 16.0},
             {"log_scaling_n_floor", 128000}, {"log_scaling_alpha", 0.1},      {"rms_norm_eps", 1e-6},
             {"vocab_size", 201024},       {"unpadded_vocab_size", 200058},    {"sconv_kernel_size", 4},
             {"model_max_length", 1048576}};
  TextConfig c = parse_text_config(tc);
  EXPECT_EQ(global_layers(c), (std::set<int>{5, 11, 17, 23, 29, 35, 41}));
  EXPECT_EQ(dense_layers(c), (std::set<int>{0, 1}));
  EXPECT_EQ(c.dense_width, 16384);
  EXPECT_EQ(c.moe_width, 2048);
  EXPECT_EQ(c.layers[5].rel_extent, 1024);
  EXPECT_EQ(c.layers[4].rel_extent, 512);
  ASSERT_TRUE(c.log_scaling_n_floor.has_value());
  EXPECT_EQ(*c.log_scaling_n_floor, 128000);
  EXPECT_FLOAT_EQ(c.mup_width_multiplier, 16.0f);
  EXPECT_FLOAT_EQ(c.route_scale, 8.0f);
  EXPECT_EQ(c.unpadded_vocab_size, 200058);
  EXPECT_EQ(c.max_position, 1048576);
}

// ---- quantization ----

TEST(Quantization, MlxAffineGroup64Bits4) {
  json config = base_config();
  config["quantization"] = {{"group_size", 64}, {"bits", 4}, {"recipe", "experts_only"}};
  ModelConfig m = parse_model_config(config);
  EXPECT_EQ(m.quantization.mode, QuantMode::Affine);
  EXPECT_EQ(m.quantization.group_size, 64);
  EXPECT_EQ(m.quantization.bits, 4);
  EXPECT_EQ(m.quantization.recipe, "experts_only");
  config.erase("quantization");
  config["quantization_config"] = {{"group_size", 32}, {"bits", 8}};
  m = parse_model_config(config);
  EXPECT_EQ(m.quantization.mode, QuantMode::Affine);
  EXPECT_EQ(m.quantization.group_size, 32);
  EXPECT_EQ(m.quantization.bits, 8);
}

TEST(Quantization, HfQuantConfigNvfp4IsPromotedWhenConfigHasNone) {
  json config = base_config();
  json hf_quant = {{"producer", {{"name", "modelopt"}}}, {"quantization", {{"quant_algo", "NVFP4"}}}};
  ModelConfig m = parse_model_config(config, &hf_quant);
  EXPECT_EQ(m.quantization.mode, QuantMode::NvFp4);
  EXPECT_EQ(m.quantization.group_size, 16);
  EXPECT_EQ(m.quantization.bits, 4);
  EXPECT_NE(m.quantization.source.find("hf_quant_config.json"), std::string::npos) << m.quantization.source;
  // config.json's own entry wins over hf_quant_config.json.
  config["quantization"] = {{"group_size", 64}, {"bits", 4}};
  EXPECT_EQ(parse_model_config(config, &hf_quant).quantization.mode, QuantMode::Affine);
}

TEST(Quantization, LoadModelConfigReadsHfQuantConfigFile) {
  fs::path dir = fresh_dir("config_hfq");
  write_json(dir / "config.json", base_config());
  EXPECT_EQ(load_model_config(dir).quantization.mode, QuantMode::None);
  write_json(dir / "hf_quant_config.json", {{"quantization", {{"quant_algo", "NVFP4"}, {"group_size", 16}}}});
  ModelConfig m = load_model_config(dir);
  EXPECT_EQ(m.quantization.mode, QuantMode::NvFp4);
  EXPECT_EQ(m.quantization.group_size, 16);
}

TEST(Quantization, UnknownModesAreErrorsNamingThem) {
  struct Case {
    json entry;
    std::string keyword;
  };
  std::vector<Case> cases = {
      {{{"mode", "mxfp4"}, {"group_size", 32}, {"bits", 4}}, "mxfp4"},
      {{{"group_size", 64}, {"bits", 3}}, "3"},
      {{{"group_size", 48}, {"bits", 4}}, "48"},
      {{{"quant_algo", "FP8"}}, "FP8"},
      {{{"quant_algo", "NVFP4"}, {"group_size", 32}}, "32"},
      {{{"quant_method", "bitsandbytes"}}, "bitsandbytes"},
      {{{"mode", "affine"}}, "bits"},
  };
  for (const Case& c : cases) {
    json config = base_config();
    config["quantization"] = c.entry;
    std::string message = error_of([&] { parse_model_config(config); });
    EXPECT_NE(message.find(c.keyword), std::string::npos) << c.entry.dump() << " -> " << message;
  }
}

// A GPTQ / AWQ config also carries bits and group_size; it must not be taken for MLX affine.
TEST(Quantization, ForeignQuantMethodWithBitsIsNotAffine) {
  for (const char* method : {"gptq", "awq"}) {
    json config = base_config();
    config["quantization_config"] = {{"quant_method", method}, {"bits", 4}, {"group_size", 128}};
    std::string message = error_of([&] { parse_model_config(config); });
    EXPECT_NE(message.find(method), std::string::npos) << method << " -> " << message;
  }
}

// ---- load_model_config ----

TEST(LoadModelConfig, MissingOrInvalidFilesAreNamed) {
  fs::path dir = fresh_dir("config_load");
  std::string message = error_of([&] { load_model_config(dir); });
  EXPECT_NE(message.find("config.json"), std::string::npos) << message;
  write_file(dir / "config.json", "{ \"model_type\": ");
  message = error_of([&] { load_model_config(dir); });
  EXPECT_NE(message.find("config.json"), std::string::npos) << message;
  // A field of the wrong JSON type becomes an inkling::Error too.
  json config = base_config();
  config["text_config"]["use_embed_norm"] = "yes";
  write_json(dir / "config.json", config);
  message = error_of([&] { load_model_config(dir); });
  EXPECT_NE(message.find("config.json"), std::string::npos) << message;
}

// ---- issue 21: integers from an untrusted config are range-checked, never narrowed blindly ----

TEST(ConfigHardening, IntegersAreRangeChecked) {
  struct Case {
    const char* field;
    json value;
    const char* expected;
  };
  for (const Case& c : std::vector<Case>{
           {"num_hidden_layers", 1e9, "text_config.num_hidden_layers is 1000000000, outside 1..4096"},
           {"num_hidden_layers", (int64_t{1} << 32) + 4, "outside 1..4096"},
           {"hidden_size", (int64_t{1} << 32) + 64, "text_config.hidden_size is 4294967360, outside"},
           {"model_max_length", -1, "text_config.model_max_length is -1, outside 1.."},
           {"vocab_size", 1.5, "text_config.vocab_size must be an integer, got 1.5"},
           {"vocab_size", 9e66, "must be an integer"},
           {"n_routed_experts", 1e12, "outside 0..65536"},
           {"vocab_size", uint64_t{18446744073709551615u}, "above its maximum"},
       }) {
    json config = base_config();
    config["text_config"][c.field] = c.value;
    std::string message = error_of([&] { parse_model_config(config); });
    EXPECT_NE(message.find(c.expected), std::string::npos) << c.field << " = " << c.value.dump() << ": " << message;
  }
}

// Found by fuzz_config: a zero key/value head count on the sliding layers divided by zero.
TEST(ConfigHardening, SlidingHeadCountsMustBePositive) {
  for (const char* field : {"swa_num_key_value_heads", "swa_num_attention_heads", "swa_head_dim"}) {
    json config = base_config();
    config["text_config"][field] = 0;
    std::string message = error_of([&] { parse_model_config(config); });
    EXPECT_NE(message.find(std::string("text_config.") + field + " must be positive, got 0"), std::string::npos)
        << message;
  }
}

TEST(ConfigHardening, TokenIdsMustBeIntegersInRange) {
  for (json eos : {json(9e66), json(-5), json({9e66}), json("200006")}) {
    json config = base_config();
    config["eos_token_id"] = eos;
    std::string message = error_of([&] { parse_model_config(config); });
    EXPECT_NE(message.find("eos_token_id"), std::string::npos) << eos.dump() << ": " << message;
  }
  json config = base_config();
  config["eos_token_id"] = 200006.0;  // an integral float is an integer
  EXPECT_EQ(parse_model_config(config).eos_token_id, 200006);
}

TEST(ConfigHardening, OnlyRegularFilesOfBoundedSizeAreRead) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "config_devzero";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::filesystem::create_symlink("/dev/zero", dir / "config.json");
  std::string message = error_of([&] { load_model_config(dir); });
  EXPECT_NE(message.find("is a character device, not a regular file"), std::string::npos) << message;
  std::filesystem::remove(dir / "config.json");
  {
    std::ofstream big(dir / "config.json");
    big << std::string((16 << 20) + 1, ' ');
  }
  message = error_of([&] { load_model_config(dir); });
  EXPECT_NE(message.find("over the limit of 16 MiB for a config.json"), std::string::npos) << message;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace inkling
