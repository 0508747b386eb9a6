#include "runtime/generate/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

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

int32_t argmax(std::span<const float> logits) {
  // Eight running maxima (independent chains), then the first index holding the maximum:
  // std::max_element took 616 us over 200k logits (one dependent load and compare per element),
  // this 46 us; a decode step of the bench model is ~20 ms.
  const size_t n = logits.size();
  float lane_max[8];
  for (float& m : lane_max) m = -std::numeric_limits<float>::infinity();
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) lane_max[j] = logits[i + j] > lane_max[j] ? logits[i + j] : lane_max[j];
  float best = -std::numeric_limits<float>::infinity();
  for (float m : lane_max) best = m > best ? m : best;
  for (; i < n; ++i) best = logits[i] > best ? logits[i] : best;
  for (size_t id = 0; id < n; ++id)
    if (logits[id] == best) return int32_t(id);
  return 0;  // every logit NaN
}

Sampler::Sampler(SamplingParams params) : params_(params), rng_(params.seed) { params_.validate(); }

void Sampler::apply_penalties(std::span<float> logits, std::span<const int32_t> history) {
  const SamplingParams& p = params_;
  const int32_t vocab = int32_t(logits.size());
  if (counts_.size() != logits.size()) counts_.assign(logits.size(), 0);
  for (int32_t id : history)
    if (id >= 0 && id < vocab) ++counts_[size_t(id)];
  for (int32_t id : history) {
    if (id < 0 || id >= vocab) continue;
    const int32_t count = counts_[size_t(id)];
    if (count == 0) continue;  // already applied
    float& l = logits[size_t(id)];
    if (p.repetition_penalty != 1.0f) l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
    l -= p.presence_penalty + p.frequency_penalty * float(count);
    counts_[size_t(id)] = 0;
  }
}

void Sampler::sort_best(size_t count) {
  auto better = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  count = std::min(count, candidates_.size());
  std::partial_sort(candidates_.begin(), candidates_.begin() + std::ptrdiff_t(count), candidates_.end(), better);
}

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> history) {
  const int32_t vocab = int32_t(logits.size());
  const SamplingParams& p = params_;
  if (p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f)
    apply_penalties(logits, history);
  if (p.temperature == 0.0f) return argmax(logits);  // greedy
  float top = -std::numeric_limits<float>::infinity();
  for (int32_t id = 0; id < vocab; ++id) top = std::max(top, logits[size_t(id)] / p.temperature);
  // An infinite top (or nothing but NaN / -inf) leaves no finite weights: the largest id wins.
  if (!std::isfinite(top)) return argmax(logits);
  // Tokens more than 87 below the top (after temperature) weigh under float's smallest normal
  // next to its 1: they cannot be drawn, and leaving them out keeps the rest of the work small.
  const float floor = top - 87.0f;
  candidates_.clear();
  for (int32_t id = 0; id < vocab; ++id) {
    const float logit = logits[size_t(id)] / p.temperature;
    if (logit >= floor) candidates_.push_back({logit, 0.0f, id});
  }
  // Candidates stay in id order (any order samples the same distribution) unless a filter
  // ranks them.
  if (p.top_k > 0 && size_t(p.top_k) < candidates_.size()) {
    sort_best(size_t(p.top_k));
    candidates_.resize(size_t(p.top_k));
  }
  double total = 0.0;
  for (Candidate& c : candidates_) {
    c.weight = std::exp(c.logit - top);
    total += c.weight;
  }
  // min-p: drop tokens below min_p x the top probability (the top token's weight is 1).
  if (p.min_p > 0.0f) {
    size_t kept = 0;
    double kept_total = 0.0;
    for (const Candidate& c : candidates_)
      if (c.weight >= p.min_p) {
        candidates_[kept++] = c;
        kept_total += c.weight;
      }
    candidates_.resize(kept);  // the top token always stays: its weight 1 >= min_p
    total = kept_total;
  }
  // top-p: the smallest prefix of the ranking whose mass reaches top_p. Ranked in growing
  // prefixes: a real distribution reaches its nucleus within a few hundred tokens.
  if (p.top_p < 1.0f) {
    size_t ranked = std::min<size_t>(256, candidates_.size());
    size_t cut = candidates_.size();
    for (;;) {
      sort_best(ranked);
      double mass = 0.0;
      size_t i = 0;
      for (; i < ranked; ++i) {
        mass += candidates_[i].weight / total;
        if (mass >= p.top_p) break;
      }
      if (i < ranked) {
        cut = i + 1;
        break;
      }
      if (ranked == candidates_.size()) break;
      ranked = std::min(ranked * 4, candidates_.size());
    }
    candidates_.resize(cut);
    total = 0.0;
    for (const Candidate& c : candidates_) total += c.weight;
  }
  std::uniform_real_distribution<double> uniform(0.0, total);
  double pick = uniform(rng_);
  for (const Candidate& c : candidates_) {
    pick -= c.weight;
    if (pick <= 0.0) return c.id;
  }
  return candidates_.back().id;
}

}  // namespace inkling
