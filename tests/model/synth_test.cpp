// Options of the synthetic checkpoints that change what the model computes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <random>

#include "model/layers.h"
#include "model/synth.h"
#include "model/weights.h"

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

}  // namespace
}  // namespace inkling
