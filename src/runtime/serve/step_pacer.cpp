#include "runtime/serve/step_pacer.h"

#include <algorithm>
#include <cmath>

namespace inkling::serve {

namespace {

// Weight of the newest step in the moving averages: a few steps follow a change of load, one slow
// step (a page fault, another process) moves the estimate by less than a third.
constexpr double kNewest = 0.3;

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
  const double room = target_seconds_ - decode;
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
  blend(prompt_token_seconds_, std::max(seconds - decode, 0.0) / double(prompt_tokens));
}

}  // namespace inkling::serve
