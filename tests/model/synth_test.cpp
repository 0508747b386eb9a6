// Options of the synthetic checkpoints that change what the model computes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <random>

#include "model/layers.h"
#include "model/synth.h"
#include "model/weights.h"
#include "tensor/weight_matrix.h"

namespace inkling {
namespace {

// --separated-routing: every MoE layer's correction biases step by 2 per expert, so whatever the
// router's logits, the selection is the first top-k experts, each ahead of the next by more than
// any sigmoid difference (a rounding of the logits can never flip it).
TEST(Synth, SeparatedRoutingSelectsTheFirstExpertsForAnyLogits) {
  setenv("INKLING_DATA", INKLING_SOURCE_DIR "/data", 0);
  const auto dir = std::filesystem::temp_directory_path() / ("inkling-synth-separated-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  SynthOptions options;
  options.format = parse_target_format("original-f32");
  options.preset = SynthPreset::Tiny;
  options.separated_routing = true;
  write_synthetic_checkpoint(dir, options);
  auto checkpoint = Checkpoint::open(dir);
  const TextConfig& text = checkpoint->config().text;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 8.0f);
  int moe_layers = 0;
  for (const LayerWeights& layer : checkpoint->weights().layers) {
    if (layer.mlp.dense) continue;
    ++moe_layers;
    const auto& bias = layer.mlp.correction_bias;
    ASSERT_GE(bias.size(), size_t(text.experts_per_token) + 1);
    for (size_t e = 0; e + 1 < bias.size(); ++e) EXPECT_GE(bias[e] - bias[e + 1], 1.0f + 1e-3f) << e;
    std::vector<float> logits(bias.size() + size_t(text.n_shared_experts));
    for (int trial = 0; trial < 200; ++trial) {
      for (float& l : logits) l = normal(rng);
      // The logits that would win without the bias: the last experts, far ahead.
      for (size_t e = 0; e < bias.size(); ++e) logits[e] += 4.0f * float(e);
      RouteDecision decision = route_token(logits.data(), bias.data(), int64_t(bias.size()), text.n_shared_experts,
                                           text.experts_per_token, text.route_scale, layer.mlp.global_scale);
      for (int k = 0; k < text.experts_per_token; ++k) ASSERT_EQ(decision.experts[size_t(k)], k) << trial;
    }
  }
  EXPECT_GT(moe_layers, 0);
  checkpoint.reset();
  std::filesystem::remove_all(dir);
}

TEST(Synth, SuccessorIsAPermutationOfTheRegularTokens) {
  std::vector<bool> seen(size_t(kSynthChainTokens), false);
  for (int64_t token = 0; token < kSynthChainTokens; ++token) {
    const int64_t next = synth_successor(token);
    ASSERT_GE(next, 0);
    ASSERT_LT(next, kSynthChainTokens);
    ASSERT_FALSE(seen[size_t(next)]) << token;
    seen[size_t(next)] = true;
  }
  EXPECT_EQ(synth_successor(kSynthChainTokens), -1);  // the specials and the padding have none
  EXPECT_EQ(synth_successor(-1), -1);
}

// --confident-head adds to the head row of each regular token's successor that token's embedding
// times the head's noise scale, and changes nothing else: the same seed without it gives the
// difference exactly (f32 checkpoint, so no rounding in between).
TEST(Synth, ConfidentHeadAddsEachTokensEmbeddingToItsSuccessorsRow) {
  setenv("INKLING_DATA", INKLING_SOURCE_DIR "/data", 0);
  const auto base = std::filesystem::temp_directory_path() / ("inkling-synth-confident-" + std::to_string(::getpid()));
  std::filesystem::remove_all(base);
  SynthOptions options;
  options.format = parse_target_format("original-f32");
  options.preset = SynthPreset::Tiny;
  options.seed = 3;
  write_synthetic_checkpoint(base / "plain", options);
  options.confident_head = true;
  write_synthetic_checkpoint(base / "confident", options);
  auto plain = Checkpoint::open(base / "plain");
  auto confident = Checkpoint::open(base / "confident");
  const TextConfig& text = plain->config().text;
  const int64_t h = text.hidden_size;
  const float scale = 3.0f * float(text.mup_width_multiplier) / std::sqrt(float(h));
  const size_t columns = size_t(h);
  std::vector<float> embed(columns), with(columns), without(columns);
  for (int64_t token : {int64_t(0), int64_t(1), int64_t(5000), int64_t(123457), kSynthChainTokens - 1}) {
    const int64_t next = synth_successor(token);
    dequantize_row(plain->weights().embed, token, embed.data());
    dequantize_row(confident->weights().lm_head, next, with.data());
    dequantize_row(plain->weights().lm_head, next, without.data());
    for (int64_t c = 0; c < h; ++c)
      ASSERT_NEAR(with[size_t(c)] - without[size_t(c)], scale * embed[size_t(c)], 1e-5f) << token << " " << c;
  }
  // The rows of the specials (no predecessor) and everything else are unchanged.
  for (int64_t row : {kSynthChainTokens, int64_t(200006)}) {
    dequantize_row(confident->weights().lm_head, row, with.data());
    dequantize_row(plain->weights().lm_head, row, without.data());
    EXPECT_EQ(with, without) << row;
  }
  const auto& a = confident->weights().layers[0].attn.q;
  const auto& b = plain->weights().layers[0].attn.q;
  dequantize_row(a, 0, with.data());
  dequantize_row(b, 0, without.data());
  EXPECT_EQ(with, without);
  plain.reset();
  confident.reset();
  std::filesystem::remove_all(base);
}

}  // namespace
}  // namespace inkling
