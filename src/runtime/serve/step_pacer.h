// How many prompt tokens a batched step may carry beside its decode tokens, so that streaming
// sequences keep their pace while a new prompt is prefilled.
//
// A step's time is modelled as D(B) + n * P: the time of a step of B decode tokens alone, plus
// the marginal time per prompt token. Both are learnt from the steps the engine runs (moving
// averages, D per decode count). The weights are read once per step whatever it carries, so the
// marginal prompt token costs only its arithmetic, which a pure-prefill step measures from above
// and a mixed step measures directly.
#pragma once

#include <cstdint>
#include <vector>

namespace inkling::serve {

class StepPacer {
 public:
  // target_seconds <= 0: never limits. min_prompt_tokens: a prompt always advances at least this
  // many tokens per step (the budget permitting), whatever the estimate says.
  StepPacer(double target_seconds, int64_t min_prompt_tokens, int max_decodes);

  // Prompt tokens the next step may add to `decodes` decode tokens, at most `budget`.
  int64_t prompt_allowance(int decodes, int64_t budget) const;

  // One step ran in `seconds` with `decodes` decode tokens and `prompt_tokens` prompt tokens.
  void record(double seconds, int decodes, int64_t prompt_tokens);

  bool enabled() const { return target_seconds_ > 0; }
  double target_seconds() const { return target_seconds_; }
  // The current estimates (negative: not yet measured), for /metrics and tests.
  double decode_seconds(int decodes) const;
  double prompt_token_seconds() const { return prompt_token_seconds_; }

 private:
  double target_seconds_;
  int64_t min_prompt_tokens_;
  std::vector<double> decode_seconds_;  // by decode count; negative: not measured
  double prompt_token_seconds_ = -1.0;
};

}  // namespace inkling::serve
