// Token selection: greedy ties, the sampled distribution, each filter's cut, penalties, seeds,
// and a vocabulary-sized draw against filters computed by a full sort.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "runtime/generate/sampler.h"
#include "tensor/error.h"

namespace inkling {
namespace {

std::vector<float> softmax(const std::vector<float>& logits, float temperature) {
  float top = *std::max_element(logits.begin(), logits.end()) / temperature;
  std::vector<float> p(logits.size());
  double total = 0.0;
  for (size_t i = 0; i < p.size(); ++i) total += p[i] = std::exp(logits[i] / temperature - top);
  for (float& v : p) v = float(v / total);
  return p;
}

std::map<int32_t, int> draw(SamplingParams params, const std::vector<float>& logits, int samples,
                            std::vector<int32_t> history = {}) {
  Sampler sampler(params);
  std::map<int32_t, int> counts;
  for (int i = 0; i < samples; ++i) {
    std::vector<float> copy = logits;
    ++counts[sampler.sample(copy, history)];
  }
  return counts;
}

TEST(Argmax, LowestIdAmongTiesAndNaNsNeverWin) {
  EXPECT_EQ(argmax(std::vector<float>{1.0f, 3.0f, 2.0f, 3.0f}), 1);
  std::vector<float> long_row(1003, -5.0f);
  long_row[997] = 4.0f;  // past the last full block of eight
  long_row[1001] = 4.0f;
  EXPECT_EQ(argmax(long_row), 997);
  long_row[3] = 4.0f;
  EXPECT_EQ(argmax(long_row), 3);
  EXPECT_EQ(argmax(std::vector<float>{NAN, -1.0f, NAN, 0.5f}), 3);
  EXPECT_EQ(argmax(std::vector<float>{-INFINITY, -INFINITY}), 0);
}

TEST(RelativeWeights, MatchStdExpOverTheRange) {
  std::vector<float> values;
  for (float x = -87.0f; x <= 0.0f; x += 0.0137f) values.push_back(x);
  values.push_back(0.0f);
  values.push_back(-1e-30f);
  values.push_back(-120.0f);  // below the range: exp(-87)
  values.push_back(-3.4657359f);  // k ln2 - 0: a rounding boundary of k
  std::vector<float> weights(values.size());
  const float top = 2.5f;  // values are relative to it
  std::vector<float> shifted(values.size());
  for (size_t i = 0; i < values.size(); ++i) shifted[i] = values[i] + top;
  relative_weights(shifted, top, weights);
  double worst = 0.0;
  for (size_t i = 0; i < values.size(); ++i) {
    const double want = std::exp(double(std::max(shifted[i] - top, -87.0f)));
    worst = std::max(worst, std::fabs(weights[i] - want) / want);
  }
  std::printf("[ measured ] relative_weights: worst relative error %.2g over %zu values\n", worst, values.size());
  EXPECT_LT(worst, 3e-7);
}

TEST(Sampler, GreedyTakesTheLargestLogit) {
  Sampler sampler({});
  std::vector<float> logits = {0.1f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(sampler.sample(logits, {}), 1);
}

// Frequencies over 40000 draws against the softmax: each within 5 standard deviations.
TEST(Sampler, TemperatureSamplesTheSoftmax) {
  const std::vector<float> logits = {1.0f, 0.0f, 2.5f, -1.0f, 1.5f};
  for (float temperature : {0.7f, 1.0f, 2.0f}) {
    SamplingParams params;
    params.temperature = temperature;
    params.seed = 7;
    const int samples = 40000;
    std::map<int32_t, int> counts = draw(params, logits, samples);
    std::vector<float> want = softmax(logits, temperature);
    for (size_t id = 0; id < want.size(); ++id) {
      const double expected = want[id] * samples, sd = std::sqrt(expected * (1.0 - want[id]));
      EXPECT_NEAR(counts[int32_t(id)], expected, 5.0 * sd + 1.0) << "T=" << temperature << " id " << id;
    }
  }
}

TEST(Sampler, TopKKeepsTheKBest) {
  SamplingParams params;
  params.temperature = 1.0f;
  params.top_k = 2;
  std::map<int32_t, int> counts = draw(params, {1.0f, 3.0f, 0.5f, 2.9f, -2.0f}, 4000);
  EXPECT_EQ(counts.size(), 2u);
  EXPECT_GT(counts[1], 0);
  EXPECT_GT(counts[3], 0);
}

TEST(Sampler, TopPKeepsTheSmallestNucleus) {
  // Probabilities ~ 0.64, 0.24, 0.09, 0.03: top_p 0.8 needs the first two, 0.9 the first three.
  const std::vector<float> logits = {0.0f, 2.0f, 1.0f, 3.0f};
  SamplingParams params;
  params.temperature = 1.0f;
  params.top_p = 0.8f;
  std::map<int32_t, int> counts = draw(params, logits, 4000);
  EXPECT_EQ((std::set<int32_t>{counts.begin()->first, std::next(counts.begin())->first}), (std::set<int32_t>{1, 3}));
  EXPECT_EQ(counts.size(), 2u);
  params.top_p = 0.9f;
  EXPECT_EQ(draw(params, logits, 4000).size(), 3u);
}

TEST(Sampler, MinPDropsTheUnlikely) {
  SamplingParams params;
  params.temperature = 1.0f;
  params.min_p = 0.2f;  // exp(-1) = 0.37 stays, exp(-2) = 0.14 goes
  std::map<int32_t, int> counts = draw(params, {3.0f, 2.0f, 1.0f, 3.0f}, 4000);
  EXPECT_EQ(counts.size(), 3u);
  EXPECT_EQ(counts.count(2), 0u);
}

TEST(Sampler, PenaltiesChangeSeenTokensOnly) {
  SamplingParams params;
  params.repetition_penalty = 2.0f;
  params.presence_penalty = 0.5f;
  params.frequency_penalty = 0.25f;
  Sampler sampler(params);
  std::vector<float> logits = {4.0f, -2.0f, 1.0f, 3.0f};
  // Token 0 seen twice, token 1 once, token 3 never; an id outside the vocabulary is ignored.
  EXPECT_EQ(sampler.sample(logits, std::vector<int32_t>{0, 1, 0, 99, -1}), 3);
  EXPECT_FLOAT_EQ(logits[0], 4.0f / 2.0f - 0.5f - 0.25f * 2.0f);
  EXPECT_FLOAT_EQ(logits[1], -2.0f * 2.0f - 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(logits[2], 1.0f);
  EXPECT_FLOAT_EQ(logits[3], 3.0f);
  // The per-id counts start from zero again on the next call.
  std::vector<float> again = {4.0f, -2.0f, 1.0f, 3.0f};
  sampler.sample(again, std::vector<int32_t>{1});
  EXPECT_FLOAT_EQ(again[0], 4.0f);
  EXPECT_FLOAT_EQ(again[1], -2.0f * 2.0f - 0.5f - 0.25f);
}

TEST(Sampler, SameSeedSameDraws) {
  SamplingParams params;
  params.temperature = 1.0f;
  params.seed = 42;
  std::vector<float> logits(1000);
  std::mt19937 rng(1);
  for (float& v : logits) v = std::normal_distribution<float>(0.0f, 2.0f)(rng);
  Sampler a(params), b(params);
  std::vector<int32_t> first, second;
  for (int i = 0; i < 50; ++i) {
    std::vector<float> x = logits, y = logits;
    first.push_back(a.sample(x, {}));
    second.push_back(b.sample(y, {}));
  }
  EXPECT_EQ(first, second);
  EXPECT_GT(std::set<int32_t>(first.begin(), first.end()).size(), 5u);
}

// Vocabulary-sized rows: every draw lies in the top-k / top-p set that a full sort of the row
// gives, and a nucleus larger than the first ranked prefix (256) is sampled across its width.
TEST(Sampler, VocabularyRowFiltersMatchAFullSort) {
  const int vocab = 201024;
  auto ranking = [](const std::vector<float>& logits) {
    std::vector<int32_t> order(logits.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
    });
    return order;
  };
  auto nucleus_of = [&](const std::vector<float>& logits, double top_p) {
    std::vector<float> p = softmax(logits, 1.0f);
    std::vector<int32_t> nucleus;
    double mass = 0.0;
    for (int32_t id : ranking(logits)) {
      nucleus.push_back(id);
      mass += p[size_t(id)];
      if (mass >= top_p) break;
    }
    return nucleus;
  };
  // As a model gives it: a few strong tokens over a wide bulk.
  std::mt19937 rng(3);
  std::vector<float> logits(vocab);
  for (float& v : logits) v = std::normal_distribution<float>(0.0f, 1.5f)(rng);
  for (int i = 0; i < 40; ++i) logits[size_t(rng() % vocab)] = 11.0f + float(i % 3);
  SamplingParams params;
  params.temperature = 1.0f;
  params.top_p = 0.95f;
  const std::vector<int32_t> nucleus = nucleus_of(logits, 0.95);
  const std::set<int32_t> in_nucleus(nucleus.begin(), nucleus.end());
  for (const auto& [id, count] : draw(params, logits, 100)) EXPECT_TRUE(in_nucleus.count(id)) << id;
  params.top_p = 1.0f;
  params.top_k = 5;
  const std::vector<int32_t> order = ranking(logits);
  const std::set<int32_t> top5(order.begin(), order.begin() + 5);
  for (const auto& [id, count] : draw(params, logits, 100)) EXPECT_TRUE(top5.count(id)) << id;
  // A plateau of 2000 equal tokens over a flat bulk: the 0.5 nucleus is ~1700 of them, in id order.
  std::vector<float> plateau(vocab, 0.0f);
  for (int i = 0; i < 2000; ++i) plateau[size_t(100 * i + 7)] = 5.0f;
  const std::vector<int32_t> wide = nucleus_of(plateau, 0.5);
  ASSERT_GT(wide.size(), 1000u);
  const std::set<int32_t> in_wide(wide.begin(), wide.end()), first_ranked(wide.begin(), wide.begin() + 256);
  params.top_k = 0;
  params.top_p = 0.5f;
  int past_first_prefix = 0, draws = 0;
  for (const auto& [id, count] : draw(params, plateau, 200)) {
    EXPECT_TRUE(in_wide.count(id)) << id;
    draws += count;
    if (!first_ranked.count(id)) past_first_prefix += count;
  }
  // (wide.size() - 256) / wide.size() of the draws, ~85%, land past the first 256.
  EXPECT_GT(past_first_prefix, draws / 2);
}

// Rows with no finite weights to draw from fall back to the argmax instead of dividing by NaN.
TEST(Sampler, InfiniteAndNaNLogits) {
  SamplingParams params;
  params.temperature = 1.0f;
  params.top_p = 0.9f;
  Sampler sampler(params);
  std::vector<float> with_inf = {0.0f, INFINITY, 1.0f, INFINITY};
  EXPECT_EQ(sampler.sample(with_inf, {}), 1);
  std::vector<float> all_minus_inf(5, -INFINITY);
  EXPECT_EQ(sampler.sample(all_minus_inf, {}), 0);
  std::vector<float> some_nan = {NAN, 0.0f, NAN, -50.0f};
  for (int i = 0; i < 20; ++i) {
    std::vector<float> row = some_nan;
    EXPECT_EQ(sampler.sample(row, {}), 1);  // -50 is e^-50 of token 1's weight: outside top_p
  }
}

// A nucleus across two weight levels: 100 tokens at logit 5 hold 40% of the mass, 3000 at logit 2
// the rest, so top_p 0.9 takes all of the first and the first ~2500 of the second (by id): a
// prefilter that stopped at the heavy level would never draw the light one.
TEST(Sampler, TopPAcrossWeightLevels) {
  std::vector<float> logits(44000, -INFINITY);
  for (int i = 0; i < 100; ++i) logits[size_t(300 * i + 1)] = 5.0f;  // odd ids
  std::vector<int32_t> light;
  for (int i = 0; i < 3000; ++i) {  // even ids, interleaved with the heavy ones
    logits[size_t(14 * i)] = 2.0f;
    light.push_back(14 * i);
  }
  const double heavy_mass = 100 * std::exp(5.0), light_mass = 3000 * std::exp(2.0);
  const double light_needed = 0.9 * (heavy_mass + light_mass) - heavy_mass;
  const size_t light_kept = size_t(std::ceil(light_needed / std::exp(2.0)));
  const std::set<int32_t> kept_light(light.begin(), light.begin() + std::ptrdiff_t(light_kept));
  SamplingParams params;
  params.temperature = 1.0f;
  params.top_p = 0.9f;
  params.seed = 4;
  const int samples = 2000;
  int light_draws = 0;
  for (const auto& [id, count] : draw(params, logits, samples)) {
    if (logits[size_t(id)] == 2.0f) {
      EXPECT_TRUE(kept_light.count(id)) << id;
      light_draws += count;
    } else {
      EXPECT_EQ(logits[size_t(id)], 5.0f) << id;
    }
  }
  const double light_share = light_needed / (heavy_mass + light_needed);  // ~0.55
  EXPECT_NEAR(light_draws, light_share * samples, 5 * std::sqrt(samples * light_share * (1 - light_share)));
}

// Without filters the draw walks the vocabulary in blocks by their sums: tokens far apart, in
// blocks of their own and in partly empty ones, are drawn at their probabilities, NaNs never.
TEST(Sampler, UnfilteredDrawAcrossBlocks) {
  std::vector<float> logits(20001, -INFINITY);
  logits[5] = 1.0f;
  logits[15000] = 1.0f;
  logits[15001] = NAN;
  logits[20000] = 1.0f + std::log(2.0f);  // twice as likely as each of the others, in a last partial block
  logits[7] = -200.0f;                     // below the floor: never
  SamplingParams params;
  params.temperature = 1.0f;
  params.seed = 9;
  const int samples = 8000;
  std::map<int32_t, int> counts = draw(params, logits, samples);
  EXPECT_EQ(counts.size(), 3u);
  EXPECT_NEAR(counts[5], samples / 4, 5 * std::sqrt(samples * 0.25 * 0.75));
  EXPECT_NEAR(counts[15000], samples / 4, 5 * std::sqrt(samples * 0.25 * 0.75));
  EXPECT_NEAR(counts[20000], samples / 2, 5 * std::sqrt(samples * 0.25));
}

TEST(Sampler, RejectsInvalidParameters) {
  SamplingParams params;
  params.temperature = -1.0f;
  EXPECT_THROW(Sampler{params}, Error);
  params = {};
  params.top_p = 0.0f;
  EXPECT_THROW(Sampler{params}, Error);
  params = {};
  params.min_p = 1.5f;
  EXPECT_THROW(Sampler{params}, Error);
}

}  // namespace
}  // namespace inkling
