// Tiny synthetic checkpoints in every layout, written once per test binary.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/synth.h"
#include "model/weights.h"

namespace inkling::testing {

inline const std::vector<std::string>& all_layouts() {
  static const std::vector<std::string> layouts = {"original-f32", "original-bf16", "nvfp4", "mlx-4bit", "mlx-8bit"};
  return layouts;
}

// Path of the tiny checkpoint for `layout` (seed 0), synthesized on first use.
inline std::filesystem::path tiny_checkpoint(const std::string& layout) {
  static std::filesystem::path root = [] {
    // Shared by every test process of this build (ctest runs each test in its own process).
    auto dir = std::filesystem::path(INKLING_BINARY).parent_path() / "test-checkpoints";
    std::filesystem::create_directories(dir);
    return dir;
  }();
  std::filesystem::path dir = root / layout;
  if (!std::filesystem::exists(dir / "config.json")) {
    setenv("INKLING_DATA", INKLING_SOURCE_DIR "/data", 0);
    SynthOptions options;
    options.format = parse_target_format(layout);
    options.preset = SynthPreset::Tiny;
    options.seed = 0;
    // Write aside and rename, so a concurrent test process never sees a half-written checkpoint.
    std::filesystem::path partial = dir;
    partial += ".partial-" + std::to_string(::getpid());
    std::filesystem::remove_all(partial);
    write_synthetic_checkpoint(partial, options);
    std::error_code ignored;
    std::filesystem::rename(partial, dir, ignored);
    std::filesystem::remove_all(partial, ignored);
  }
  return dir;
}

inline const Checkpoint& open_tiny(const std::string& layout) {
  static std::map<std::string, std::unique_ptr<Checkpoint>> cache;
  auto& slot = cache[layout];
  if (!slot) slot = Checkpoint::open(tiny_checkpoint(layout));
  return *slot;
}

inline std::vector<int32_t> random_tokens(int64_t count, uint32_t seed, int32_t vocab = 200058) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> pick(0, vocab - 1);
  std::vector<int32_t> tokens(static_cast<size_t>(count));
  for (auto& token : tokens) token = pick(rng);
  return tokens;
}

inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b, size_t offset_b = 0, size_t count = SIZE_MAX) {
  double worst = 0.0;
  size_t n = std::min(a.size(), count);
  for (size_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(double(a[i]) - double(b[i + offset_b])));
  return worst;
}

inline double stddev(const std::vector<float>& values) {
  double mean = 0.0, sq = 0.0;
  for (float v : values) mean += v;
  mean /= double(values.size());
  for (float v : values) sq += (v - mean) * (v - mean);
  return std::sqrt(sq / double(values.size()));
}

}  // namespace inkling::testing
