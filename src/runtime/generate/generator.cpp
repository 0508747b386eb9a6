#include "runtime/generate/generator.h"

#include <algorithm>
#include <chrono>

#include "tensor/error.h"

namespace inkling {

GenerateResult generate(InklingModel& model, SequenceState& state, std::span<const int32_t> prompt,
                        const GenerateOptions& options, const TokenCallback& on_token) {
  if (options.max_tokens <= 0) throw Error("the number of tokens to generate must be positive (got " +
                                           std::to_string(options.max_tokens) + ")");
  if (state.position + int64_t(prompt.size()) + 1 > state.context_limit)
    throw Error("prompt of " + std::to_string(prompt.size()) + " tokens leaves no room in the context of " +
                std::to_string(state.context_limit) + " tokens (raise it with --ctx)");
  Sampler sampler(options.sampling);
  GenerateResult result;
  result.prompt_tokens = int64_t(prompt.size());
  std::vector<float> logits(static_cast<size_t>(model.vocab()));
  std::vector<float> chosen_logits;
  using Clock = std::chrono::steady_clock;
  auto start = Clock::now();
  model.prefill(state, prompt, logits.data());
  auto after_prompt = Clock::now();
  result.prompt_seconds = std::chrono::duration<double>(after_prompt - start).count();
  result.stop_reason = "max_tokens";
  // The callback sees the logits before penalties: a copy when the sampler changes them (a
  // vocabulary of floats is ~0.8 MB, and copying it cost ~1% of a decoded token).
  const bool copy_logits = on_token && sampler.changes_logits();
  grammar::TokenMask allowed;
  for (int i = 0; i < options.max_tokens; ++i) {
    if (options.constraint) {
      // Near max_tokens the grammar's shortest completion is forced, so the output still parses.
      const int32_t closing = options.constraint->closing_token(options.max_tokens - i);
      if (closing >= 0) {
        allowed = grammar::TokenMask(options.constraint->vocabulary()->mask_size());
        allowed.allow(closing);
      } else {
        options.constraint->allowed_tokens(allowed);
      }
      grammar::mask_logits(allowed, logits);
    }
    if (copy_logits) chosen_logits = logits;
    int32_t token = sampler.sample(logits, state.tokens);
    if (options.constraint && !options.constraint->accept_token(token))
      throw Error("grammar: the sampler drew token " + std::to_string(token) + ", which the grammar does not allow");
    result.tokens.push_back(token);
    bool keep_going = !on_token || on_token(token, copy_logits ? chosen_logits : logits);
    if (std::find(options.stop_ids.begin(), options.stop_ids.end(), token) != options.stop_ids.end()) {
      result.stop_reason = "stop_token";
      break;
    }
    if (!keep_going) {
      result.stop_reason = "callback";
      break;
    }
    if (i + 1 == options.max_tokens) break;
    if (state.position >= state.context_limit) {
      result.stop_reason = "context";
      break;
    }
    int32_t next[1] = {token};
    model.prefill(state, next, logits.data());
  }
  result.generate_seconds = std::chrono::duration<double>(Clock::now() - after_prompt).count();
  return result;
}

}  // namespace inkling
