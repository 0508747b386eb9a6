// `inkling inspect --json` on tiny synth checkpoints: layout, per-layer plan and parameter
// totals checked against counts computed here from config.json; peak RSS of a child process
// that opens a checkpoint stays near the checkpoint size (zero-copy mmap binding).
#include <gtest/gtest.h>

#include <cstdio>

#include "checkpoint_test_util.h"
#include "io/resident_memory.h"

namespace inkling {
namespace {

using namespace ckpt_test;
using nlohmann::json;

struct Expected {
  int64_t total = 0, active = 0;
  std::vector<bool> global, dense;
};

// Parameter counts from the raw text_config numbers (the synth configs: native spelling with
// local_layer_ids, or HF spelling with layer_types / mlp_layer_types).
Expected expected_from_config(const json& config) {
  const json& tc = config["text_config"];
  int64_t h = tc["hidden_size"], v = tc["vocab_size"], layers = tc["num_hidden_layers"];
  int64_t k = tc["sconv_kernel_size"], d_rel = tc["d_rel"], extent = tc["rel_extent"], window = tc["sliding_window_size"];
  int64_t routed = tc["n_routed_experts"], shared = tc["n_shared_experts"], active_experts = tc["num_experts_per_tok"];
  int64_t moe_width, dense_width;
  if (tc.contains("moe_intermediate_size")) {
    moe_width = tc["moe_intermediate_size"];
    dense_width = tc["intermediate_size"];
  } else {
    moe_width = tc["intermediate_size"];
    dense_width = tc["dense_intermediate_size"];
  }
  Expected e;
  for (int64_t i = 0; i < layers; ++i) {
    bool global;
    if (tc.contains("layer_types")) {
      global = tc["layer_types"][size_t(i)] == "hybrid";
    } else {
      global = true;
      for (const json& id : tc["local_layer_ids"]) global &= id.get<int64_t>() != i;
    }
    bool dense = tc.contains("mlp_layer_types") ? tc["mlp_layer_types"][size_t(i)] == "dense"
                                                : i < tc["dense_mlp_idx"].get<int64_t>();
    e.global.push_back(global);
    e.dense.push_back(dense);
  }
  e.total = 2 * v * h + 2 * h;                // embed, lm_head, final norm, embed norm
  e.active = h + v * h + 2 * h;               // one embedding row
  for (int64_t i = 0; i < layers; ++i) {
    bool global = e.global[size_t(i)];
    int64_t heads = global ? tc["num_attention_heads"].get<int64_t>() : tc["swa_num_attention_heads"].get<int64_t>();
    int64_t kv = global ? tc["num_key_value_heads"].get<int64_t>() : tc["swa_num_key_value_heads"].get<int64_t>();
    int64_t d = global ? tc["head_dim"].get<int64_t>() : tc["swa_head_dim"].get<int64_t>();
    int64_t r = global ? extent : window;
    int64_t attention = heads * d * h + 2 * kv * d * h + heads * d_rel * h + h * heads * d  // q, k, v, r, o
                        + 2 * d + 2 * kv * d * k + d_rel * r                                // q/k norm, k/v conv, rel
                        + 2 * h + 2 * h * k;                                                // layer norms, convs
    e.total += attention;
    e.active += attention;
    if (e.dense[size_t(i)]) {
      e.total += 3 * dense_width * h + 1;
      e.active += 3 * dense_width * h + 1;
    } else {
      int64_t router = (routed + shared) * h + routed + 1;
      int64_t expert = 3 * moe_width * h;
      e.total += router + routed * expert + shared * expert;
      e.active += router + active_experts * expert + shared * expert;
    }
  }
  return e;
}

class InspectJson : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(InspectJson, LayoutLayersAndParameterTotals) {
  const auto& [layout, reported_layout] = GetParam();
  const fs::path& dir = synth_tiny(layout);
  ProcessResult result = run_inkling({"inspect", "-m", dir.string(), "--json"});
  ASSERT_EQ(result.exit_code, 0) << result.describe();
  json info;
  ASSERT_NO_THROW(info = json::parse(result.out)) << result.out.substr(0, 2000);
  json config = read_json(dir / "config.json");
  Expected expected = expected_from_config(config);
  EXPECT_EQ(info["layout"], reported_layout);
  EXPECT_EQ(info["model_type"], "inkling_mm_model");
  const json& tc = config["text_config"];
  EXPECT_EQ(info["config"]["hidden_size"], tc["hidden_size"]);
  EXPECT_EQ(info["config"]["num_layers"], tc["num_hidden_layers"]);
  EXPECT_EQ(info["config"]["vocab_size"], tc["vocab_size"]);
  EXPECT_EQ(info["config"]["unpadded_vocab_size"], tc["unpadded_vocab_size"]);
  ASSERT_EQ(info["layers"].size(), expected.global.size());
  for (size_t i = 0; i < expected.global.size(); ++i) {
    const json& layer = info["layers"][i];
    EXPECT_EQ(layer["index"], i);
    EXPECT_EQ(layer["attention"], expected.global[i] ? "global" : "sliding") << i;
    EXPECT_EQ(layer["mlp"], expected.dense[i] ? "dense" : "moe") << i;
    EXPECT_EQ(layer["rel_extent"], expected.global[i] ? tc["rel_extent"] : tc["sliding_window_size"]) << i;
  }
  // Tiny preset plan: layer 3 global, layer 0 dense.
  EXPECT_EQ(expected.global, (std::vector<bool>{false, false, false, true}));
  EXPECT_EQ(expected.dense, (std::vector<bool>{true, false, false, false}));
  std::printf("[ measured ] %s: %lld parameters, %lld active per token\n", layout.c_str(),
              (long long)expected.total, (long long)expected.active);
  EXPECT_EQ(info["parameters"]["total"].get<int64_t>(), expected.total);
  EXPECT_EQ(info["parameters"]["active_per_token"].get<int64_t>(), expected.active);
  // Byte accounting: the tensors fit in the files.
  uint64_t tensor_bytes = 0;
  for (auto& [dtype, bytes] : info["bytes_per_dtype"].items()) tensor_bytes += bytes.get<uint64_t>();
  uint64_t file_bytes = 0;
  for (const fs::path& shard : shard_files(dir)) file_bytes += fs::file_size(shard);
  EXPECT_EQ(info["file_bytes"].get<uint64_t>(), file_bytes);
  EXPECT_LE(tensor_bytes, file_bytes);
  EXPECT_GT(tensor_bytes, file_bytes * 9 / 10);
  // Towers and the MTP head are reported as skipped.
  std::vector<std::string> skipped = info["skipped_tensors"];
  EXPECT_NE(std::find(skipped.begin(), skipped.end(), "model.visual.patch_embed.proj.weight"), skipped.end());
  EXPECT_NE(std::find(skipped.begin(), skipped.end(), "model.mtp.layers.0.input_layernorm.weight"), skipped.end());
  EXPECT_TRUE(info["warnings"].empty()) << info["warnings"].dump();
  // Formats per family: count matrices per format.
  const json& formats = info["formats_per_family"];
  int routed_matrices = 3 * 3 * tc["n_routed_experts"].get<int>();  // 3 MoE layers x gate/up/down
  if (layout == "nvfp4") {
    EXPECT_EQ(formats["routed_experts"]["nvfp4"], 2 * routed_matrices / 3);
    EXPECT_EQ(formats["routed_experts"]["bf16"], routed_matrices / 3);
    EXPECT_EQ(info["quantization"]["mode"], "nvfp4");
  } else if (layout == "mlx-4bit") {
    EXPECT_EQ(formats["routed_experts"]["mlx-affine"], routed_matrices);
    EXPECT_EQ(formats["dense_mlp"]["mlx-affine"], 3);
    EXPECT_EQ(formats["attention"]["bf16"], 5 * 4);
    EXPECT_EQ(info["quantization"]["bits"], 4);
    EXPECT_EQ(info["quantization"]["group_size"], 64);
  } else if (layout == "original-f32") {
    EXPECT_EQ(formats["routed_experts"]["f32"], routed_matrices);
    EXPECT_EQ(info["quantization"]["mode"], "none");
  } else {
    EXPECT_EQ(formats["routed_experts"]["bf16"], routed_matrices);
    EXPECT_EQ(formats["lm_head"]["bf16"], 1);
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, InspectJson,
                         ::testing::Values(std::make_pair(std::string("original-bf16"), std::string("original-bf16")),
                                           std::make_pair(std::string("original-f32"), std::string("original-f32")),
                                           std::make_pair(std::string("mlx-4bit"), std::string("mlx-4bit")),
                                           std::make_pair(std::string("nvfp4"), std::string("nvfp4"))),
                         [](const auto& info) {
                           std::string name = info.param.first;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST(Inspect, TextOutputNamesLayoutAndLayers) {
  ProcessResult result = run_inkling({"inspect", "-m", synth_tiny("original-bf16").string()});
  ASSERT_EQ(result.exit_code, 0) << result.describe();
  EXPECT_NE(result.out.find("original-bf16"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("global"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("sliding"), std::string::npos) << result.out;
}

// ---- peak RSS of a process that opens a checkpoint ----

constexpr double kBaselineBytes = 30e6;

uint64_t checkpoint_bytes(const fs::path& dir) {
  uint64_t bytes = 0;
  for (const fs::path& shard : shard_files(dir)) bytes += fs::file_size(shard);
  return bytes;
}

TEST(PeakRss, InspectStaysNearCheckpointSize) {
#ifdef INKLING_SANITIZED
  GTEST_SKIP() << "sanitizer shadow memory inflates RSS";
#endif
  const fs::path& dir = synth_tiny("original-bf16");
  uint64_t bytes = checkpoint_bytes(dir);
  bool via_time = false;
  ProcessResult result = run_inkling_measured({"inspect", "-m", dir.string(), "--json"}, &via_time);
  ASSERT_EQ(result.exit_code, 0) << result.describe();
  double peak = double(result.max_rss_kb) * 1024.0;
  double limit = 1.2 * double(bytes) + kBaselineBytes;
  std::printf("[ measured ] inspect: peak RSS %.1f MB, checkpoint %.1f MB, limit %.1f MB (%s)\n", peak / 1e6,
              double(bytes) / 1e6, limit / 1e6, via_time ? "/usr/bin/time -v" : "wait4");
  EXPECT_GT(peak, 0.0);
  EXPECT_LE(peak, limit);
}

TEST(PeakRss, GenerateStaysNearCheckpointSize) {
#ifdef INKLING_SANITIZED
  GTEST_SKIP() << "sanitizer shadow memory inflates RSS";
#endif
  // generate reads every weight (and lm_head in full), so the whole mapping may become resident;
  // the binding must still not copy it.
  const fs::path& dir = synth_tiny("original-bf16");
  uint64_t bytes = checkpoint_bytes(dir);
  bool via_time = false;
  ProcessResult result = run_inkling_measured(
      {"generate", "-m", dir.string(), "--prompt-ids", "1,2,3", "-n", "2", "--print-ids", "--ctx", "64"}, &via_time);
  ASSERT_EQ(result.exit_code, 0) << result.describe();
  double peak = double(result.max_rss_kb) * 1024.0;
  double limit = 1.2 * double(bytes) + kBaselineBytes;
  std::printf("[ measured ] generate: peak RSS %.1f MB, checkpoint %.1f MB, limit %.1f MB (%s)\n", peak / 1e6,
              double(bytes) / 1e6, limit / 1e6, via_time ? "/usr/bin/time -v" : "wait4");
  EXPECT_LE(peak, limit);
}

// The CLI copies the weights into huge pages unless --mmap is given; the tokens are the same.
TEST(CliWeights, MmapAndHugePagesGenerateTheSameTokens) {
  const fs::path& dir = synth_tiny("original-bf16");
  const std::vector<std::string> args = {"generate", "-m", dir.string(), "--prompt-ids", "5,6,7",
                                         "-n", "6", "--print-ids", "--ctx", "64"};
  ProcessResult copied = run_inkling(args);
  std::vector<std::string> mapped_args = args;
  mapped_args.push_back("--mmap");
  ProcessResult mapped = run_inkling(mapped_args);
  ASSERT_EQ(copied.exit_code, 0) << copied.describe();
  ASSERT_EQ(mapped.exit_code, 0) << mapped.describe();
  EXPECT_EQ(copied.out, mapped.out);
  EXPECT_EQ(mapped.err.find("copied"), std::string::npos) << mapped.err;
  if (huge_pages_available())
    EXPECT_NE(copied.err.find("GB copied"), std::string::npos) << copied.err;
  else
    EXPECT_NE(copied.err.find("transparent huge pages are"), std::string::npos) << copied.err;
}

}  // namespace
}  // namespace inkling
