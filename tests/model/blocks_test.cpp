// The seed's unit tests of the layer building blocks against scalar references.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernels/linear.h"
#include "model/layers.h"
#include "model/reference.h"
#include "tensor/dtype.h"

namespace inkling {
namespace {

std::vector<double> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  std::vector<double> out(n);
  for (double& v : out) v = normal(rng);
  return out;
}

TEST(BandedBias, MatchesScalarFourWayRule) {
  const int64_t L = 5, S = 9, offset = 4, R = 6, W = 4, d_rel = 3;
  std::vector<double> r = random_values(size_t(L * d_rel), 1), P = random_values(size_t(d_rel * R), 2);
  for (bool sliding : {true, false}) {
    std::vector<double> bias = reference::banded_bias(r, P, L, S, offset, d_rel, R, sliding, W);
    int masked = 0, zero_band = 0, in_band = 0;
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < S; ++j) {
        int64_t dist = (i + offset) - j;
        double expected;
        if (dist < 0) {
          expected = -1e30;
        } else if (sliding && dist >= W) {
          expected = -1e30;
        } else if (dist < R) {
          expected = 0.0;
          for (int64_t d = 0; d < d_rel; ++d) expected += r[size_t(i * d_rel + d)] * P[size_t(d * R + dist)];
        } else {
          expected = 0.0;
        }
        masked += expected == -1e30;
        zero_band += expected == 0.0 && dist >= R;
        in_band += dist >= 0 && dist < R && !(sliding && dist >= W);
        EXPECT_DOUBLE_EQ(bias[size_t(i * S + j)], expected) << "i=" << i << " j=" << j << " sliding=" << sliding;
      }
    EXPECT_GT(masked, 0);
    EXPECT_GT(in_band, 0);
    if (!sliding) {
      EXPECT_GT(zero_band, 0);  // global: beyond the extent the bias is exactly 0
    }
  }
}

TEST(LogScaling, TauIsIdentityBelowFloorAndScalesOnlyUnmaskedBias) {
  for (int64_t pos = 1; pos <= 8; ++pos) EXPECT_FLOAT_EQ(log_position_tau(pos, 8, 0.1f), 1.0f) << pos;
  EXPECT_NEAR(log_position_tau(16, 8, 0.1f), 1.0f + 0.1f * std::log(2.0f), 1e-6);
  EXPECT_GT(log_position_tau(9, 8, 0.1f), 1.0f);
  const int64_t L = 3, S = 3, d_rel = 2, R = 3;
  std::vector<double> r = random_values(size_t(L * d_rel), 3), P = random_values(size_t(d_rel * R), 4);
  std::vector<double> tau = {1.0, 1.5, 2.0};
  std::vector<double> plain = reference::banded_bias(r, P, L, S, 0, d_rel, R, false, 0);
  std::vector<double> scaled = reference::banded_bias(r, P, L, S, 0, d_rel, R, false, 0, &tau);
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < S; ++j) {
      double p = plain[size_t(i * S + j)], s = scaled[size_t(i * S + j)];
      if (p == reference::kMasked) {
        EXPECT_EQ(s, reference::kMasked);
      } else {
        EXPECT_NEAR(s, p * tau[size_t(i)], 1e-12);
      }
    }
}

TEST(ShortConv, PrefillThenDecodeEqualsOneShot) {
  const int64_t channels = 37, kernel = 4, total = 10;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  std::vector<float> u(static_cast<size_t>(total * channels)), taps(static_cast<size_t>(channels * kernel));
  for (float& v : u) v = round_to_bf16(normal(rng));  // bf16 inputs, f32 state
  for (float& v : taps) v = normal(rng);
  std::vector<float> one_shot(u.size()), one_state(size_t((kernel - 1) * channels), 0.0f);
  short_conv(u.data(), total, channels, taps.data(), kernel, one_state.data(), nullptr, one_shot.data());
  std::vector<float> stepped(u.size()), state(size_t((kernel - 1) * channels), 0.0f);
  short_conv(u.data(), 7, channels, taps.data(), kernel, state.data(), nullptr, stepped.data());
  for (int64_t t = 7; t < total; ++t)
    short_conv(u.data() + t * channels, 1, channels, taps.data(), kernel, state.data(), nullptr,
               stepped.data() + t * channels);
  for (size_t i = 0; i < u.size(); ++i) EXPECT_NEAR(stepped[i], one_shot[i], 1e-6) << i;
  for (size_t i = 0; i < state.size(); ++i) EXPECT_EQ(state[i], one_state[i]) << i;
  // The state is the last K-1 inputs, and y = u + conv(u) with zero history at the start.
  for (int64_t c = 0; c < channels; ++c) {
    EXPECT_EQ(one_state[size_t(2 * channels + c)], u[size_t(9 * channels + c)]);
    float expected0 = u[size_t(c)] * (1.0f + taps[size_t(c * kernel + 3)]);
    EXPECT_NEAR(one_shot[size_t(c)], expected0, 1e-6);
  }
}

TEST(Router, HandComputedCaseSelectionUsesBiasWeightsDoNot) {
  // 4 routed + 2 shared, k = 2. Raw logits make expert 0 the best by sigmoid alone, but the
  // correction bias pushes expert 3 above it.
  const float logits[6] = {2.0f, 1.0f, -1.0f, 0.5f, 0.3f, -0.4f};
  const float bias[4] = {0.0f, 0.0f, 0.0f, 0.5f};
  const float route_scale = 8.0f, global_scale = 0.25f;
  RouteDecision decision = route_token(logits, bias, 4, 2, 2, route_scale, global_scale);
  ASSERT_EQ(decision.experts.size(), 2u);
  EXPECT_EQ(decision.experts[0], 3);  // sigmoid(0.5) + 0.5 = 1.122 > sigmoid(2) = 0.881
  EXPECT_EQ(decision.experts[1], 0);
  auto sigmoid = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  double s[4] = {sigmoid(0.5), sigmoid(2.0), sigmoid(0.3), sigmoid(-0.4)};  // chosen routed, then shared
  double total = s[0] + s[1] + s[2] + s[3];
  ASSERT_EQ(decision.weights.size(), 4u);
  double sum = 0.0;
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(decision.weights[size_t(i)], s[i] / total * route_scale * global_scale, 1e-6) << i;
    sum += decision.weights[size_t(i)];
  }
  EXPECT_NEAR(sum, route_scale * global_scale, 1e-5);
}

TEST(SharedExperts, DenseConcatenationEqualsPerExpertLoop) {
  const int64_t shared = 2, width = 24, hidden = 32;
  std::mt19937 rng(6);
  std::normal_distribution<float> normal;
  auto random_matrix = [&](int64_t rows, int64_t cols) {
    std::vector<float> m(static_cast<size_t>(rows * cols));
    for (float& v : m) v = normal(rng) / std::sqrt(float(cols));
    return m;
  };
  auto view = [](const std::vector<float>& m, int64_t rows, int64_t cols) {
    WeightMatrix w;
    w.format = WeightFormat::F32;
    w.rows = rows;
    w.cols = cols;
    w.data = reinterpret_cast<const uint8_t*>(m.data());
    w.row_stride = cols * 4;
    return w;
  };
  std::vector<std::vector<float>> gate, up, down;
  for (int64_t s = 0; s < shared; ++s) {
    gate.push_back(random_matrix(width, hidden));
    up.push_back(random_matrix(width, hidden));
    down.push_back(random_matrix(hidden, width));
  }
  std::vector<float> x(static_cast<size_t>(hidden));
  for (float& v : x) v = normal(rng);
  const float gamma[2] = {0.7f, 1.9f};
  // Per-expert loop (what the engine computes).
  std::vector<float> per_expert(static_cast<size_t>(hidden), 0.0f);
  std::vector<float> act(static_cast<size_t>(width)), y(static_cast<size_t>(hidden));
  for (int64_t s = 0; s < shared; ++s) {
    kernels::swiglu_matvec(view(gate[size_t(s)], width, hidden), view(up[size_t(s)], width, hidden), x.data(), act.data());
    for (float& a : act) a *= gamma[s];
    kernels::matvec(view(down[size_t(s)], hidden, width), act.data(), y.data());
    for (int64_t i = 0; i < hidden; ++i) per_expert[size_t(i)] += y[size_t(i)];
  }
  // The seed's dense form: gate/up [SH*I, H] expert-major, down [H, SH*I], gammas over I.
  std::vector<float> gate_cat, up_cat, down_cat(static_cast<size_t>(hidden * shared * width));
  for (int64_t s = 0; s < shared; ++s) {
    gate_cat.insert(gate_cat.end(), gate[size_t(s)].begin(), gate[size_t(s)].end());
    up_cat.insert(up_cat.end(), up[size_t(s)].begin(), up[size_t(s)].end());
    for (int64_t h = 0; h < hidden; ++h)
      for (int64_t i = 0; i < width; ++i)
        down_cat[size_t(h * shared * width + s * width + i)] = down[size_t(s)][size_t(h * width + i)];
  }
  std::vector<double> dense(size_t(hidden), 0.0);
  for (int64_t row = 0; row < shared * width; ++row) {
    double g = 0.0, u = 0.0;
    for (int64_t c = 0; c < hidden; ++c) {
      g += double(gate_cat[size_t(row * hidden + c)]) * x[size_t(c)];
      u += double(up_cat[size_t(row * hidden + c)]) * x[size_t(c)];
    }
    double a = g / (1.0 + std::exp(-g)) * u * gamma[row / width];
    for (int64_t h = 0; h < hidden; ++h) dense[size_t(h)] += double(down_cat[size_t(h * shared * width + row)]) * a;
  }
  for (int64_t h = 0; h < hidden; ++h) EXPECT_NEAR(per_expert[size_t(h)], dense[size_t(h)], 1e-5) << h;
}

}  // namespace
}  // namespace inkling
