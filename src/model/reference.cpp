#include "model/reference.h"

#include <algorithm>
#include <cmath>

namespace inkling::reference {

namespace {

using Matrix = std::vector<double>;  // row-major

Matrix dequantize(const WeightMatrix& w) {
  Matrix out(static_cast<size_t>(w.rows * w.cols));
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    dequantize_row(w, r, row.data());
    for (int64_t c = 0; c < w.cols; ++c) out[size_t(r * w.cols + c)] = row[size_t(c)];
  }
  return out;
}

std::vector<double> values(const TensorView& view) {
  std::vector<double> out(static_cast<size_t>(view.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = view.at_f32(i);
  return out;
}

// y[t] = W x[t] for a sequence x [T, cols].
Matrix linear(const WeightMatrix& w, const Matrix& x, int64_t tokens) {
  Matrix weights = dequantize(w);
  Matrix y(size_t(tokens * w.rows), 0.0);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t r = 0; r < w.rows; ++r) {
      double sum = 0.0;
      for (int64_t c = 0; c < w.cols; ++c) sum += weights[size_t(r * w.cols + c)] * x[size_t(t * w.cols + c)];
      y[size_t(t * w.rows + r)] = sum;
    }
  return y;
}

void rms_norm_rows(Matrix& x, int64_t rows, int64_t width, const std::vector<double>& weight, double eps) {
  for (int64_t t = 0; t < rows; ++t) {
    double sum = 0.0;
    for (int64_t i = 0; i < width; ++i) sum += x[size_t(t * width + i)] * x[size_t(t * width + i)];
    double inv = 1.0 / std::sqrt(sum / double(width) + eps);
    for (int64_t i = 0; i < width; ++i) x[size_t(t * width + i)] *= inv * weight[size_t(i)];
  }
}

// sconv over a whole sequence from a zero state: y = u + depthwise_causal_conv(u).
Matrix sconv(const Matrix& u, int64_t tokens, int64_t channels, const std::vector<double>& taps, int64_t kernel) {
  Matrix y(u.size());
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t c = 0; c < channels; ++c) {
      double sum = u[size_t(t * channels + c)];
      for (int64_t j = 0; j < kernel; ++j) {
        int64_t source = t - (kernel - 1) + j;  // xp index t + j minus the K-1 zero rows
        if (source >= 0) sum += taps[size_t(c * kernel + j)] * u[size_t(source * channels + c)];
      }
      y[size_t(t * channels + c)] = sum;
    }
  return y;
}

double silu(double v) { return v / (1.0 + std::exp(-v)); }

Matrix swiglu_expert(const GatedExpert& expert, const Matrix& x, int64_t tokens) {
  Matrix gate = linear(expert.gate, x, tokens), up = linear(expert.up, x, tokens);
  for (size_t i = 0; i < gate.size(); ++i) gate[i] = silu(gate[i]) * up[i];
  return linear(expert.down, gate, tokens);
}

}  // namespace

std::vector<double> banded_bias(const std::vector<double>& r, const std::vector<double>& P, int64_t L, int64_t S,
                                int64_t offset, int64_t d_rel, int64_t R, bool sliding, int64_t W,
                                const std::vector<double>* tau) {
  std::vector<double> bias(static_cast<size_t>(L * S));
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < S; ++j) {
      int64_t dist = (i + offset) - j;
      double value;
      if (dist < 0 || (sliding && dist >= W)) {
        value = kMasked;
      } else if (dist < R) {
        value = 0.0;
        for (int64_t d = 0; d < d_rel; ++d) value += r[size_t(i * d_rel + d)] * P[size_t(d * R + dist)];
      } else {
        value = 0.0;
      }
      if (tau && value > -1e29) value *= (*tau)[size_t(i)];
      bias[size_t(i * S + j)] = value;
    }
  return bias;
}

std::vector<float> forward(const Checkpoint& checkpoint, std::span<const int32_t> tokens) {
  const TextConfig& c = checkpoint.text();
  const ModelWeights& w = checkpoint.weights();
  const int64_t T = int64_t(tokens.size()), H = c.hidden_size, K = c.conv_kernel;
  const double eps = c.rms_norm_eps;
  Matrix x(static_cast<size_t>(T * H));
  {
    std::vector<float> row(static_cast<size_t>(H));
    for (int64_t t = 0; t < T; ++t) {
      dequantize_row(w.embed, tokens[size_t(t)], row.data());
      for (int64_t i = 0; i < H; ++i) x[size_t(t * H + i)] = row[size_t(i)];
    }
  }
  if (c.use_embed_norm) rms_norm_rows(x, T, H, values(w.embed_norm), eps);
  for (const LayerWeights& layer : w.layers) {
    const LayerSpec& s = layer.spec;
    const int64_t d = s.head_dim, nh = s.n_heads, nkv = s.n_kv_heads, dr = c.d_rel, R = s.rel_extent;
    // ---- attention ----
    Matrix h = x;
    rms_norm_rows(h, T, H, values(layer.attn_norm), eps);
    Matrix q = linear(layer.attn.q, h, T), k = linear(layer.attn.k, h, T), v = linear(layer.attn.v, h, T);
    Matrix r = linear(layer.attn.r, h, T);
    k = sconv(k, T, nkv * d, values(layer.attn.k_conv), K);
    v = sconv(v, T, nkv * d, values(layer.attn.v_conv), K);
    rms_norm_rows(k, T * nkv, d, values(layer.attn.k_norm), eps);
    rms_norm_rows(q, T * nh, d, values(layer.attn.q_norm), eps);
    std::vector<double> tau(size_t(T), 1.0);
    bool apply_tau = !s.sliding && c.log_scaling_n_floor.has_value();
    if (apply_tau)
      for (int64_t t = 0; t < T; ++t)
        tau[size_t(t)] = 1.0 + c.log_scaling_alpha * std::log(std::max(double(t + 1) / double(*c.log_scaling_n_floor), 1.0));
    std::vector<double> P = values(layer.attn.rel_proj);
    Matrix attn(size_t(T * nh * d), 0.0);
    for (int64_t head = 0; head < nh; ++head) {
      int64_t g = head / (nh / nkv);
      std::vector<double> rh(static_cast<size_t>(T * dr));
      for (int64_t t = 0; t < T; ++t)
        for (int64_t e = 0; e < dr; ++e) rh[size_t(t * dr + e)] = r[size_t(t * nh * dr + head * dr + e)];
      std::vector<double> bias = banded_bias(rh, P, T, T, 0, dr, R, s.sliding, c.sliding_window, apply_tau ? &tau : nullptr);
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> scores(static_cast<size_t>(T));
        double best = -INFINITY;
        for (int64_t j = 0; j < T; ++j) {
          double dot = 0.0;
          for (int64_t e = 0; e < d; ++e)
            dot += q[size_t(i * nh * d + head * d + e)] * tau[size_t(i)] * k[size_t(j * nkv * d + g * d + e)];
          scores[size_t(j)] = dot / double(d) + bias[size_t(i * T + j)];
          best = std::max(best, scores[size_t(j)]);
        }
        double total = 0.0;
        for (double& score : scores) total += (score = std::exp(score - best));
        for (int64_t j = 0; j < T; ++j)
          for (int64_t e = 0; e < d; ++e)
            attn[size_t(i * nh * d + head * d + e)] += scores[size_t(j)] / total * v[size_t(j * nkv * d + g * d + e)];
      }
    }
    Matrix a = linear(layer.attn.o, attn, T);
    Matrix a_conv = sconv(a, T, H, values(layer.attn_conv), K);
    for (size_t i = 0; i < x.size(); ++i) x[i] += a_conv[i];
    // ---- MLP ----
    Matrix n = x;
    rms_norm_rows(n, T, H, values(layer.mlp_norm), eps);
    Matrix m(size_t(T * H), 0.0);
    const MlpWeights& mw = layer.mlp;
    if (mw.dense) {
      m = swiglu_expert(mw.dense_mlp, n, T);
      for (double& value : m) value *= mw.global_scale;
    } else {
      const int64_t Rn = c.n_routed_experts, SH = c.n_shared_experts, top_k = c.experts_per_token;
      Matrix logits = linear(mw.router, n, T);
      for (int64_t t = 0; t < T; ++t) {
        const double* l = logits.data() + t * (Rn + SH);
        std::vector<std::pair<double, int64_t>> scored;
        for (int64_t e = 0; e < Rn; ++e) scored.emplace_back(1.0 / (1.0 + std::exp(-l[e])) + mw.correction_bias[size_t(e)], e);
        std::stable_sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
        std::vector<double> chosen_logits;
        for (int64_t i = 0; i < top_k; ++i) chosen_logits.push_back(l[scored[size_t(i)].second]);
        for (int64_t i = 0; i < SH; ++i) chosen_logits.push_back(l[Rn + i]);
        // softmax(logsigmoid(l)) == sigmoid(l) / sum(sigmoid)
        double total = 0.0;
        std::vector<double> sig;
        for (double value : chosen_logits) total += sig.emplace_back(1.0 / (1.0 + std::exp(-value)));
        Matrix token(n.begin() + t * H, n.begin() + (t + 1) * H);
        for (int64_t i = 0; i < top_k + SH; ++i) {
          double gamma = sig[size_t(i)] / total * c.route_scale * mw.global_scale;
          const GatedExpert& expert = i < top_k ? mw.experts[size_t(scored[size_t(i)].second)] : mw.shared[size_t(i - top_k)];
          Matrix y = swiglu_expert(expert, token, 1);
          for (int64_t e = 0; e < H; ++e) m[size_t(t * H + e)] += gamma * y[size_t(e)];
        }
      }
    }
    Matrix m_conv = sconv(m, T, H, values(layer.mlp_conv), K);
    for (size_t i = 0; i < x.size(); ++i) x[i] += m_conv[i];
  }
  rms_norm_rows(x, T, H, values(w.norm), eps);
  for (double& value : x) value /= c.mup_width_multiplier;
  WeightMatrix head = w.lm_head;
  head.rows = c.unpadded_vocab_size;
  std::vector<float> logits(static_cast<size_t>(T * head.rows));
  std::vector<float> row(static_cast<size_t>(H));
  for (int64_t v = 0; v < head.rows; ++v) {
    dequantize_row(head, v, row.data());
    for (int64_t t = 0; t < T; ++t) {
      double sum = 0.0;
      for (int64_t i = 0; i < H; ++i) sum += double(row[size_t(i)]) * x[size_t(t * H + i)];
      logits[size_t(t * head.rows + v)] = float(sum);
    }
  }
  return logits;
}

}  // namespace inkling::reference
