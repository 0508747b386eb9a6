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

// Index of the largest logit, the lowest index among equals (torch.argmax); NaNs never win.
int32_t argmax(std::span<const float> logits);

// out[i] = exp(values[i] - top) within 3e-7 relative for values[i] - top in [-87, 0] (below:
// exp(-87)), four at a time: the sampler weighs every token of the vocabulary each step, and
// std::exp took ~0.7 ms of it.
void relative_weights(std::span<const float> values, float top, std::span<float> out);

class Sampler {
 public:
  explicit Sampler(SamplingParams params);
  // Picks the next token from `logits` (modified in place by the penalties); `history` is every
  // token seen so far (prompt and generated) for the penalties. Runs once per generated token
  // over the whole vocabulary (~200k), so no step sorts it: top-k and top-p order only the tokens
  // they keep.
  int32_t sample(std::span<float> logits, std::span<const int32_t> history);
  // Whether sample() changes the logits it is given (only the penalties do).
  bool changes_logits() const;
  const SamplingParams& params() const { return params_; }

 private:
  struct Candidate {
    float logit;   // after penalties and temperature
    float weight;  // exp(logit - largest logit)
    int32_t id;
  };
  void apply_penalties(std::span<float> logits, std::span<const int32_t> history);
  // Sorts the best `count` candidates to the front: highest logit first, lower id among equals.
  void sort_best(size_t count);
  // Draws from weights_ (scaled_ at or above `floor`) with no filter, in id order.
  int32_t draw_by_id(float floor);

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<Candidate> candidates_;
  std::vector<float> scaled_, weights_;  // per vocabulary id: logit / temperature, its weight
  std::vector<double> block_sums_;
  std::vector<int32_t> counts_;  // per vocabulary id, zero between calls
};

}  // namespace inkling
