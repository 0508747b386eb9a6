// `inkling quantize --to gguf-*` (model/gguf_export.h): the file it writes from a tiny checkpoint
// reads back through our reader and binder, in the converter's layout and types, with weights that
// are the source's encoded by ggml's rounding; the Q4_K_M mix is llama-quantize's; errors name the
// problem. (tests/gguf/test_quantize.py checks the encoders bit for bit against gguf-py and ggml;
// tests/gguf/test_converter.py loads these files in llama.cpp where it is built.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "../checkpoint/checkpoint_test_util.h"
#include "gguf_model_writer.h"
#include "model/gguf_export.h"
#include "model_fixture.h"

namespace inkling {
namespace {

namespace fs = std::filesystem;
using ckpt_test::ProcessResult;
using ckpt_test::run_inkling;

fs::path export_dir(const std::string& name) {
  const fs::path dir = ckpt_test::scratch_root() / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// Every matrix of `a` against the same matrix of `b`, dequantized: `check(name, a_values, b_values)`.
void for_each_matrix(const Checkpoint& a, const Checkpoint& b,
                     const std::function<void(const std::string&, const std::vector<float>&, const std::vector<float>&)>& check) {
  auto one = [&](const std::string& name, const WeightMatrix& x, const WeightMatrix& y) {
    check(name, testing::matrix_values(x), testing::matrix_values(y));
  };
  one("embed", a.weights().embed, b.weights().embed);
  one("lm_head", a.weights().lm_head, b.weights().lm_head);
  for (size_t i = 0; i < a.weights().layers.size(); ++i) {
    const LayerWeights &x = a.weights().layers[i], &y = b.weights().layers[i];
    const std::string l = "layer " + std::to_string(i) + " ";
    one(l + "q", x.attn.q, y.attn.q);
    one(l + "k", x.attn.k, y.attn.k);
    one(l + "v", x.attn.v, y.attn.v);
    one(l + "r", x.attn.r, y.attn.r);
    one(l + "o", x.attn.o, y.attn.o);
    if (x.mlp.dense) {
      one(l + "gate", x.mlp.dense_mlp.gate, y.mlp.dense_mlp.gate);
      one(l + "down", x.mlp.dense_mlp.down, y.mlp.dense_mlp.down);
      continue;
    }
    one(l + "router", x.mlp.router, y.mlp.router);
    for (size_t e = 0; e < x.mlp.experts.size(); ++e) {
      one(l + "expert up", x.mlp.experts[e].up, y.mlp.experts[e].up);
      one(l + "expert down", x.mlp.experts[e].down, y.mlp.experts[e].down);
    }
    for (size_t e = 0; e < x.mlp.shared.size(); ++e) one(l + "shared gate", x.mlp.shared[e].gate, y.mlp.shared[e].gate);
  }
}

TEST(GgufExport, Q8_0FileHoldsTheSourceInTheConvertersLayout) {
  const fs::path source_dir = testing::tiny_checkpoint("original-f32");
  const Checkpoint& source = testing::open_tiny("original-f32");
  const fs::path file = export_dir("export_q8") / "tiny-Q8_0.gguf";
  const GgufExportReport report = export_gguf(source_dir, file, gguf_target("q8_0"));
  EXPECT_EQ(report.output_bytes, fs::file_size(file));
  EXPECT_FALSE(fs::exists(file.string() + ".partial"));

  const GgufFile gguf = GgufFile::open(file);
  EXPECT_EQ(gguf.string("general.architecture"), "inkling");
  EXPECT_EQ(gguf.unsigned_integer("general.file_type"), 7u);  // LLAMA_FTYPE_MOSTLY_Q8_0
  EXPECT_EQ(gguf.string_array("tokenizer.ggml.tokens").size(), size_t(source.text().vocab_size));
  EXPECT_EQ(gguf.string("tokenizer.ggml.pre"), "inkling");
  EXPECT_NE(gguf.find("tokenizer.chat_template"), nullptr);
  EXPECT_EQ(gguf.unsigned_integer("tokenizer.ggml.padding_token_id"), 199999u);  // tokenizer_config's <|endoftext|>
  EXPECT_EQ(gguf.number("general.sampling.temp"), 1.0);  // generation_config.json's, as the converter copies it
  for (const GgufTensor& t : gguf.tensors()) {
    const bool matrix = t.dims.size() >= 2 && t.name.find("norm") == std::string::npos &&
                        t.name.find("shortconv") == std::string::npos && t.name.find("rel_proj") == std::string::npos &&
                        t.name.find("gate_inp") == std::string::npos;
    EXPECT_EQ(t.type, matrix ? GgmlType::Q8_0 : GgmlType::F32) << t.name;
  }

  auto loaded = Checkpoint::open(file);
  EXPECT_TRUE(loaded->warnings().empty()) << loaded->warnings().front();
  int matrices = 0;
  for_each_matrix(*loaded, source, [&](const std::string& name, const std::vector<float>& got, const std::vector<float>& want) {
    ++matrices;
    const bool router = name.find("router") != std::string::npos;
    // Exactly the source's values through ggml's Q8_0 rounding (the router stays F32)...
    const std::vector<float> rounded = router ? want : testing::round_trip_values(GgmlType::Q8_0, want);
    ASSERT_EQ(got, rounded) << name;
    // ... which is within Q8_0's error of them.
    double diff2 = 0, want2 = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      diff2 += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
      want2 += double(want[i]) * want[i];
    }
    EXPECT_LE(std::sqrt(diff2 / want2), 0.01) << name;
  });
  EXPECT_GT(matrices, 10);
}

// llama-quantize's Q4_K_M choices (src/llama-quant.cpp at the Inkling branch, no importance
// matrix) for a model of 8 layers and 32 experts, the bench preset: Q6_K for output.weight, and
// for attn_v and the ffn_down family in its "more bits" layers 0, 3, 6 and 7; Q4_K for the rest.
TEST(GgufExport, Q4KMMixIsLlamaQuantizes) {
  const GgufTarget target = gguf_target("q4_k_m");
  EXPECT_EQ(target.file_type, 15u);  // LLAMA_FTYPE_MOSTLY_Q4_K_M
  auto type = [&](const std::string& name, int layer) { return target.policy({name, layer, 8, 2048, 32, layer}); };
  EXPECT_EQ(type("output.weight", -1), GgmlType::Q6_K);
  EXPECT_EQ(type("token_embd.weight", -1), GgmlType::Q4_K);
  for (int layer = 0; layer < 8; ++layer) {
    const bool more = layer == 0 || layer == 3 || layer == 6 || layer == 7;
    const std::string g = "blk." + std::to_string(layer) + ".";
    for (const char* tensor : {"attn_v.weight", "ffn_down.weight", "ffn_down_exps.weight", "ffn_down_shexp.weight"})
      EXPECT_EQ(type(g + tensor, layer), more ? GgmlType::Q6_K : GgmlType::Q4_K) << g << tensor;
    for (const char* tensor : {"attn_q.weight", "attn_k.weight", "attn_r.weight", "attn_output.weight", "ffn_gate_exps.weight",
                               "ffn_up_exps.weight", "ffn_gate_shexp.weight", "ffn_up_shexp.weight", "ffn_gate.weight",
                               "ffn_up.weight"})
      EXPECT_EQ(type(g + tensor, layer), GgmlType::Q4_K) << g << tensor;
  }
}

// Its rule for models of exactly 8 experts (the small preset: 12 layers, more bits in 0, 3, 6, 9,
// 10 and 11): Q8_0 for attn_k and attn_v in every layer, Q5_K for attn_output; the rest as above.
TEST(GgufExport, Q4KMGivesEightExpertModelsMoreBitsInAttention) {
  auto type = [](const std::string& name, int layer, int experts) {
    return gguf_q4_k_m_type({name, layer, 12, 1024, experts, layer});
  };
  for (int layer = 0; layer < 12; ++layer) {
    const bool more = layer == 0 || layer == 3 || layer == 6 || layer >= 9;
    const std::string g = "blk." + std::to_string(layer) + ".";
    EXPECT_EQ(type(g + "attn_k.weight", layer, 8), GgmlType::Q8_0) << layer;
    EXPECT_EQ(type(g + "attn_v.weight", layer, 8), GgmlType::Q8_0) << layer;
    EXPECT_EQ(type(g + "attn_output.weight", layer, 8), GgmlType::Q5_K) << layer;
    EXPECT_EQ(type(g + "ffn_down_exps.weight", layer, 8), more ? GgmlType::Q6_K : GgmlType::Q4_K) << layer;
    for (const char* tensor : {"attn_q.weight", "attn_r.weight", "ffn_gate_exps.weight", "ffn_up_shexp.weight"})
      EXPECT_EQ(type(g + tensor, layer, 8), GgmlType::Q4_K) << g << tensor;
    // Exactly 8: 7 or 9 experts take the ordinary mix.
    for (int experts : {7, 9}) {
      EXPECT_EQ(type(g + "attn_k.weight", layer, experts), GgmlType::Q4_K) << layer;
      EXPECT_EQ(type(g + "attn_v.weight", layer, experts), more ? GgmlType::Q6_K : GgmlType::Q4_K) << layer;
      EXPECT_EQ(type(g + "attn_output.weight", layer, experts), GgmlType::Q4_K) << layer;
    }
  }
  EXPECT_EQ(type("output.weight", -1, 8), GgmlType::Q6_K);
  EXPECT_EQ(type("token_embd.weight", -1, 8), GgmlType::Q4_K);
}

// Rows that are not whole 256-value blocks (the tiny preset's 64 columns) fall back as
// llama-quantize's do: Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to Q8_0 (output.weight: Q8_0 by its own
// rule), and to F16 when not whole 32-value blocks either; a Q8_0 choice there has no fallback.
TEST(GgufExport, Q4KMFallsBackForShortRows) {
  auto type = [](const std::string& name, int layer, int64_t cols) {
    return gguf_q4_k_m_type({name, layer, 8, cols, 8, layer});
  };
  EXPECT_EQ(type("blk.1.attn_q.weight", 1, 64), GgmlType::Q5_0);
  EXPECT_EQ(type("token_embd.weight", -1, 64), GgmlType::Q5_0);
  EXPECT_EQ(type("blk.1.attn_output.weight", 1, 64), GgmlType::Q5_1);
  EXPECT_EQ(type("blk.0.ffn_down_exps.weight", 0, 64), GgmlType::Q8_0);
  EXPECT_EQ(type("blk.1.ffn_down_exps.weight", 1, 64), GgmlType::Q5_0);
  EXPECT_EQ(type("blk.1.attn_k.weight", 1, 64), GgmlType::Q8_0);
  EXPECT_EQ(type("output.weight", -1, 64), GgmlType::Q8_0);
  EXPECT_EQ(type("output.weight", -1, 1280), GgmlType::Q6_K);  // whole blocks, if not a power of two
  EXPECT_EQ(type("blk.1.attn_q.weight", 1, 48), GgmlType::F16);
  EXPECT_EQ(type("blk.1.attn_output.weight", 1, 48), GgmlType::F16);
  EXPECT_EQ(type("blk.0.ffn_down_exps.weight", 0, 48), GgmlType::F16);
  for (const char* name : {"output.weight", "blk.1.attn_k.weight", "blk.1.attn_v.weight"}) {
    try {
      (void)type(name, name[0] == 'o' ? -1 : 1, 48);
      ADD_FAILURE() << name << " typed";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("not whole Q8_0 blocks"), std::string::npos) << e.what();
    }
  }
}

// With at most one expert llama-quantize takes the ffn_down family's layer from its count of them,
// which runs ahead of the layer once a layer holds both ffn_down_exps and ffn_down_shexp.
TEST(GgufExport, Q4KMCountsTheFfnDownFamilyForOneExpert) {
  auto type = [](const std::string& name, int layer, int experts, int ordinal) {
    return gguf_q4_k_m_type({name, layer, 8, 2048, experts, ordinal});
  };
  // Layer 2 is not a more-bits layer of 8, but the fourth ffn_down (count 3) is.
  EXPECT_EQ(type("blk.2.ffn_down_exps.weight", 2, 1, 3), GgmlType::Q6_K);
  EXPECT_EQ(type("blk.2.ffn_down_exps.weight", 2, 2, 3), GgmlType::Q4_K);
  EXPECT_EQ(type("blk.3.ffn_down_exps.weight", 3, 1, 5), GgmlType::Q4_K);
  EXPECT_EQ(type("blk.3.ffn_down_exps.weight", 3, 2, 5), GgmlType::Q6_K);
}

// The slots plan_gguf_model hands the policy: the expert count, and the ffn_down family counted
// in the order llama-quantize visits them (by layer, then by name).
TEST(GgufExport, PlanCountsTheFfnDownFamilyInLlamaQuantizesOrder) {
  std::unique_ptr<Checkpoint> ckpt = Checkpoint::open(testing::tiny_checkpoint("original-bf16"));
  std::vector<GgufMatrixSlot> slots;
  GgufExportOptions options;
  options.matrix_type = [&](const GgufMatrixSlot& slot) {
    slots.push_back(slot);
    return GgmlType::F32;
  };
  (void)plan_gguf_model(*ckpt, options);
  std::vector<std::string> ffn_downs;
  for (const GgufMatrixSlot& slot : slots) {
    EXPECT_EQ(slot.experts, ckpt->text().n_routed_experts);
    EXPECT_EQ(slot.num_layers, ckpt->text().num_layers);
    if (slot.name.find("ffn_down") == std::string::npos) {
      EXPECT_EQ(slot.ffn_down_ordinal, -1) << slot.name;
      continue;
    }
    EXPECT_EQ(slot.ffn_down_ordinal, int(ffn_downs.size())) << slot.name;
    ffn_downs.push_back(slot.name);
  }
  ASSERT_FALSE(ffn_downs.empty());
  std::vector<std::string> sorted = ffn_downs;
  auto layer_of = [](const std::string& name) { return std::stoi(name.substr(4)); };
  std::stable_sort(sorted.begin(), sorted.end(), [&](const std::string& a, const std::string& b) {
    return layer_of(a) != layer_of(b) ? layer_of(a) < layer_of(b) : a < b;
  });
  EXPECT_EQ(ffn_downs, sorted);
}

TEST(GgufExport, CliWritesTheFileAndNamesWhatIsWrong) {
  const fs::path dir = export_dir("export_cli");
  const fs::path source = testing::tiny_checkpoint("original-bf16");
  const ProcessResult ok = run_inkling({"quantize", "-m", source.string(), "-o", (dir / "t.gguf").string(), "--to",
                                        "gguf-q4_k_m"});
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("wrote " + (dir / "t.gguf").string()), std::string::npos) << ok.out;
  // Tiny rows (64 columns) take the fallbacks: Q5_0 for Q4_K, Q5_1 for attn_output's Q5_K.
  EXPECT_NE(ok.out.find("Q5_0 x"), std::string::npos) << ok.out;
  EXPECT_NE(ok.out.find("Q5_1 x"), std::string::npos) << ok.out;
  // The file loads and generates.
  const ProcessResult run = run_inkling({"generate", "-m", (dir / "t.gguf").string(), "--prompt-ids", "1,2,3", "-n",
                                         "3", "--temp", "0", "--print-ids"});
  EXPECT_EQ(run.exit_code, 0) << run.err;

  const ProcessResult unknown =
      run_inkling({"quantize", "-m", source.string(), "-o", (dir / "u.gguf").string(), "--to", "gguf-q5_k_s"});
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_NE(unknown.err.find("unknown GGUF target \"q5_k_s\""), std::string::npos) << unknown.err;
  const ProcessResult into_dir = run_inkling({"quantize", "-m", source.string(), "-o", dir.string(), "--to", "gguf-q8_0"});
  EXPECT_NE(into_dir.exit_code, 0);
  EXPECT_NE(into_dir.err.find("is a directory; give the .gguf file to write"), std::string::npos) << into_dir.err;
}

}  // namespace
}  // namespace inkling
