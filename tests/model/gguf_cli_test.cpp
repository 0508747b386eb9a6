// The inkling binary on a GGUF file alone in its directory: the tokenizer and chat template come
// from the file's metadata, and the text commands give what they give on the checkpoint the
// file was written from.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../checkpoint/checkpoint_test_util.h"
#include "gguf_model_writer.h"
#include "model_fixture.h"

namespace inkling {
namespace {

namespace fs = std::filesystem;
using ckpt_test::ProcessResult;
using ckpt_test::run_inkling;

// A directory holding nothing but the tiny f32 checkpoint written as one GGUF file.
fs::path lone_gguf(const std::string& name, const testing::GgufModelOptions& options = {}) {
  const fs::path dir = ckpt_test::scratch_root() / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path file = testing::write_gguf_model(testing::open_tiny("original-f32"), dir / "tiny.gguf", options);
  size_t entries = 0;
  for (const auto& entry : fs::directory_iterator(dir)) entries += entry.is_regular_file();
  EXPECT_EQ(entries, 1u) << dir << " should hold only the .gguf file";
  return file;
}

std::string described(const ProcessResult& r) { return "exit " + std::to_string(r.exit_code) + "\nstderr: " + r.err; }

// "prompt: N tokens" from generate's statistics line ("" when absent).
std::string prompt_size(const std::string& err) {
  const size_t from = err.find("prompt: ");
  if (from == std::string::npos) return "";
  return err.substr(from, err.find(',', from) - from);
}

TEST(GgufCli, GenerateChatWithOnlyTheGgufFile) {
  const fs::path file = lone_gguf("chat");
  const fs::path checkpoint = testing::tiny_checkpoint("original-f32");
  auto chat = [](const fs::path& model) {
    return run_inkling({"generate", "-m", model.string(), "--chat", "-p", "Hello, who are you?", "--system",
                        "Be brief.", "-n", "8", "--temp", "0", "--show-reasoning", "--print-ids"});
  };
  const ProcessResult from_gguf = chat(file);
  ASSERT_EQ(from_gguf.exit_code, 0) << described(from_gguf);
  const ProcessResult from_checkpoint = chat(checkpoint);
  ASSERT_EQ(from_checkpoint.exit_code, 0) << described(from_checkpoint);
  // Same weights (F32), same template and tokenizer: the same prompt and the same greedy tokens.
  EXPECT_FALSE(from_gguf.out.empty());
  EXPECT_EQ(from_gguf.out, from_checkpoint.out);
  ASSERT_NE(prompt_size(from_gguf.err), "") << from_gguf.err;
  EXPECT_EQ(prompt_size(from_gguf.err), prompt_size(from_checkpoint.err));

  const std::string text = "<|message_user|>Grüße, 世界! 12345<|end_message|>";
  const ProcessResult ids_gguf = run_inkling({"tokenize", "-m", file.string(), text});
  const ProcessResult ids_checkpoint = run_inkling({"tokenize", "-m", checkpoint.string(), text});
  ASSERT_EQ(ids_gguf.exit_code, 0) << described(ids_gguf);
  EXPECT_EQ(ids_gguf.out, ids_checkpoint.out);
  EXPECT_EQ(ids_gguf.out.rfind("200000,", 0), 0u) << ids_gguf.out;
}

TEST(GgufCli, AGgufWithoutVocabularySaysWhatIsMissing) {
  testing::GgufModelOptions options;
  options.vocabulary = false;
  const fs::path file = lone_gguf("no_vocabulary", options);
  const ProcessResult r = run_inkling({"generate", "-m", file.string(), "--chat", "-p", "hi", "-n", "2"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("without a vocabulary in its metadata (tokenizer.ggml.tokens)"), std::string::npos) << r.err;
  // Token ids still work without one.
  const ProcessResult ids = run_inkling({"generate", "-m", file.string(), "--prompt-ids", "1,2,3", "-n", "2", "--temp", "0"});
  EXPECT_EQ(ids.exit_code, 0) << described(ids);
}

TEST(GgufCli, InspectShowsTheMetadataAndTheTypesPerFamily) {
  testing::GgufModelOptions options;
  options.matrices = GgmlType::Q8_0;
  options.splits = 2;
  const fs::path dir = ckpt_test::scratch_root() / "inspect";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const Checkpoint& source = testing::open_tiny("original-f32");
  const fs::path file = testing::write_gguf_model(source, dir / "tiny-Q8_0.gguf", options);
  const ProcessResult json_run = run_inkling({"inspect", "-m", file.string(), "--json"});
  ASSERT_EQ(json_run.exit_code, 0) << described(json_run);
  const nlohmann::json info = nlohmann::json::parse(json_run.out);
  ASSERT_TRUE(info.contains("gguf")) << json_run.out.substr(0, 2000);
  const nlohmann::json& g = info["gguf"];
  const GgufFile first = GgufFile::open(file);
  EXPECT_EQ(g["version"], 3);
  EXPECT_EQ(g["alignment"], 32);
  EXPECT_EQ(g["key_count"], first.keys().size());
  EXPECT_EQ(g["split_count"], 2);
  EXPECT_EQ(g["architecture"], "inkling");
  EXPECT_EQ(g["context_length"], first.unsigned_integer("inkling.context_length"));
  EXPECT_EQ(g["tokenizer"]["model"], "gpt2");
  EXPECT_EQ(g["tokenizer"]["pre"], "inkling");
  EXPECT_EQ(g["tokenizer"]["tokens"], source.text().vocab_size);
  EXPECT_EQ(g["tokenizer"]["eos_token_id"], source.config().eos_token_id);
  EXPECT_EQ(g["tokenizer"]["chat_template"], true);
  int moe_layers = 0, layers = source.text().num_layers;
  for (const LayerSpec& layer : source.text().layers) moe_layers += !layer.dense_mlp;
  const nlohmann::json& types = g["tensor_types"];
  EXPECT_EQ(types["attn_q"], nlohmann::json({{"Q8_0", layers}}));
  EXPECT_EQ(types["attn_norm"], nlohmann::json({{"F32", layers}}));
  EXPECT_EQ(types["ffn_down_exps"], nlohmann::json({{"Q8_0", moe_layers}}));
  EXPECT_EQ(types["exp_probs_b.bias"], nlohmann::json({{"F32", moe_layers}}));
  EXPECT_EQ(types["token_embd"], nlohmann::json({{"Q8_0", 1}}));
  int tensors = 0;
  for (const auto& [family, counts] : types.items())
    for (const auto& [type, count] : counts.items()) tensors += count.get<int>();
  EXPECT_EQ(tensors, g["tensor_count"].get<int>());

  const ProcessResult text_run = run_inkling({"inspect", "-m", file.string()});
  ASSERT_EQ(text_run.exit_code, 0) << described(text_run);
  for (const std::string& fragment :
       {std::string("version 3, alignment 32"), std::string("in 2 files"), std::string("tokenizer    gpt2 (pre inkling), ") +
        std::to_string(source.text().vocab_size) + " tokens", std::string("chat template yes"),
        std::string("attn_q") + std::string(20 - 6, ' ') + " Q8_0 x" + std::to_string(layers)})
    EXPECT_NE(text_run.out.find(fragment), std::string::npos) << "no '" << fragment << "' in:\n" << text_run.out;
}

// The converter copies generation_config.json into general.sampling.*; without that file beside
// the .gguf, those keys are the defaults (options still override them), and a value out of range
// is an error naming the file.
TEST(GgufCli, SamplingDefaultsComeFromTheGeneralSamplingKeys) {
  testing::GgufModelOptions options;
  options.vocabulary = false;
  options.extra_metadata = [](testing::GgufBuilder& meta) {
    meta.add_f32("general.sampling.temp", 0.75f);
    meta.add_i32("general.sampling.top_k", 40);
    meta.add_f32("general.sampling.top_p", 0.875f);
    meta.add_f32("general.sampling.min_p", 0.0625f);
    meta.add_f32("general.sampling.penalty_repeat", 1.25f);
  };
  const fs::path file = lone_gguf("sampling", options);
  auto generate = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"generate", "-m", file.string(), "--prompt-ids", "1,2,3", "-n", "2", "--seed", "7"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_inkling(args);
  };
  const ProcessResult defaults = generate({});
  ASSERT_EQ(defaults.exit_code, 0) << described(defaults);
  EXPECT_NE(defaults.err.find("sampling: temperature 0.75, top-k 40, top-p 0.875, min-p 0.0625, repeat-penalty 1.25, "
                              "seed 7 (GGUF metadata)"),
            std::string::npos)
      << defaults.err;
  const ProcessResult overridden = generate({"--temp", "0"});
  ASSERT_EQ(overridden.exit_code, 0) << described(overridden);
  EXPECT_NE(overridden.err.find("sampling: greedy, repeat-penalty 1.25 (GGUF metadata + options)"),
            std::string::npos)
      << overridden.err;

  // generation_config.json beside the file comes first.
  {
    std::ofstream(file.parent_path() / "generation_config.json") << R"({"do_sample": true, "temperature": 0.5})";
  }
  const ProcessResult beside = generate({});
  ASSERT_EQ(beside.exit_code, 0) << described(beside);
  EXPECT_NE(beside.err.find("sampling: temperature 0.5, seed 7 (generation_config.json)"), std::string::npos) << beside.err;
  fs::remove(file.parent_path() / "generation_config.json");

  // No sampling keys: greedy, no source.
  testing::GgufModelOptions no_vocabulary;
  no_vocabulary.vocabulary = false;
  const fs::path plain = lone_gguf("sampling_none", no_vocabulary);
  const ProcessResult greedy = run_inkling({"generate", "-m", plain.string(), "--prompt-ids", "1,2,3", "-n", "2"});
  ASSERT_EQ(greedy.exit_code, 0) << described(greedy);
  EXPECT_NE(greedy.err.find("sampling: greedy\n"), std::string::npos) << greedy.err;

  options.extra_metadata = [](testing::GgufBuilder& meta) { meta.add_f32("general.sampling.top_p", 2.0f); };
  const fs::path bad = lone_gguf("sampling_bad", options);
  const ProcessResult refused = run_inkling({"generate", "-m", bad.string(), "--prompt-ids", "1,2,3", "-n", "2"});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("tiny.gguf: general.sampling.*: "), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("top_p"), std::string::npos) << refused.err;
}

}  // namespace
}  // namespace inkling
