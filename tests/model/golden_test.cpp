// The engine against goldens from HF transformers (tools/make_goldens.py) on the same synthetic
// checkpoints: greedy ids must be token-exact and the logits close.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "model_fixture.h"
#include "runtime/generate/generator.h"

namespace inkling {
namespace {

void check_golden(const std::string& layout, DType kv_dtype, double logit_tolerance) {
  std::ifstream in(INKLING_SOURCE_DIR "/tests/data/golden/tiny-" + layout + ".json");
  ASSERT_TRUE(in) << "golden missing for " << layout;
  nlohmann::json golden = nlohmann::json::parse(in);
  std::vector<int32_t> prompt = golden["prompt_ids"].get<std::vector<int32_t>>();
  std::vector<int32_t> expected = golden["ids"].get<std::vector<int32_t>>();
  std::vector<int64_t> columns = golden["columns"].get<std::vector<int64_t>>();
  const Checkpoint& ckpt = testing::open_tiny(layout);
  RunOptions options;
  options.kv_dtype = kv_dtype;
  InklingModel model(ckpt, options);
  SequenceState state = model.new_sequence();
  GenerateOptions generate_options;
  generate_options.max_tokens = int(expected.size());
  generate_options.stop_ids = {};  // the golden never stops early
  double worst = 0.0;
  size_t row = 0;
  GenerateResult result = generate(model, state, prompt, generate_options, [&](int32_t, std::span<const float> logits) {
    const auto& golden_row = golden["logits"][row++];
    for (size_t i = 0; i < columns.size(); ++i)
      worst = std::max(worst, std::fabs(double(logits[size_t(columns[i])]) - golden_row[i].get<double>()));
    return true;
  });
  std::printf("[%s, %s KV] vs transformers: %zu/%zu ids equal, max |logit diff| %.3g (logits std %.3g)\n",
              layout.c_str(), std::string(dtype_name(kv_dtype)).c_str(),
              size_t(std::mismatch(expected.begin(), expected.end(), result.tokens.begin()).first - expected.begin()),
              expected.size(), worst, golden["logits_std"].get<double>());
  EXPECT_EQ(result.tokens, expected);
  EXPECT_LT(worst, logit_tolerance);
}

TEST(TransformersGolden, TinyOriginalF32TokenExactF32Kv) { check_golden("original-f32", DType::F32, 1e-4); }
TEST(TransformersGolden, TinyOriginalBf16TokenExactF32Kv) { check_golden("original-bf16", DType::F32, 1e-4); }
TEST(TransformersGolden, TinyOriginalF32Bf16Kv) { check_golden("original-f32", DType::BF16, 3e-2); }

// The callback is documented to see the logits before the sampler's penalties, which change
// them in place: with a repetition penalty the prompt's ids are penalised, and the callback must
// still see the model's own logits for them.
TEST(Generate, CallbackSeesLogitsBeforePenalties) {
  const Checkpoint& ckpt = testing::open_tiny("original-f32");
  InklingModel model(ckpt, RunOptions{});
  const std::vector<int32_t> prompt = {5, 6, 7};
  auto first_logits = [&](float repetition_penalty) {
    SequenceState state = model.new_sequence();
    GenerateOptions options;
    options.max_tokens = 1;
    options.stop_ids = {};
    options.sampling.repetition_penalty = repetition_penalty;
    std::vector<float> seen;
    generate(model, state, prompt, options, [&](int32_t, std::span<const float> logits) {
      seen.assign(logits.begin(), logits.end());
      return true;
    });
    return seen;
  };
  const std::vector<float> plain = first_logits(1.0f), penalised = first_logits(2.0f);
  ASSERT_EQ(plain.size(), size_t(model.vocab()));
  for (int32_t id : prompt) ASSERT_NE(plain[size_t(id)], 0.0f);  // a penalty would change them
  EXPECT_EQ(penalised, plain);
}

}  // namespace
}  // namespace inkling
