// Random-weight Inkling checkpoints, byte-compatible with each release layout.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/checkpoint_writer.h"

namespace inkling {

enum class SynthPreset { Tiny, Small, Bench };
SynthPreset parse_synth_preset(const std::string& name);  // tiny | small | bench

struct SynthOptions {
  TargetFormat format;
  SynthPreset preset = SynthPreset::Tiny;
  uint64_t seed = 0;
  // The router's correction biases 2, 0, -2, ... by expert (a sigmoid score is in (0, 1)), so
  // every token selects the first top-k experts and no rounding can flip a choice: for comparing
  // two engines' greedy tokens, which a random router's near-tied scores part within a few tokens.
  bool separated_routing = false;
  // Each regular token's head row also holds the embedding of one token it follows
  // (synth_successor), so the model predicts that successor far ahead of the rest, as a trained
  // model is sure of most tokens: a random head's top two logits are often a few hundredths apart,
  // which any rounding flips. The rest of the distribution still comes from the whole network.
  bool confident_head = false;
  std::function<void(uint64_t done, uint64_t total)> progress;
};

// The token a --confident-head checkpoint predicts after `token`: a fixed permutation of the
// regular (non-special) ids [0, kSynthChainTokens); special and padding ids have none (-1).
inline constexpr int64_t kSynthChainTokens = 199998;
int64_t synth_successor(int64_t token);

// The text_config of a preset, spelled as the matching release spells it: the 0.6B style
// (HF MLP spelling, layer_types) for original-f32, the Inkling-Small style (native spelling,
// local_layer_ids) otherwise.
nlohmann::ordered_json synth_text_config(SynthPreset preset, bool hf_style);

// Writes config.json, generation_config.json, tokenizer files, (hf_quant_config.json), and the
// sharded safetensors. Deterministic for a given (preset, layout, seed).
void write_synthetic_checkpoint(const std::filesystem::path& dir, const SynthOptions& options);

// Copies tokenizer.json / tokenizer_config.json (with the chat template when available) into dir.
void write_tokenizer_files(const std::filesystem::path& dir);

// Where tokenizer.json and the chat template live: $INKLING_DATA, else PREFIX/share/inkling
// beside the running binary (PREFIX/bin, as `cmake --install` lays it out), else the source
// tree's data/ the build was configured from. Throws naming every place looked at.
std::filesystem::path data_dir();

}  // namespace inkling
