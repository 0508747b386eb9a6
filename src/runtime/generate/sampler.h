// Token selection: greedy or seeded sampling with the usual filters and penalties.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace inkling {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy
  int top_k = 0;             // 0: off
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off
  float repetition_penalty = 1.0f;  // divides positive / multiplies negative logits of seen tokens
  float presence_penalty = 0.0f;    // subtracted once from every seen token
  float frequency_penalty = 0.0f;   // subtracted per occurrence
  uint64_t seed = 0;

  // Throws inkling::Error naming the first invalid field.
  void validate() const;
};

class Sampler {
 public:
  explicit Sampler(SamplingParams params);
  // Picks the next token from `logits` (modified in place by the penalties); `history` is every
  // token seen so far (prompt and generated) for the penalties.
  int32_t sample(std::span<float> logits, std::span<const int32_t> history);
  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;
  std::vector<int32_t> counts_;
};

}  // namespace inkling
