#include "runtime/serve/step_pacer.h"

#include <algorithm>
#include <cmath>

namespace inkling::serve {

namespace {

// Weight of the newest step in the decode averages: a few steps follow a change of load, one slow
// step (a page fault, another process) moves the estimate by less than a third.
constexpr double kNewest = 0.3;
// What the prompt-cost fit keeps of its sums at each new step: about the last ten steps count.
constexpr double kFitKeep = 0.9;

void blend(double& average, double sample) { average = average < 0 ? sample : average + kNewest * (sample - average); }

}  // namespace

StepPacer::StepPacer(double target_seconds, int64_t min_prompt_tokens, int max_decodes)
    : target_seconds_(target_seconds),
      min_prompt_tokens_(std::max<int64_t>(min_prompt_tokens, 1)),
      decode_seconds_(size_t(std::max(max_decodes, 0)) + 1, -1.0) {
  decode_seconds_[0] = 0.0;
}

// Measured counts near `decodes` stand in for an unmeasured one: interpolated between the nearest
// measured below and above, the nearest one alone at either end.
double StepPacer::decode_seconds(int decodes) const {
  if (decodes <= 0) return 0.0;
  const int last = int(decode_seconds_.size()) - 1;
  decodes = std::min(decodes, last);
  if (decode_seconds_[size_t(decodes)] >= 0) return decode_seconds_[size_t(decodes)];
  int below = decodes - 1, above = decodes + 1;
  while (below > 0 && decode_seconds_[size_t(below)] < 0) --below;
  while (above <= last && decode_seconds_[size_t(above)] < 0) ++above;
  const bool has_below = below > 0, has_above = above <= last;
  if (has_below && has_above) {
    const double t = double(decodes - below) / double(above - below);
    return decode_seconds_[size_t(below)] + t * (decode_seconds_[size_t(above)] - decode_seconds_[size_t(below)]);
  }
  if (has_above) return decode_seconds_[size_t(above)];
  if (has_below) return decode_seconds_[size_t(below)];
  return -1.0;
}

int64_t StepPacer::prompt_allowance(int decodes, int64_t budget) const {
  if (!enabled() || decodes <= 0 || prompt_token_seconds_ < 0 || budget <= 0) return std::max<int64_t>(budget, 0);
  const double decode = std::max(decode_seconds(decodes), 0.0);
  const double room = target_seconds_ - decode - prompt_fixed_seconds_;
  int64_t tokens = 0;
  if (room > 0) {
    const double fit = prompt_token_seconds_ > 0 ? std::floor(room / prompt_token_seconds_) : double(budget);
    tokens = fit >= double(budget) ? budget : int64_t(fit);
  }
  return std::clamp<int64_t>(tokens, std::min(min_prompt_tokens_, budget), budget);
}

void StepPacer::record(double seconds, int decodes, int64_t prompt_tokens) {
  if (!(seconds >= 0) || !std::isfinite(seconds) || decodes < 0) return;
  const int last = int(decode_seconds_.size()) - 1;
  if (prompt_tokens <= 0) {
    if (decodes > 0 && decodes <= last) blend(decode_seconds_[size_t(decodes)], seconds);
    return;
  }
  const double decode = decode_seconds(decodes);
  if (decode < 0) return;  // no decode-only step of a similar size yet: the share of the prompt is unknown
  const double n = double(prompt_tokens), y = std::max(seconds - decode, 0.0);
  weight_ = kFitKeep * weight_ + 1.0;
  sum_n_ = kFitKeep * sum_n_ + n;
  sum_nn_ = kFitKeep * sum_nn_ + n * n;
  sum_y_ = kFitKeep * sum_y_ + y;
  sum_ny_ = kFitKeep * sum_ny_ + n * y;
  fit();
}

// The least-squares line y = F + n P. When the steps' n barely vary (or the line would slope
// down), no slope can be told from them: P = mean y / mean n and F = 0, which charges every
// token its share of the fixed part and so errs towards smaller chunks.
void StepPacer::fit() {
  const double spread = weight_ * sum_nn_ - sum_n_ * sum_n_;
  if (spread > 1e-6 * weight_ * sum_nn_) {
    const double slope = (weight_ * sum_ny_ - sum_n_ * sum_y_) / spread;
    const double fixed = (sum_y_ - slope * sum_n_) / weight_;
    if (slope > 0 && fixed >= 0) {
      prompt_token_seconds_ = slope;
      prompt_fixed_seconds_ = fixed;
      return;
    }
    if (slope > 0) {  // a line through the origin fits better than one with a negative fixed part
      prompt_token_seconds_ = sum_ny_ / sum_nn_;
      prompt_fixed_seconds_ = 0;
      return;
    }
  }
  prompt_token_seconds_ = sum_n_ > 0 ? sum_y_ / sum_n_ : -1.0;
  prompt_fixed_seconds_ = 0;
}

}  // namespace inkling::serve
