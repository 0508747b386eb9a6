#include "model/layers.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/thread_pool.h"
#include "tensor/error.h"

namespace inkling {

namespace {

// One decode step with the history length known at compile time: the per-channel loops unroll
// and the window lives in registers. Each channel does the general loop's operations in its
// order (ShortConv.PrefillThenDecodeEqualsOneShot steps through it against the general loop).
template <int64_t kHistory>
void short_conv_step(const float* u, int64_t channels, const float* taps, float* state, const float* residual,
                     float* out) {
  for (int64_t c = 0; c < channels; ++c) {
    const float* w = taps + c * (kHistory + 1);
    const float value = u[c];
    float y = value + w[kHistory] * value;
    float window[kHistory];
    for (int64_t j = 0; j < kHistory; ++j) window[j] = state[j * channels + c];
    for (int64_t j = 0; j < kHistory; ++j) y += w[j] * window[j];
    for (int64_t j = 0; j + 1 < kHistory; ++j) state[j * channels + c] = window[j + 1];
    state[(kHistory - 1) * channels + c] = value;
    out[c] = residual ? residual[c] + y : y;
  }
}

}  // namespace

void short_conv(const float* u, int64_t n, int64_t channels, const float* taps, int64_t kernel, float* state,
                const float* residual, float* out) {
  const int64_t history = kernel - 1;
  if (history > 15) throw Error("short convolution kernel longer than 16 taps");
  // Decode: the released models' kernel of 4 takes the unrolled step (the general loop below
  // cost ~17 us per 2048 channels, 1.4% of a decoded token over the 16 convolutions of 8 layers).
  if (n == 1 && history == 3) return short_conv_step<3>(u, channels, taps, state, residual, out);
  // Channels are independent; split them in blocks when the chunk is big enough to pay.
  constexpr int64_t kChannelBlock = 256;
  const int64_t blocks = (channels + kChannelBlock - 1) / kChannelBlock;
  kernels::parallel_for(blocks, channels * n > 4096 ? kernels::thread_count() : 1, [&](int64_t block, int) {
    for (int64_t c = block * kChannelBlock; c < std::min(channels, (block + 1) * kChannelBlock); ++c) {
      float window[16];
      for (int64_t j = 0; j < history; ++j) window[j] = state[j * channels + c];
      const float* w = taps + c * kernel;
      for (int64_t t = 0; t < n; ++t) {
        const float value = u[t * channels + c];
        float y = value + w[history] * value;
        for (int64_t j = 0; j < history; ++j) y += w[j] * window[j];
        for (int64_t j = 0; j + 1 < history; ++j) window[j] = window[j + 1];
        if (history > 0) window[history - 1] = value;
        out[t * channels + c] = residual ? residual[t * channels + c] + y : y;
      }
      for (int64_t j = 0; j < history; ++j) state[j * channels + c] = window[j];
    }
  });
}

float log_position_tau(int64_t position_1based, int64_t n_floor, float alpha) {
  return 1.0f + alpha * std::log(std::max(float(position_1based) / float(n_floor), 1.0f));
}

void route_token(const float* logits, const float* correction_bias, int64_t routed, int64_t shared, int64_t top_k,
                 float route_scale, float global_scale, int32_t* experts_out, float* weights_out) {
  if (routed > kMaxRoutedExperts || top_k > routed || top_k + shared > kMaxRoutedExperts)
    throw Error("router: " + std::to_string(routed) + " routed experts / top-" + std::to_string(top_k) +
                " outside what the router supports");
  float score[kMaxRoutedExperts];
  int32_t order[kMaxRoutedExperts];
  for (int64_t e = 0; e < routed; ++e) score[e] = 1.0f / (1.0f + std::exp(-logits[e])) + correction_bias[e];
  std::iota(order, order + routed, 0);
  std::partial_sort(order, order + top_k, order + routed, [&](int32_t a, int32_t b) {
    return score[a] > score[b] || (score[a] == score[b] && a < b);
  });
  double log_sig[kMaxRoutedExperts];
  double max_value = -INFINITY;
  for (int64_t i = 0; i < top_k + shared; ++i) {
    double l = i < top_k ? logits[order[i]] : logits[routed + (i - top_k)];
    // log(sigmoid(l)), stable on both sides
    log_sig[i] = l >= 0 ? -std::log1p(std::exp(-l)) : l - std::log1p(std::exp(l));
    max_value = std::max(max_value, log_sig[i]);
  }
  double total = 0.0;
  for (int64_t i = 0; i < top_k + shared; ++i) total += std::exp(log_sig[i] - max_value);
  for (int64_t i = 0; i < top_k + shared; ++i)
    weights_out[i] = float(std::exp(log_sig[i] - max_value) / total * route_scale * global_scale);
  std::copy(order, order + top_k, experts_out);
}

RouteDecision route_token(const float* logits, const float* correction_bias, int64_t routed, int64_t shared,
                          int64_t top_k, float route_scale, float global_scale) {
  RouteDecision decision;
  decision.experts.resize(size_t(top_k));
  decision.weights.resize(size_t(top_k + shared));
  route_token(logits, correction_bias, routed, shared, top_k, route_scale, global_scale, decision.experts.data(),
              decision.weights.data());
  return decision;
}

}  // namespace inkling
