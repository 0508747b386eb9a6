// How many prompt tokens a batched step may carry beside its decode tokens, so that streaming
// sequences keep their pace while a new prompt is prefilled.
//
// A step's time is modelled as D(B) + [n > 0] (F + n P): the time of B decode tokens alone, and
// for n prompt tokens a fixed part F (their prefill kernels read every weight once more, apart
// from the decode rows, so that a row's bits never depend on the batch) plus P per token. D is a
// moving average per decode count; F and P an exponentially weighted least-squares line through
// (n, time less D) of the steps with prompt tokens.
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
  double prompt_fixed_seconds() const { return prompt_fixed_seconds_; }

 private:
  void fit();

  double target_seconds_;
  int64_t min_prompt_tokens_;
  std::vector<double> decode_seconds_;  // by decode count; negative: not measured
  // Weighted sums over the steps with prompt tokens: of 1, n, n^2, y and n y (y: time less D).
  double weight_ = 0, sum_n_ = 0, sum_nn_ = 0, sum_y_ = 0, sum_ny_ = 0;
  double prompt_token_seconds_ = -1.0, prompt_fixed_seconds_ = 0.0;
};

}  // namespace inkling::serve
