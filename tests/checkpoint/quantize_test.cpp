// quantize_checkpoint: original-bf16 tiny -> mlx-4bit / mlx-8bit / nvfp4. The output opens in
// the right layout, the reported per-family error is within bounds and agrees with an error
// computed here over every row.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "checkpoint_test_util.h"
#include "model/quantize.h"
#include "model/weights.h"
#include "tensor/error.h"

namespace inkling {
namespace {

using namespace ckpt_test;

// All matrices of one family, in binding order.
std::vector<const WeightMatrix*> family(const Checkpoint& ckpt, const std::string& name) {
  std::vector<const WeightMatrix*> out;
  const ModelWeights& w = ckpt.weights();
  if (name == "embed") out.push_back(&w.embed);
  if (name == "lm_head") out.push_back(&w.lm_head);
  for (const LayerWeights& l : w.layers) {
    if (name == "attention")
      for (const WeightMatrix* m : {&l.attn.q, &l.attn.k, &l.attn.v, &l.attn.r, &l.attn.o}) out.push_back(m);
    auto gated = [&](const GatedExpert& e) {
      out.push_back(&e.gate);
      out.push_back(&e.up);
      out.push_back(&e.down);
    };
    if (l.mlp.dense) {
      if (name == "dense_mlp") gated(l.mlp.dense_mlp);
    } else {
      if (name == "router") out.push_back(&l.mlp.router);
      if (name == "routed_experts")
        for (const GatedExpert& e : l.mlp.experts) gated(e);
      if (name == "shared_experts")
        for (const GatedExpert& e : l.mlp.shared) gated(e);
    }
  }
  return out;
}

double full_error(const Checkpoint& quantized, const Checkpoint& source, const std::string& name) {
  auto q = family(quantized, name), s = family(source, name);
  EXPECT_EQ(q.size(), s.size()) << name;
  RelativeError error;
  for (size_t i = 0; i < std::min(q.size(), s.size()); ++i) {
    EXPECT_EQ(q[i]->rows, s[i]->rows);
    EXPECT_EQ(q[i]->cols, s[i]->cols);
    std::vector<float> a(size_t(q[i]->cols)), b(size_t(s[i]->cols));
    for (int64_t r = 0; r < q[i]->rows; ++r) {
      dequantize_row(*q[i], r, a.data());
      dequantize_row(*s[i], r, b.data());
      error.add(a.data(), b.data(), q[i]->cols);
    }
  }
  return error.value();
}

struct QuantizeCase {
  std::string target;
  CheckpointLayout layout;
  double bound;
};

class Quantize : public ::testing::TestWithParam<QuantizeCase> {};

TEST_P(Quantize, OutputOpensWithinErrorBounds) {
  const QuantizeCase& param = GetParam();
  const fs::path& input = synth_tiny("original-bf16");
  fs::path output = fresh_dir("quantized") / param.target;
  QuantizeReport report = quantize_checkpoint(input, output, parse_target_format(param.target));
  std::unique_ptr<Checkpoint> source = Checkpoint::open(input);
  std::unique_ptr<Checkpoint> result = Checkpoint::open(output);
  EXPECT_EQ(result->layout(), param.layout) << layout_name(result->layout());
  EXPECT_TRUE(result->warnings().empty()) << result->warnings()[0];
  EXPECT_GT(report.input_bytes, 0u);
  EXPECT_GT(report.output_bytes, 0u);
  EXPECT_LT(report.output_bytes, report.input_bytes);
  EXPECT_EQ(fs::exists(output / "hf_quant_config.json"), param.target == "nvfp4");
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"})
    EXPECT_TRUE(fs::exists(output / name)) << name;

  std::vector<std::string> quantized_families;
  if (param.target == "nvfp4") {
    quantized_families = {"routed_experts"};
    EXPECT_EQ(result->config().quantization.mode, QuantMode::NvFp4);
    // The first MoE layer (1) stays bf16, later ones are packed.
    EXPECT_EQ(result->weights().layers[1].mlp.experts[0].gate.format, WeightFormat::BF16);
    EXPECT_EQ(result->weights().layers[2].mlp.experts[0].gate.format, WeightFormat::NvFp4);
    EXPECT_EQ(result->weights().layers[3].mlp.experts[7].down.format, WeightFormat::NvFp4);
  } else {
    quantized_families = {"dense_mlp", "routed_experts", "shared_experts"};
    EXPECT_EQ(result->config().quantization.mode, QuantMode::Affine);
    int bits = param.target == "mlx-8bit" ? 8 : 4;
    EXPECT_EQ(result->config().quantization.bits, bits);
    for (const char* name : {"dense_mlp", "routed_experts", "shared_experts"})
      for (const WeightMatrix* m : family(*result, name)) {
        EXPECT_EQ(m->format, WeightFormat::Affine) << name;
        EXPECT_EQ(m->bits, bits) << name;
      }
  }
  for (const char* name : {"attention", "router", "embed", "lm_head"})
    for (const WeightMatrix* m : family(*result, name)) EXPECT_EQ(m->format, WeightFormat::BF16) << name;

  for (const char* name : {"attention", "dense_mlp", "routed_experts", "shared_experts", "router", "embed", "lm_head"}) {
    ASSERT_TRUE(report.relative_error.count(name)) << "report lacks family " << name;
    double reported = report.relative_error.at(name);
    double mine = full_error(*result, *source, name);
    bool quantized = std::find(quantized_families.begin(), quantized_families.end(), name) != quantized_families.end();
    std::printf("[ measured ] %-9s %-16s reported %.5f, all rows %.5f\n", param.target.c_str(), name, reported, mine);
    if (quantized) {
      EXPECT_LT(reported, param.bound) << name;
      EXPECT_LT(mine, param.bound) << name;
      EXPECT_GT(mine, 0.0) << name;
      // The report samples rows; it must still agree with the full error.
      EXPECT_NEAR(reported, mine, 0.25 * mine) << name;
    } else {
      EXPECT_EQ(mine, 0.0) << name << " was copied, not quantized";
      EXPECT_EQ(reported, 0.0) << name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, Quantize,
                         ::testing::Values(QuantizeCase{"mlx-4bit", CheckpointLayout::MlxAffine, 0.1},
                                           QuantizeCase{"mlx-8bit", CheckpointLayout::MlxAffine, 0.01},
                                           QuantizeCase{"nvfp4", CheckpointLayout::NvFp4, 0.15}),
                         [](const auto& info) {
                           std::string name = info.param.target;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST(QuantizeErrors, RefusesQuantizedInputAndNonQuantizedTargets) {
  const fs::path& mlx = synth_tiny("mlx-4bit");
  try {
    quantize_checkpoint(mlx, fresh_dir("requant") / "out", parse_target_format("mlx-8bit"));
    ADD_FAILURE() << "quantizing a quantized checkpoint succeeded";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("already quantized"), std::string::npos) << error.what();
  }
  try {
    quantize_checkpoint(synth_tiny("original-bf16"), fresh_dir("requant") / "out", parse_target_format("original-bf16"));
    ADD_FAILURE() << "quantize to original-bf16 succeeded";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("mlx-4bit"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace inkling
