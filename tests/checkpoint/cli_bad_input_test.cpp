// The CLI on bad input: every case must exit 2 with one "error: ..." line naming the problem,
// never crash (no signal, no "terminate called").
#include <gtest/gtest.h>

#include "checkpoint_test_util.h"
#include "io/safetensors.h"

namespace inkling {
namespace {

using namespace ckpt_test;

// The shard file (name) holding `tensor`, from the index.
std::string shard_of(const fs::path& dir, const std::string& tensor) {
  nlohmann::json index = read_json(dir / "model.safetensors.index.json");
  return index["weight_map"][tensor].get<std::string>();
}

// Rewrites the shard holding `tensor` in a clone, letting `mutate` change its spec and bytes.
void rewrite_tensor(const fs::path& dir, const std::string& tensor,
                    const std::function<void(TensorSpec&, std::vector<uint8_t>&)>& mutate) {
  fs::path shard = dir / shard_of(dir, tensor);
  fs::path temp = dir / "rewrite.tmp";
  {
    SafetensorsFile file = SafetensorsFile::open(shard);
    std::vector<TensorSpec> specs;
    std::vector<std::vector<uint8_t>> payloads;
    for (const TensorEntry& entry : file.entries()) {
      TensorView view = file.get(entry.name);
      TensorSpec spec{entry.name, entry.dtype, entry.shape};
      std::vector<uint8_t> bytes(view.data, view.data + view.nbytes);
      if (entry.name == tensor) mutate(spec, bytes);
      specs.push_back(spec);
      payloads.push_back(std::move(bytes));
    }
    size_t cursor = 0;
    write_safetensors(
        temp, specs,
        [&](const TensorSpec&, std::span<uint8_t> out) {
          const std::vector<uint8_t>& bytes = payloads[cursor++];
          ASSERT_EQ(out.size(), bytes.size());
          std::memcpy(out.data(), bytes.data(), bytes.size());
        },
        file.metadata());
  }
  fs::remove(shard);  // the symlink of the clone, never the cached original
  fs::rename(temp, shard);
}

fs::path bf16_clone(const std::string& label) { return clone_checkpoint(synth_tiny("original-bf16"), label); }

ProcessResult inspect(const fs::path& dir) { return run_inkling({"inspect", "-m", dir.string()}); }

// ---- the checkpoint directory ----

TEST(CliBadInput, UntouchedCloneInspectsFine) {
  fs::path dir = bf16_clone("clean");
  ProcessResult result = inspect(dir);
  EXPECT_EQ(result.exit_code, 0) << result.describe();
  EXPECT_TRUE(result.error_lines().empty()) << result.describe();
}

TEST(CliBadInput, NoConfigJson) {
  fs::path dir = bf16_clone("no_config");
  fs::remove(dir / "config.json");
  expect_clean_error(inspect(dir), {"config.json"});
  expect_clean_error(inspect(fresh_dir("empty")), {"config.json"});
}

TEST(CliBadInput, NotADirectory) {
  expect_clean_error(inspect(scratch_root() / "does_not_exist"), {"does_not_exist"});
}

TEST(CliBadInput, MalformedConfigJson) {
  fs::path dir = bf16_clone("bad_json");
  write_file(dir / "config.json", "{\"model_type\": \"inkling_mm_model\", ");
  expect_clean_error(inspect(dir), {"config.json"});
}

TEST(CliBadInput, OtherModelType) {
  fs::path dir = bf16_clone("llama");
  nlohmann::json config = read_json(dir / "config.json");
  config["model_type"] = "llama";
  write_json(dir / "config.json", config);
  expect_clean_error(inspect(dir), {"llama", "model_type"});
}

TEST(CliBadInput, OtherArchitecture) {
  fs::path dir = bf16_clone("arch");
  nlohmann::json config = read_json(dir / "config.json");
  config["architectures"] = {"Qwen3MoeForCausalLM"};
  write_json(dir / "config.json", config);
  expect_clean_error(inspect(dir), {"Qwen3MoeForCausalLM"});
}

TEST(CliBadInput, MissingHiddenSize) {
  fs::path dir = bf16_clone("no_hidden");
  nlohmann::json config = read_json(dir / "config.json");
  config["text_config"].erase("hidden_size");
  write_json(dir / "config.json", config);
  expect_clean_error(inspect(dir), {"hidden_size"});
}

TEST(CliBadInput, WrongFieldType) {
  fs::path dir = bf16_clone("field_type");
  nlohmann::json config = read_json(dir / "config.json");
  config["text_config"]["use_embed_norm"] = "yes";
  write_json(dir / "config.json", config);
  expect_clean_error(inspect(dir), {"config.json"});
}

TEST(CliBadInput, EmptyEosTokenList) {
  fs::path dir = bf16_clone("eos");
  nlohmann::json config = read_json(dir / "config.json");
  config["eos_token_id"] = nlohmann::json::array();
  write_json(dir / "config.json", config);
  expect_clean_error(inspect(dir), {"eos_token_id"});
}

TEST(CliBadInput, MissingShard) {
  fs::path dir = bf16_clone("missing_shard");
  std::vector<fs::path> shards = shard_files(dir);
  ASSERT_GE(shards.size(), 2u);
  std::string name = shards[1].filename().string();
  fs::remove(shards[1]);
  expect_clean_error(inspect(dir), {name});
}

TEST(CliBadInput, TruncatedShard) {
  fs::path dir = bf16_clone("truncated");
  std::vector<fs::path> shards = shard_files(dir);
  ASSERT_FALSE(shards.empty());
  fs::path shard = shards.back();
  materialize(shard);
  fs::resize_file(shard, fs::file_size(shard) / 2);
  expect_clean_error(inspect(dir), {shard.filename().string()});
  fs::resize_file(shard, 5);  // shorter than the 8-byte header length
  expect_clean_error(inspect(dir), {shard.filename().string()});
}

TEST(CliBadInput, MissingTensor) {
  fs::path dir = bf16_clone("missing_tensor");
  // Drop the tensor from both its shard and the index: a consistent store that lacks it.
  const std::string tensor = "model.llm.layers.2.mlp.gate.bias";
  std::string shard = shard_of(dir, tensor);
  fs::path path = dir / shard;
  fs::path temp = dir / "rewrite.tmp";
  {
    SafetensorsFile file = SafetensorsFile::open(path);
    std::vector<TensorSpec> specs;
    std::vector<TensorView> views;
    for (const TensorEntry& entry : file.entries())
      if (entry.name != tensor) {
        specs.push_back({entry.name, entry.dtype, entry.shape});
        views.push_back(file.get(entry.name));
      }
    size_t cursor = 0;
    write_safetensors(temp, specs, [&](const TensorSpec&, std::span<uint8_t> out) {
      std::memcpy(out.data(), views[cursor++].data, out.size());
    });
  }
  fs::remove(path);
  fs::rename(temp, path);
  nlohmann::json index = read_json(dir / "model.safetensors.index.json");
  index["weight_map"].erase(tensor);
  write_json(dir / "model.safetensors.index.json", index);
  expect_clean_error(inspect(dir), {"e_score_correction_bias", "missing"});
}

TEST(CliBadInput, WrongShapeFromConfig) {
  fs::path dir = bf16_clone("dense_width");
  nlohmann::json config = read_json(dir / "config.json");
  config["text_config"]["dense_intermediate_size"] = 96;  // w13_dn is [256, 64]
  write_json(dir / "config.json", config);
  expect_clean_error(inspect(dir), {"model.llm.layers.0.mlp.w13_dn.weight", "shape"});
}

TEST(CliBadInput, WrongShapeInShard) {
  fs::path dir = bf16_clone("wrong_shape");
  const std::string tensor = "model.llm.layers.1.attn.wq_du.weight";
  rewrite_tensor(dir, tensor, [](TensorSpec& spec, std::vector<uint8_t>&) {
    ASSERT_EQ(spec.shape.size(), 2u);
    spec.shape = {spec.shape[0] / 2, spec.shape[1] * 2};  // same bytes, wrong shape
  });
  expect_clean_error(inspect(dir), {tensor, "shape"});
}

TEST(CliBadInput, WrongDtypeOfAWeight) {
  fs::path dir = bf16_clone("wrong_dtype");
  const std::string tensor = "model.llm.layers.1.attn.wq_du.weight";
  rewrite_tensor(dir, tensor, [](TensorSpec& spec, std::vector<uint8_t>&) {
    ASSERT_EQ(spec.dtype, DType::BF16);
    spec.dtype = DType::I16;  // same size, no Inkling layout stores weights as I16
  });
  expect_clean_error(inspect(dir), {tensor, "I16"});
}

TEST(CliBadInput, WrongDtypeOfANormVector) {
  fs::path dir = bf16_clone("wrong_dtype_norm");
  const std::string tensor = "model.llm.layers.0.attn_norm.weight";
  rewrite_tensor(dir, tensor, [](TensorSpec& spec, std::vector<uint8_t>&) { spec.dtype = DType::I16; });
  expect_clean_error(inspect(dir), {tensor, "dtype"});
}

TEST(CliBadInput, UnknownQuantizationMode) {
  fs::path dir = bf16_clone("mxfp4");
  nlohmann::json config = read_json(dir / "config.json");
  config["quantization"] = {{"mode", "mxfp4"}, {"group_size", 32}, {"bits", 4}};
  write_json(dir / "config.json", config);
  expect_clean_error(inspect(dir), {"mxfp4"});
  config["quantization"] = {{"group_size", 64}, {"bits", 3}};
  write_json(dir / "config.json", config);
  expect_clean_error(inspect(dir), {"bits", "3"});
}

TEST(CliBadInput, PackedWeightsWithoutQuantizationEntry) {
  fs::path dir = clone_checkpoint(synth_tiny("mlx-4bit"), "mlx_noquant");
  nlohmann::json config = read_json(dir / "config.json");
  config.erase("quantization");
  config.erase("quantization_config");
  write_json(dir / "config.json", config);
  expect_clean_error(inspect(dir), {"quantization"});
}

// ---- synth / quantize arguments ----

TEST(CliBadInput, SynthBogusLayoutAndPreset) {
  fs::path out = fresh_dir("synth_bad");
  expect_clean_error(run_inkling({"synth", (out / "a").string(), "--layout", "bogus"}), {"bogus", "layout"});
  expect_clean_error(run_inkling({"synth", (out / "b").string(), "--preset", "bogus"}), {"bogus", "preset"});
}

TEST(CliBadInput, QuantizeBogusTargetAndQuantizedInput) {
  fs::path out = fresh_dir("quantize_bad");
  std::string input = synth_tiny("original-bf16").string();
  expect_clean_error(run_inkling({"quantize", "-m", input, "-o", (out / "a").string(), "--to", "bogus"}), {"bogus"});
  expect_clean_error(run_inkling({"quantize", "-m", input, "-o", (out / "b").string(), "--to", "original-bf16"}),
                     {"mlx-4bit"});
  expect_clean_error(run_inkling({"quantize", "-m", synth_tiny("mlx-4bit").string(), "-o", (out / "c").string(),
                                  "--to", "nvfp4"}),
                     {"already quantized"});
  expect_clean_error(run_inkling({"quantize", "-m", input, "-o", input, "--to", "mlx-4bit"}), {"differ"});
}

// ---- generate ----

ProcessResult generate(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"generate", "-m", synth_tiny("original-bf16").string(), "--print-ids"};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_inkling(args);
}

TEST(CliBadInput, GenerateWorksOnTheTinyCheckpoint) {
  ProcessResult result = generate({"--prompt-ids", "1,2,3", "-n", "3"});
  ASSERT_EQ(result.exit_code, 0) << result.describe();
  // The last stdout line holds the three generated ids.
  std::string out = result.out;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  std::string last = out.substr(out.rfind('\n') == std::string::npos ? 0 : out.rfind('\n') + 1);
  EXPECT_EQ(std::count(last.begin(), last.end(), ','), 2) << result.describe();
}

TEST(CliBadInput, GenerateTokenIdOutOfRange) {
  expect_clean_error(generate({"--prompt-ids", "1,999999", "-n", "4"}), {"999999", "range"});
  expect_clean_error(generate({"--prompt-ids", "-1", "-n", "4"}), {"-1"});
  // 201024 is the padded vocabulary size: the first id past it.
  expect_clean_error(generate({"--prompt-ids", "201024", "-n", "4"}), {"201024"});
}

TEST(CliBadInput, GenerateEmptyOrMalformedPromptIds) {
  expect_clean_error(generate({"--prompt-ids", "", "-n", "4"}), {"prompt"});
  expect_clean_error(generate({"--prompt-ids", "1,,2", "-n", "4"}), {"--prompt-ids"});
  expect_clean_error(generate({"--prompt-ids", "1,abc", "-n", "4"}), {"abc"});
  expect_clean_error(generate({"--prompt-ids", "99999999999", "-n", "4"}), {"99999999999"});
}

TEST(CliBadInput, GenerateNonPositiveTokenCount) {
  expect_clean_error(generate({"--prompt-ids", "1,2,3", "-n", "0"}), {"-n", "0"});
  expect_clean_error(generate({"--prompt-ids", "1,2,3", "-n", "-5"}), {"-5"});
}

TEST(CliBadInput, GenerateUnsupportedKvDtype) {
  expect_clean_error(generate({"--prompt-ids", "1,2,3", "-n", "4", "--kv-dtype", "f16"}), {"--kv-dtype", "f16"});
}

TEST(CliBadInput, GenerateThreadCountOutOfRange) {
  expect_clean_error(generate({"--prompt-ids", "1,2,3", "-n", "4", "-t", "9999"}), {"--threads", "9999"});
  expect_clean_error(generate({"--prompt-ids", "1,2,3", "-n", "4", "-t", "-2"}), {"--threads", "-2"});
}

TEST(CliBadInput, GenerateOnBrokenCheckpoint) {
  fs::path dir = bf16_clone("gen_broken");
  nlohmann::json config = read_json(dir / "config.json");
  config["model_type"] = "llama";
  write_json(dir / "config.json", config);
  expect_clean_error(run_inkling({"generate", "-m", dir.string(), "--prompt-ids", "1,2", "-n", "2"}), {"llama"});
}

}  // namespace
}  // namespace inkling
