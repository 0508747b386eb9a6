#include "runtime/generate/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "tensor/error.h"
#include "tensor/vector_exp.h"

namespace inkling {

void SamplingParams::validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) throw Error("temperature must be >= 0");
  if (top_k < 0) throw Error("top_k must be >= 0");
  if (!(top_p > 0.0f && top_p <= 1.0f)) throw Error("top_p must be in (0, 1]");
  if (!(min_p >= 0.0f && min_p <= 1.0f)) throw Error("min_p must be in [0, 1]");
  if (!(repetition_penalty > 0.0f)) throw Error("repetition_penalty must be > 0");
  if (!std::isfinite(presence_penalty)) throw Error("presence_penalty must be finite");
  if (!std::isfinite(frequency_penalty)) throw Error("frequency_penalty must be finite");
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

namespace {

typedef float Floats4 __attribute__((vector_size(16)));
typedef int32_t Ints4 __attribute__((vector_size(16)));

}  // namespace

void relative_weights(std::span<const float> values, float top, std::span<float> out) {
  const size_t n = std::min(values.size(), out.size());
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    Floats4 v;
    std::memcpy(&v, values.data() + i, sizeof v);
    const Floats4 w = exp_nonpositive<Floats4, Ints4>(v - top);
    std::memcpy(out.data() + i, &w, sizeof w);
  }
  for (; i < n; ++i) {
    Floats4 v = {values[i] - top, 0.0f, 0.0f, 0.0f};
    out[i] = exp_nonpositive<Floats4, Ints4>(v)[0];
  }
}

Sampler::Sampler(SamplingParams params) : params_(params), rng_(params.seed) { params_.validate(); }

bool Sampler::changes_logits() const {
  return params_.repetition_penalty != 1.0f || params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f;
}

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

// No filter: draw straight from the weights in id order. Sums run per block of 256 ids in eight
// interleaved chains, and the draw skips whole blocks by their sums: one dependent double chain
// over 200k tokens cost ~0.2 ms for the total and as much again for the draw.
int32_t Sampler::draw_by_id(float floor) {
  constexpr size_t kBlock = 256;
  const size_t vocab = weights_.size();
  for (size_t id = 0; id < vocab; ++id)
    if (!(scaled_[id] >= floor)) weights_[id] = 0.0f;  // NaN too
  block_sums_.assign((vocab + kBlock - 1) / kBlock, 0.0);
  double total = 0.0;
  for (size_t b = 0; b < block_sums_.size(); ++b) {
    const size_t begin = b * kBlock, end = std::min(vocab, begin + kBlock);
    double partial[8] = {};
    size_t id = begin;
    for (; id + 8 <= end; id += 8)
      for (int j = 0; j < 8; ++j) partial[j] += weights_[id + size_t(j)];
    for (; id < end; ++id) partial[0] += weights_[id];
    block_sums_[b] = ((partial[0] + partial[1]) + (partial[2] + partial[3])) +
                     ((partial[4] + partial[5]) + (partial[6] + partial[7]));
    total += block_sums_[b];
  }
  std::uniform_real_distribution<double> uniform(0.0, total);
  double pick = uniform(rng_);
  int32_t last = -1;  // the last token with weight: where rounding may leave the draw
  for (size_t b = 0; b < block_sums_.size(); ++b) {
    if (block_sums_[b] <= 0.0) continue;
    if (pick > block_sums_[b]) {
      pick -= block_sums_[b];
      last = int32_t(b);
      continue;
    }
    const size_t begin = b * kBlock, end = std::min(vocab, begin + kBlock);
    for (size_t id = begin; id < end; ++id) {
      if (weights_[id] <= 0.0f) continue;
      pick -= weights_[id];
      if (pick <= 0.0) return int32_t(id);
    }
    last = int32_t(b);
  }
  // Rounding left a sliver past the last block's sum: its last token with weight.
  if (last < 0) return 0;  // no weights at all (the caller sees to a finite top: not reached)
  const size_t begin = size_t(last) * kBlock, end = std::min(vocab, begin + kBlock);
  for (size_t id = end; id-- > begin;)
    if (weights_[id] > 0.0f) return int32_t(id);
  return int32_t(begin);
}

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> history) {
  const int32_t vocab = int32_t(logits.size());
  const SamplingParams& p = params_;
  if (changes_logits()) apply_penalties(logits, history);
  if (p.temperature == 0.0f) return argmax(logits);  // greedy
  scaled_.resize(size_t(vocab));
  const float inverse_temperature = 1.0f / p.temperature;
  for (int32_t id = 0; id < vocab; ++id) scaled_[size_t(id)] = logits[size_t(id)] * inverse_temperature;
  const float top = scaled_[size_t(argmax(scaled_))];
  // An infinite top (or nothing but NaN / -inf) leaves no finite weights: the largest id wins.
  if (!std::isfinite(top)) return argmax(logits);
  weights_.resize(size_t(vocab));
  relative_weights(scaled_, top, weights_);
  // Tokens more than 87 below the top (after temperature) weigh under float's smallest normal
  // next to its 1: leaving them out changes no draw in practice and keeps the rest small.
  const float floor = top - 87.0f;
  if (p.top_k == 0 && p.min_p == 0.0f && p.top_p >= 1.0f) return draw_by_id(floor);
  candidates_.clear();
  for (int32_t id = 0; id < vocab; ++id)
    if (scaled_[size_t(id)] >= floor) candidates_.push_back({scaled_[size_t(id)], weights_[size_t(id)], id});
  // Candidates stay in id order (any order samples the same distribution) unless a filter
  // ranks them.
  if (p.top_k > 0 && size_t(p.top_k) < candidates_.size()) {
    sort_best(size_t(p.top_k));
    candidates_.resize(size_t(p.top_k));
  }
  double total = 0.0;
  for (const Candidate& c : candidates_) total += c.weight;
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
  // top-p: the smallest prefix of the ranking whose mass reaches top_p. Once the tokens weighing
  // at least some w hold that mass, no lighter token can be in the prefix: w falls by 16x per
  // pass until that holds, the lighter tokens go, and what is left is ranked in growing
  // prefixes (a real distribution's nucleus is a few hundred tokens at most).
  if (p.top_p < 1.0f) {
    const double needed = double(p.top_p) * total;
    float lightest = 1.0f;  // the top token's weight
    for (;;) {
      double heavier = 0.0;
      for (const Candidate& c : candidates_) heavier += c.weight >= lightest ? double(c.weight) : 0.0;
      if (heavier >= needed || lightest < 1e-30f) break;
      lightest *= 1.0f / 16.0f;
    }
    if (lightest >= 1e-30f) {
      size_t kept = 0;
      for (const Candidate& c : candidates_)
        if (c.weight >= lightest) candidates_[kept++] = c;
      candidates_.resize(kept);
    }
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
