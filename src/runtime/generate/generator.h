// The decode loop: prefill the prompt, then sample and feed one token at a time.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "model/forward.h"
#include "runtime/generate/sampler.h"
#include "runtime/grammar/matcher.h"

namespace inkling {

constexpr int32_t kEosToken = 200006;

struct GenerateOptions {
  int max_tokens = 128;
  SamplingParams sampling;
  std::vector<int32_t> stop_ids = {kEosToken};
  // When set, only tokens the grammar allows are drawn (its end tokens only where it may end);
  // it advances with every generated token.
  grammar::GrammarMatcher* constraint = nullptr;
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated, including the stop token when one ended generation
  std::string stop_reason;      // "stop_token", "max_tokens", "callback", "context"
  int64_t prompt_tokens = 0;
  double prompt_seconds = 0.0;
  double generate_seconds = 0.0;  // from the first to the last generated token
};

// Called for every generated token with the logits that chose it; return false to stop.
using TokenCallback = std::function<bool(int32_t token, std::span<const float> logits)>;

GenerateResult generate(InklingModel& model, SequenceState& state, std::span<const int32_t> prompt,
                        const GenerateOptions& options, const TokenCallback& on_token = {});

}  // namespace inkling
