#include "runtime/generate/sampler.h"

#include <algorithm>
#include <cmath>

#include "tensor/error.h"

namespace inkling {

void SamplingParams::validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) throw Error("temperature must be >= 0");
  if (top_k < 0) throw Error("top_k must be >= 0");
  if (!(top_p > 0.0f && top_p <= 1.0f)) throw Error("top_p must be in (0, 1]");
  if (!(min_p >= 0.0f && min_p <= 1.0f)) throw Error("min_p must be in [0, 1]");
  if (!(repetition_penalty > 0.0f)) throw Error("repetition_penalty must be > 0");
  if (!std::isfinite(presence_penalty) || !std::isfinite(frequency_penalty)) throw Error("penalties must be finite");
}

Sampler::Sampler(SamplingParams params) : params_(params), rng_(params.seed) { params_.validate(); }

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> history) {
  const int32_t vocab = int32_t(logits.size());
  const SamplingParams& p = params_;
  if (p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    counts_.assign(size_t(vocab), 0);
    for (int32_t id : history)
      if (id >= 0 && id < vocab) ++counts_[size_t(id)];
    for (int32_t id = 0; id < vocab; ++id) {
      int32_t count = counts_[size_t(id)];
      if (!count) continue;
      float& l = logits[size_t(id)];
      if (p.repetition_penalty != 1.0f) l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
      l -= p.presence_penalty + p.frequency_penalty * float(count);
    }
  }
  if (p.temperature == 0.0f) {
    // Greedy; ties go to the lowest id (as torch.argmax does).
    return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  candidates_.clear();
  for (int32_t id = 0; id < vocab; ++id) candidates_.emplace_back(logits[size_t(id)] / p.temperature, id);
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  size_t keep = candidates_.size();
  if (p.top_k > 0 && size_t(p.top_k) < keep) {
    keep = size_t(p.top_k);
    std::partial_sort(candidates_.begin(), candidates_.begin() + keep, candidates_.end(), by_logit);
  } else {
    std::sort(candidates_.begin(), candidates_.end(), by_logit);
  }
  candidates_.resize(keep);
  float top = candidates_[0].first;
  double total = 0.0;
  for (auto& [value, id] : candidates_) {
    value = std::exp(value - top);
    total += value;
  }
  // min-p: drop tokens below min_p x the top probability.
  if (p.min_p > 0.0f) {
    size_t kept = 0;
    double kept_total = 0.0;
    for (auto& candidate : candidates_)
      if (candidate.first >= p.min_p * candidates_[0].first) {
        candidates_[kept++] = candidate;
        kept_total += candidate.first;
      }
    candidates_.resize(std::max<size_t>(kept, 1));
    total = kept_total;
  }
  // top-p: smallest prefix whose mass reaches top_p.
  if (p.top_p < 1.0f) {
    double mass = 0.0;
    size_t cut = candidates_.size();
    for (size_t i = 0; i < candidates_.size(); ++i) {
      mass += candidates_[i].first / total;
      if (mass >= p.top_p) {
        cut = i + 1;
        break;
      }
    }
    candidates_.resize(cut);
    total = 0.0;
    for (const auto& candidate : candidates_) total += candidate.first;
  }
  std::uniform_real_distribution<double> uniform(0.0, total);
  double pick = uniform(rng_);
  for (const auto& [weight, id] : candidates_) {
    pick -= weight;
    if (pick <= 0.0) return id;
  }
  return candidates_.back().second;
}

}  // namespace inkling
