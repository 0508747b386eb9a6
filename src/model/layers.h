// Small building blocks of the Inkling layer, shared by the production forward pass and tests.
#pragma once

#include <cstdint>
#include <vector>

namespace inkling {

// Causal depthwise short convolution with the inner residual, over `channels` flat channels:
//   xp = [state (K-1 rows); u (n rows)],  y[t] = u[t] + sum_j taps[c*K + j] * xp[t + j]
// then state = the last K-1 rows of xp. Everything f32. out may alias u; `residual`
// (may alias out) is added when non-null: out = residual + y.
void short_conv(const float* u, int64_t n, int64_t channels, const float* taps, int64_t kernel,
                float* state, const float* residual, float* out);

// Log-position temperature for a 1-based query position (global layers only).
float log_position_tau(int64_t position_1based, int64_t n_floor, float alpha);

// Router decision for one token. `logits` holds Rn routed + SH shared raw router logits.
// Selection: top-k of sigmoid(logit) + correction bias; weights: softmax over the logsigmoid of the
// k chosen + SH shared raw logits, times route_scale x global_scale (the bias never enters them).
struct RouteDecision {
  std::vector<int32_t> experts;   // [k], highest score first
  std::vector<float> weights;     // [k + SH]: routed then shared
};
// Writes the k chosen experts and the k + SH weights into caller buffers (no allocation;
// routed <= kMaxRoutedExperts).
constexpr int64_t kMaxRoutedExperts = 1024;
void route_token(const float* logits, const float* correction_bias, int64_t routed, int64_t shared, int64_t top_k,
                 float route_scale, float global_scale, int32_t* experts_out, float* weights_out);
RouteDecision route_token(const float* logits, const float* correction_bias, int64_t routed, int64_t shared,
                          int64_t top_k, float route_scale, float global_scale);

}  // namespace inkling
