#include "model/forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>

#include "kernels/linear.h"
#include "kernels/product_profile.h"
#include "tensor/dtype.h"
#include "kernels/thread_pool.h"
#include "kernels/vector_ops.h"
#include "model/attention.h"
#include "model/layers.h"
#include "tensor/error.h"

namespace inkling {

// The ISA's sum of squares: one scalar chain of adds was ~1.6 us per 2048 values, ~30 us of a
// decoded token over its 18 hidden-size norms.
void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* out) {
  kernels::rmsnorm(x, {weight, DType::F32}, eps, n, out);
}

std::vector<float> to_f32(const TensorView& view) {
  std::vector<float> out(static_cast<size_t>(view.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = view.at_f32(i);
  return out;
}

namespace {

// From this many tokens per chunk, attention transposes the keys first (see attention()).
constexpr int64_t kTransposedKeysMinTokens = 16;

inline float silu(float v) { return v / (1.0f + std::exp(-v)); }

inline float f16_rounded(float v) { return f16_to_f32(f32_to_f16(v)); }

inline void store_kv(uint8_t* dst, const float* src, int64_t n, DType dtype) {
  if (dtype == DType::F32) {
    std::memcpy(dst, src, size_t(n) * 4);
  } else {
    auto* out = reinterpret_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(src[i]);
  }
}

}  // namespace

InklingModel::InklingModel(const Checkpoint& checkpoint, RunOptions options)
    : weights_(checkpoint.weights()), config_(checkpoint.text()), options_(options) {
  if (options_.kv_dtype != DType::F32 && options_.kv_dtype != DType::BF16)
    throw Error("KV cache dtype must be f32 or bf16");
  if (options_.context <= 0) throw Error("context length must be positive");
  if (options_.max_chunk <= 0) throw Error("prefill chunk must be positive");
  options_.context = std::min<int64_t>(options_.context, config_.max_position);
  options_.max_chunk = std::min(options_.max_chunk, options_.context);
  vocab_ = config_.unpadded_vocab_size;
  const TextConfig& c = config_;
  if (c.use_embed_norm) embed_norm_ = to_f32(weights_.embed_norm);
  final_norm_ = to_f32(weights_.norm);
  int64_t max_q = 0, max_kv = 0, max_r = 0;
  vectors_.resize(weights_.layers.size());
  for (size_t i = 0; i < weights_.layers.size(); ++i) {
    const LayerWeights& lw = weights_.layers[i];
    LayerVectors& lv = vectors_[i];
    lv.attn_norm = to_f32(lw.attn_norm);
    lv.mlp_norm = to_f32(lw.mlp_norm);
    lv.attn_conv = to_f32(lw.attn_conv);
    lv.mlp_conv = to_f32(lw.mlp_conv);
    lv.q_norm = to_f32(lw.attn.q_norm);
    lv.k_norm = to_f32(lw.attn.k_norm);
    lv.k_conv = to_f32(lw.attn.k_conv);
    lv.v_conv = to_f32(lw.attn.v_conv);
    lv.rel_proj = to_f32(lw.attn.rel_proj);  // [d_rel, R]
    max_q = std::max<int64_t>(max_q, int64_t(lw.spec.n_heads) * lw.spec.head_dim);
    max_kv = std::max<int64_t>(max_kv, int64_t(lw.spec.n_kv_heads) * lw.spec.head_dim);
    max_r = std::max<int64_t>(max_r, int64_t(lw.spec.n_heads) * c.d_rel);
  }
  int64_t n = options_.max_chunk, h = c.hidden_size;
  int64_t width = std::max(c.dense_width, c.moe_width);
  x_.resize(size_t(n * h));
  h_.resize(size_t(n * h));
  a_.resize(size_t(n * h));
  m_.resize(size_t(n * h));
  tmp_.resize(size_t(n * std::max(h, max_q)));
  q_.resize(size_t(n * max_q));
  k_.resize(size_t(n * max_kv));
  v_.resize(size_t(n * max_kv));
  r_.resize(size_t(n * max_r));
  attn_out_.resize(size_t(n * max_q));
  router_logits_.resize(size_t(n * (c.n_routed_experts + c.n_shared_experts)));
  expert_in_.resize(size_t(n * h));
  // Decode holds every active expert's activations at once (mlp()).
  const int64_t expert_slots = std::max<int64_t>(n, c.experts_per_token + c.n_shared_experts);
  expert_act_.resize(size_t(expert_slots * width));
  expert_out_.resize(size_t(expert_slots * h));
  routed_experts_.resize(size_t(n * std::max(c.experts_per_token, 1)));
  routing_weights_.resize(size_t(n * (c.experts_per_token + c.n_shared_experts + 1)));
  expert_rows_.resize(size_t(n));
  expert_row_weights_.resize(size_t(n));
}

namespace {

// Global layers grow in steps of this many positions (a re-layout copies the cache).
constexpr int64_t kGrowthPositions = 256;

int64_t round_up_growth(int64_t positions) {
  return (positions + kGrowthPositions - 1) / kGrowthPositions * kGrowthPositions;
}

}  // namespace

int64_t InklingModel::ring_slots(const LayerSpec& s) const {
  // A ring only pays off when the window is shorter than the context.
  const int64_t slots = config_.sliding_window - 1 + options_.max_chunk;
  return s.sliding && slots < options_.context ? slots : 0;
}

SequenceState InklingModel::new_sequence(int64_t positions) const {
  SequenceState state;
  state.context_limit = options_.context;
  state.layers.resize(weights_.layers.size());
  const int64_t global_capacity =
      positions <= 0 ? options_.context : std::min(options_.context, round_up_growth(positions));
  for (size_t i = 0; i < weights_.layers.size(); ++i) {
    const LayerSpec& s = weights_.layers[i].spec;
    LayerState& ls = state.layers[i];
    KvCache& kv = ls.kv;
    kv.dtype = options_.kv_dtype;
    kv.heads = s.n_kv_heads;
    kv.head_dim = s.head_dim;
    kv.ring = ring_slots(s) > 0;
    kv.capacity = kv.ring ? ring_slots(s) : global_capacity;
    size_t bytes = size_t(kv.heads * kv.head_bytes());
    kv.keys.assign(bytes, 0);
    kv.values.assign(bytes, 0);
    int64_t k = config_.conv_kernel - 1;
    ls.conv[0].assign(size_t(k * kv.heads * kv.head_dim), 0.0f);
    ls.conv[1].assign(size_t(k * kv.heads * kv.head_dim), 0.0f);
    ls.conv[2].assign(size_t(k * config_.hidden_size), 0.0f);
    ls.conv[3].assign(size_t(k * config_.hidden_size), 0.0f);
  }
  return state;
}

void InklingModel::reserve(SequenceState& state, int64_t positions) const {
  positions = std::min(positions, options_.context);
  for (LayerState& ls : state.layers) {
    KvCache& kv = ls.kv;
    if (kv.ring || kv.capacity >= positions) continue;
    const int64_t capacity =
        std::min(options_.context, std::max(round_up_growth(positions), 2 * kv.capacity));
    // [heads, capacity, d]: each head's rows move to their place in the wider layout.
    const size_t old_head = size_t(kv.head_bytes()), new_head = size_t(capacity * kv.row_bytes());
    for (AlignedVector<uint8_t>* rows : {&kv.keys, &kv.values}) {
      AlignedVector<uint8_t> grown(new_head * size_t(kv.heads), 0);
      for (int64_t h = 0; h < kv.heads; ++h)
        std::memcpy(grown.data() + size_t(h) * new_head, rows->data() + size_t(h) * old_head, old_head);
      *rows = std::move(grown);
    }
    kv.capacity = capacity;
  }
}

int64_t InklingModel::state_bytes(int64_t positions) const {
  positions = std::min(positions, options_.context);
  int64_t bytes = 0;
  const int64_t elem = int64_t(dtype_size(options_.kv_dtype));
  for (const LayerWeights& lw : weights_.layers) {
    const LayerSpec& s = lw.spec;
    const int64_t slots = ring_slots(s) > 0 ? ring_slots(s) : positions;
    bytes += 2 * slots * s.n_kv_heads * s.head_dim * elem;
    bytes += (config_.conv_kernel - 1) * (2 * s.n_kv_heads * s.head_dim + 2 * config_.hidden_size) * 4;
  }
  return bytes;
}

int64_t StateSnapshot::bytes() const {
  int64_t total = int64_t(tokens.size() * sizeof(int32_t));
  for (const Layer& layer : layers) {
    total += int64_t(layer.keys.size() + layer.values.size());
    for (const auto& conv : layer.conv) total += int64_t(conv.size() * sizeof(float));
  }
  return total;
}

StateSnapshot InklingModel::snapshot(const SequenceState& state) const {
  StateSnapshot snap;
  snap.position = state.position;
  snap.tokens = state.tokens;
  snap.layers.resize(state.layers.size());
  for (size_t i = 0; i < state.layers.size(); ++i) {
    const LayerState& ls = state.layers[i];
    const KvCache& kv = ls.kv;
    StateSnapshot::Layer& out = snap.layers[i];
    const bool sliding = weights_.layers[i].spec.sliding;
    out.first = sliding ? std::max<int64_t>(0, state.position - (config_.sliding_window - 1)) : 0;
    const int64_t count = state.position - out.first, row = kv.row_bytes();
    out.keys.resize(size_t(kv.heads * count * row));
    out.values.resize(out.keys.size());
    for (int64_t h = 0; h < kv.heads; ++h)
      for (int64_t p = out.first; p < state.position; ++p) {
        const size_t at = size_t((h * count + p - out.first) * row);
        std::memcpy(out.keys.data() + at, kv.keys.data() + kv.offset(h, p), size_t(row));
        std::memcpy(out.values.data() + at, kv.values.data() + kv.offset(h, p), size_t(row));
      }
    for (int c = 0; c < 4; ++c) out.conv[c] = ls.conv[c];
  }
  return snap;
}

void InklingModel::restore(const StateSnapshot& snap, SequenceState& state) const {
  if (snap.layers.size() != weights_.layers.size() || state.layers.size() != weights_.layers.size())
    throw Error("state snapshot belongs to another model");
  if (snap.position > options_.context)
    throw Error("state snapshot of " + std::to_string(snap.position) + " tokens exceeds the context of " +
                std::to_string(options_.context));
  // Everything checked before anything is written: a rejected snapshot leaves the state as it was.
  for (size_t i = 0; i < state.layers.size(); ++i) {
    const LayerState& ls = state.layers[i];
    const StateSnapshot::Layer& in = snap.layers[i];
    const int64_t count = snap.position - in.first, row = ls.kv.row_bytes();
    if (ls.kv.dtype != options_.kv_dtype || count < 0 || in.keys.size() != size_t(ls.kv.heads * count * row) ||
        in.values.size() != in.keys.size())
      throw Error("state snapshot does not match this model's KV layout");
    for (int c = 0; c < 4; ++c)
      if (in.conv[c].size() != ls.conv[c].size()) throw Error("state snapshot does not match this model's layout");
  }
  reserve(state, snap.position);
  for (size_t i = 0; i < state.layers.size(); ++i) {
    LayerState& ls = state.layers[i];
    KvCache& kv = ls.kv;
    const StateSnapshot::Layer& in = snap.layers[i];
    const int64_t count = snap.position - in.first, row = kv.row_bytes();
    for (int64_t h = 0; h < kv.heads; ++h)
      for (int64_t p = in.first; p < snap.position; ++p) {
        const size_t at = size_t((h * count + p - in.first) * row);
        std::memcpy(kv.keys.data() + kv.offset(h, p), in.keys.data() + at, size_t(row));
        std::memcpy(kv.values.data() + kv.offset(h, p), in.values.data() + at, size_t(row));
      }
    for (int c = 0; c < 4; ++c) ls.conv[c] = in.conv[c];
  }
  state.position = snap.position;
  state.tokens = snap.tokens;
}

void InklingModel::check_tokens(const SequenceState& state, std::span<const int32_t> tokens) const {
  if (tokens.empty()) throw Error("no tokens to process (empty prompt)");
  for (int32_t id : tokens)
    if (id < 0 || id >= vocab_)
      throw Error("token id " + std::to_string(id) + " is out of range for this model (vocabulary 0.." +
                  std::to_string(vocab_ - 1) + ")");
  if (state.position + int64_t(tokens.size()) > state.context_limit)
    throw Error("context limit exceeded: " + std::to_string(state.position) + " tokens held + " +
                std::to_string(tokens.size()) + " new > " + std::to_string(state.context_limit) +
                " (raise it with --ctx)");
  if (state.layers.size() != weights_.layers.size()) throw Error("sequence state belongs to another model");
}

void InklingModel::prefill(SequenceState& state, std::span<const int32_t> tokens, float* last_logits) {
  check_tokens(state, tokens);
  int64_t total = int64_t(tokens.size());
  for (int64_t start = 0; start < total; start += options_.max_chunk) {
    int64_t n = std::min(options_.max_chunk, total - start);
    bool last = start + n == total;
    const BatchItem item{&state, tokens.subspan(size_t(start), size_t(n)), last ? last_logits : nullptr};
    forward_step(std::span<const BatchItem>(&item, 1), nullptr);
    if (on_prefill_progress) on_prefill_progress(start + n, total);
  }
}

void InklingModel::forward_all(SequenceState& state, std::span<const int32_t> tokens, std::vector<float>& logits) {
  check_tokens(state, tokens);
  int64_t total = int64_t(tokens.size());
  logits.resize(size_t(total * vocab_));
  for (int64_t start = 0; start < total; start += options_.max_chunk) {
    int64_t n = std::min(options_.max_chunk, total - start);
    const BatchItem item{&state, tokens.subspan(size_t(start), size_t(n)), nullptr};
    forward_step(std::span<const BatchItem>(&item, 1), logits.data() + start * vocab_);
  }
}

void InklingModel::forward_batch(std::span<const BatchItem> items) {
  if (items.empty()) return;
  int64_t rows = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const BatchItem& item = items[i];
    if (!item.state) throw Error("batched step: item " + std::to_string(i) + " has no sequence state");
    for (size_t j = 0; j < i; ++j)
      if (items[j].state == item.state)
        throw Error("batched step: items " + std::to_string(j) + " and " + std::to_string(i) +
                    " feed the same sequence");
    check_tokens(*item.state, item.tokens);
    rows += int64_t(item.tokens.size());
  }
  if (rows > options_.max_chunk)
    throw Error("batched step: " + std::to_string(rows) + " tokens exceed the step budget of " +
                std::to_string(options_.max_chunk));
  // Single-token items first: their rows go through the decode kernels, as they would alone.
  std::vector<BatchItem> ordered(items.begin(), items.end());
  std::stable_partition(ordered.begin(), ordered.end(), [](const BatchItem& item) { return item.tokens.size() == 1; });
  forward_step(ordered, nullptr);
}

void InklingModel::forward_step(std::span<const BatchItem> items, float* all_logits) {
  const TextConfig& c = config_;
  kernels::set_matmul_precision(options_.llama_rounding ? kernels::MatmulPrecision::LlamaCppActivations
                                : options_.fast         ? kernels::MatmulPrecision::Bf16Activations
                                                        : kernels::MatmulPrecision::Exact);
  kernels::set_batch_invariant(options_.batch_invariant);
  const int64_t h = c.hidden_size;
  for (const BatchItem& item : items) reserve(*item.state, item.state->position + int64_t(item.tokens.size()));
  // Which kernels a row takes depends only on its own sequence's share of the step, never on the
  // others': a single-token share (a decode token) takes the decode kernels, longer shares the
  // prefill kernels. So each sequence gets the bits it gets alone. Single-token items come first.
  decode_rows_ = 0;
  while (decode_rows_ < int64_t(items.size()) && items[size_t(decode_rows_)].tokens.size() == 1) ++decode_rows_;
  int64_t rows = 0;
  for (const BatchItem& item : items)
    for (int32_t token : item.tokens) {
      float* x = x_.data() + rows++ * h;
      dequantize_row(weights_.embed, token, x);
      if (c.use_embed_norm) rms_norm(x, embed_norm_.data(), h, c.rms_norm_eps, x);
    }
  // The convolutions carry state from token to token of one sequence: run per item on its rows.
  auto per_item_conv = [&](float* u, int conv, const std::vector<float>& taps, size_t layer) {
    int64_t row0 = 0;
    for (const BatchItem& item : items) {
      const int64_t n = int64_t(item.tokens.size());
      float* x = x_.data() + row0 * h;
      short_conv(u + row0 * h, n, h, taps.data(), c.conv_kernel, item.state->layers[layer].conv[conv].data(), x, x);
      row0 += n;
    }
  };
  for (size_t layer = 0; layer < weights_.layers.size(); ++layer) {
    const LayerVectors& lv = vectors_[layer];
    for (int64_t t = 0; t < rows; ++t) rms_norm(x_.data() + t * h, lv.attn_norm.data(), h, c.rms_norm_eps, h_.data() + t * h);
    attention(int(layer), items, rows);  // reads h_, writes a_
    per_item_conv(a_.data(), 2, lv.attn_conv, layer);
    for (int64_t t = 0; t < rows; ++t) rms_norm(x_.data() + t * h, lv.mlp_norm.data(), h, c.rms_norm_eps, h_.data() + t * h);
    mlp(int(layer), rows);  // reads h_, writes m_
    per_item_conv(m_.data(), 3, lv.mlp_conv, layer);
  }
  for (const BatchItem& item : items) {
    item.state->tokens.insert(item.state->tokens.end(), item.tokens.begin(), item.tokens.end());
    item.state->position += int64_t(item.tokens.size());
  }
  // The head, only for the rows that sample: all of a single item's, or each item's last.
  std::vector<float*> outputs;
  int64_t count = 0, row0 = 0;
  auto take_row = [&](int64_t row) {
    float* out = h_.data() + count++ * h;
    rms_norm(x_.data() + row * h, final_norm_.data(), h, c.rms_norm_eps, out);
    const float inv_mup = 1.0f / c.mup_width_multiplier;
    for (int64_t i = 0; i < h; ++i) out[i] *= inv_mup;
  };
  for (const BatchItem& item : items) {
    const int64_t n = int64_t(item.tokens.size());
    if (all_logits) {
      for (int64_t t = 0; t < n; ++t) take_row(row0 + t);
    } else if (item.logits) {
      take_row(row0 + n - 1);
      outputs.push_back(item.logits);
    }
    row0 += n;
  }
  if (count == 0) return;
  WeightMatrix head = weights_.lm_head;
  head.rows = vocab_;  // the padded rows are never produced
  const kernels::ProductLabel label("head");
  if (all_logits) return kernels::matmul_mixed(head, h_.data(), count, 0, all_logits);
  if (count == 1) return kernels::matvec(head, h_.data(), outputs[0]);
  // Every sampling row is one sequence's last: each takes the matvec it takes alone.
  head_logits_.resize(size_t(count * vocab_));
  kernels::matmul_mixed(head, h_.data(), count, count, head_logits_.data());
  for (int64_t i = 0; i < count; ++i)
    std::memcpy(outputs[size_t(i)], head_logits_.data() + i * vocab_, size_t(vocab_) * sizeof(float));
}

void InklingModel::attention(int layer, std::span<const BatchItem> items, int64_t rows) {
  const LayerWeights& lw = weights_.layers[size_t(layer)];
  std::optional<kernels::ProductLabel> label(std::in_place, "attention q/k/v/r");
  if (rows == 1) {  // decode: the four projections of one x in one pass over their weights
    const kernels::MatvecProduct projections[] = {{&lw.attn.q, h_.data(), q_.data()},
                                                  {&lw.attn.k, h_.data(), k_.data()},
                                                  {&lw.attn.v, h_.data(), v_.data()},
                                                  {&lw.attn.r, h_.data(), r_.data()}};
    kernels::matvec_batch(projections);
  } else {
    kernels::matmul_mixed(lw.attn.q, h_.data(), rows, decode_rows_, q_.data());
    kernels::matmul_mixed(lw.attn.k, h_.data(), rows, decode_rows_, k_.data());
    kernels::matmul_mixed(lw.attn.v, h_.data(), rows, decode_rows_, v_.data());
    kernels::matmul_mixed(lw.attn.r, h_.data(), rows, decode_rows_, r_.data());
  }
  int64_t row0 = 0;
  for (const BatchItem& item : items) {
    attend_sequence(layer, *item.state, row0, int64_t(item.tokens.size()));
    row0 += int64_t(item.tokens.size());
  }
  label.emplace("attention output");
  kernels::matmul_mixed(lw.attn.o, attn_out_.data(), rows, decode_rows_, a_.data());
}

// Rows row0 .. row0 + n of q_ / k_ / v_ / r_ are one sequence's next n tokens: their convolution
// and norms, the KV store, and attention into the same rows of attn_out_.
void InklingModel::attend_sequence(int layer, SequenceState& state, int64_t row0, int64_t n) {
  const TextConfig& c = config_;
  const LayerWeights& lw = weights_.layers[size_t(layer)];
  const LayerVectors& lv = vectors_[size_t(layer)];
  const LayerSpec& s = lw.spec;
  LayerState& ls = state.layers[size_t(layer)];
  const int64_t d = s.head_dim, nh = s.n_heads, nkv = s.n_kv_heads, dr = c.d_rel, extent = s.rel_extent;
  const int64_t qd = nh * d, kvd = nkv * d;
  const int64_t pos0 = state.position;
  float* const q_rows = q_.data() + row0 * qd;
  float* const k_rows = k_.data() + row0 * kvd;
  float* const v_rows = v_.data() + row0 * kvd;
  const float* const r_rows = r_.data() + row0 * nh * dr;
  float* const out_rows = attn_out_.data() + row0 * qd;
  const bool global_tau = !s.sliding && c.log_scaling_n_floor.has_value();
  auto tau_at = [&](int64_t p) {
    return global_tau ? log_position_tau(p + 1, *c.log_scaling_n_floor, c.log_scaling_alpha) : 1.0f;
  };
  short_conv(k_rows, n, kvd, lv.k_conv.data(), c.conv_kernel, ls.conv[0].data(), nullptr, k_rows);
  short_conv(v_rows, n, kvd, lv.v_conv.data(), c.conv_kernel, ls.conv[1].data(), nullptr, v_rows);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t g = 0; g < nkv; ++g) {
      float* kh = k_rows + t * kvd + g * d;
      rms_norm(kh, lv.k_norm.data(), d, c.rms_norm_eps, kh);
    }
    for (int64_t hd = 0; hd < nh; ++hd) {
      float* qh = q_rows + t * qd + hd * d;
      rms_norm(qh, lv.q_norm.data(), d, c.rms_norm_eps, qh);
    }
    // llama.cpp's banded flash attention (its CPU default) rounds Q (after tau), K and V to f16.
    if (options_.llama_rounding) {
      const float tau = tau_at(pos0 + t);
      for (int64_t i = 0; i < qd; ++i) q_rows[t * qd + i] = f16_rounded(q_rows[t * qd + i] * tau) / tau;
      for (int64_t i = 0; i < kvd; ++i) {
        k_rows[t * kvd + i] = f16_rounded(k_rows[t * kvd + i]);
        v_rows[t * kvd + i] = f16_rounded(v_rows[t * kvd + i]);
      }
    }
    for (int64_t g = 0; g < nkv; ++g) {
      store_kv(ls.kv.key_row(g, pos0 + t), k_rows + t * kvd + g * d, d, ls.kv.dtype);
      store_kv(ls.kv.value_row(g, pos0 + t), v_rows + t * kvd + g * d, d, ls.kv.dtype);
    }
  }
  const float inv_d = 1.0f / float(d);
  const int64_t group = nh / nkv;
  const KvCache& kv = ls.kv;
  const int threads = kernels::thread_count();
  // Scores and (decode) the bias per distance: 2 x group x keys at most.
  const size_t scores_per_thread = 2 * size_t(group) * size_t(options_.context);
  if (attention_scores_.size() < size_t(threads) * scores_per_thread)
    attention_scores_.resize(size_t(threads) * scores_per_thread);
  auto window_start = [&](int64_t p) { return s.sliding ? std::max<int64_t>(0, p - c.sliding_window + 1) : 0; };
  auto head_view = [&](int64_t kv_head) {
    return KvHeadView{kv.keys.data() + kv_head * kv.head_bytes(), kv.values.data() + kv_head * kv.head_bytes(),
                      kv.row_bytes(), kv.capacity, kv.ring, kv.dtype == DType::BF16};
  };
  if (n >= kTransposedKeysMinTokens) {
    // Prefill: transpose the keys the chunk attends to once per KV head ([d, span] f32), then
    // every query scores all its keys with vectorised axpys.
    const int64_t first = window_start(pos0), span = pos0 + n - first;
    // Row stride: a multiple of 16 floats plus one cache line, so the d rows a block of keys
    // touches fall in different L1 sets (a multiple of 4 KiB would put them all in one).
    const int64_t ld = (span + 15) / 16 * 16 + 16;
    keys_t_.resize(size_t(d * ld));
    bias_by_dist_.resize(size_t(threads) * size_t(extent));
    for (int64_t kv_head = 0; kv_head < nkv; ++kv_head) {  // one head's keys at a time bounds the copy
      const KvHeadView view = head_view(kv_head);
      kernels::parallel_for((span + 63) / 64, threads, [&](int64_t block, int) {
        for (int64_t j = block * 64; j < std::min(span, (block + 1) * 64); ++j) {
          if (view.bf16) {
            const auto* k = reinterpret_cast<const uint16_t*>(view.key(first + j));
            for (int64_t i = 0; i < d; ++i) keys_t_[size_t(i * ld + j)] = bf16_to_f32(k[i]);
          } else {
            const auto* k = reinterpret_cast<const float*>(view.key(first + j));
            for (int64_t i = 0; i < d; ++i) keys_t_[size_t(i * ld + j)] = k[i];
          }
        }
      });
      const int64_t head = kv_head * group;
      kernels::parallel_for(n, threads, [&](int64_t t, int thread) {
        const int64_t p = pos0 + t, lo = window_start(p);
        attend_kv_group_transposed(group, q_rows + t * qd + head * d, r_rows + t * nh * dr + head * dr,
                                   lv.rel_proj.data(), d, dr, extent, tau_at(p), inv_d, lo, p,
                                   keys_t_.data() + (lo - first), ld, view,
                                   bias_by_dist_.data() + size_t(thread) * size_t(extent),
                                   attention_scores_.data() + size_t(thread) * scores_per_thread,
                                   out_rows + t * qd + head * d);
      });
    }
  } else {
    kernels::parallel_for(n * nkv, threads, [&](int64_t item, int thread) {
      float* scores = attention_scores_.data() + size_t(thread) * scores_per_thread;
      const int64_t t = item / nkv, kv_head = item % nkv, head = kv_head * group;
      const int64_t p = pos0 + t;
      attend_kv_group(group, q_rows + t * qd + head * d, r_rows + t * nh * dr + head * dr,
                      lv.rel_proj.data(), d, dr, extent, tau_at(p), inv_d, window_start(p), p, head_view(kv_head),
                      scores, out_rows + t * qd + head * d);
    });
  }
}

void InklingModel::mlp(int layer, int64_t n) {
  const TextConfig& c = config_;
  const MlpWeights& mw = weights_.layers[size_t(layer)].mlp;
  const int64_t h = c.hidden_size;
  if (mw.dense) {
    {
      const kernels::ProductLabel label("dense gate/up");
      kernels::swiglu_matmul_mixed(mw.dense_mlp.gate, mw.dense_mlp.up, h_.data(), n, decode_rows_, expert_act_.data());
    }
    const kernels::ProductLabel label("dense down");
    kernels::matmul_mixed(mw.dense_mlp.down, expert_act_.data(), n, decode_rows_, m_.data());
    for (int64_t i = 0; i < n * h; ++i) m_[size_t(i)] *= mw.global_scale;
    return;
  }
  const int64_t routed = c.n_routed_experts, shared = c.n_shared_experts, top_k = c.experts_per_token;
  const int64_t width = c.moe_width, total = routed + shared;
  {
    // Expert selection is discrete: rounding the activations to bf16 would flip near-tied choices,
    // so the (small) router product is exact, unless llama.cpp's rounding is asked for (a
    // quantized router then sees its x as llama.cpp's does).
    kernels::MatmulPrecision saved = kernels::matmul_precision();
    if (!options_.llama_rounding) kernels::set_matmul_precision(kernels::MatmulPrecision::Exact);
    const kernels::ProductLabel label("router");
    kernels::matmul_mixed(mw.router, h_.data(), n, decode_rows_, router_logits_.data());
    kernels::set_matmul_precision(saved);
  }
  // Per token: selection by sigmoid + correction bias; weights = softmax of logsigmoid over the
  // k routed + shared raw logits, times route_scale x global_scale.
  std::vector<int32_t>& chosen = routed_experts_;
  std::vector<float>& weight = routing_weights_;
  for (int64_t t = 0; t < n; ++t)
    route_token(router_logits_.data() + t * total, mw.correction_bias.data(), routed, shared, top_k, c.route_scale,
                mw.global_scale, chosen.data() + t * top_k, weight.data() + t * (top_k + shared));
  std::fill(m_.begin(), m_.begin() + n * h, 0.0f);
  if (n == 1) return moe_decode(mw);
  // Routed experts: gather each expert's tokens so its weights are read once per chunk.
  std::vector<int64_t>& rows = expert_rows_;
  std::vector<float>& row_weight = expert_row_weights_;
  for (int64_t e = 0; e < routed; ++e) {
    int64_t count = 0;
    for (int64_t t = 0; t < n; ++t)
      for (int64_t i = 0; i < top_k; ++i)
        if (chosen[size_t(t * top_k + i)] == e) {
          rows[size_t(count)] = t;
          row_weight[size_t(count++)] = weight[size_t(t * (top_k + shared) + i)];
        }
    if (count == 0) continue;
    for (int64_t i = 0; i < count; ++i)
      std::memcpy(expert_in_.data() + i * h, h_.data() + rows[size_t(i)] * h, size_t(h) * 4);
    const GatedExpert& expert = mw.experts[size_t(e)];
    // Rows are gathered in step order, so the decode rows among them come first.
    int64_t decode_count = 0;
    while (decode_count < count && rows[size_t(decode_count)] < decode_rows_) ++decode_count;
    std::optional<kernels::ProductLabel> label(std::in_place, "experts gate/up");
    kernels::swiglu_matmul_mixed(expert.gate, expert.up, expert_in_.data(), count, decode_count, expert_act_.data());
    label.emplace("experts down");
    kernels::matmul_mixed(expert.down, expert_act_.data(), count, decode_count, expert_out_.data());
    for (int64_t i = 0; i < count; ++i) {
      float w = row_weight[size_t(i)];
      float* dst = m_.data() + rows[size_t(i)] * h;
      const float* src = expert_out_.data() + i * h;
      for (int64_t j = 0; j < h; ++j) dst[j] += w * src[j];
    }
  }
  // Shared experts: gammas multiply silu(gate) * up before the down projection.
  for (int64_t sh = 0; sh < shared; ++sh) {
    const GatedExpert& expert = mw.shared[size_t(sh)];
    std::optional<kernels::ProductLabel> label(std::in_place, "experts gate/up");
    kernels::swiglu_matmul_mixed(expert.gate, expert.up, h_.data(), n, decode_rows_, expert_act_.data());
    for (int64_t t = 0; t < n; ++t) {
      float w = weight[size_t(t * (top_k + shared) + top_k + sh)];
      float* act = expert_act_.data() + t * width;
      for (int64_t j = 0; j < width; ++j) act[j] *= w;
    }
    label.emplace("experts down");
    kernels::matmul_mixed(expert.down, expert_act_.data(), n, decode_rows_, expert_out_.data());
    for (int64_t i = 0; i < n * h; ++i) m_[size_t(i)] += expert_out_[size_t(i)];
  }
}

// One token: every active expert's gate / up in one parallel pass, then every down projection
// in another, so the threads stream all the expert weights back to back. Reads the routing
// mlp() left in routed_experts_ / routing_weights_; adds into m_ (zeroed) in the order the
// prefill path uses: routed experts by id, then the shared ones.
void InklingModel::moe_decode(const MlpWeights& mw) {
  const TextConfig& c = config_;
  const int64_t h = c.hidden_size, width = c.moe_width;
  const int64_t top_k = c.experts_per_token, shared = c.n_shared_experts, active = top_k + shared;
  std::vector<int64_t> order(static_cast<size_t>(top_k));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int64_t a, int64_t b) { return routed_experts_[size_t(a)] < routed_experts_[size_t(b)]; });
  std::vector<kernels::SwigluProduct> fronts(static_cast<size_t>(active));
  std::vector<kernels::MatvecProduct> downs(static_cast<size_t>(active));
  for (int64_t slot = 0; slot < active; ++slot) {
    const GatedExpert& expert = slot < top_k ? mw.experts[size_t(routed_experts_[size_t(order[size_t(slot)])])]
                                             : mw.shared[size_t(slot - top_k)];
    float* act = expert_act_.data() + slot * width;
    fronts[size_t(slot)] = {&expert.gate, &expert.up, h_.data(), act};
    downs[size_t(slot)] = {&expert.down, act, expert_out_.data() + slot * h};
  }
  {
    const kernels::ProductLabel label("experts gate/up");
    kernels::swiglu_matvec_batch(fronts);
  }
  // Shared experts: gammas multiply silu(gate) * up before the down projection.
  for (int64_t sh = 0; sh < shared; ++sh) {
    const float w = routing_weights_[size_t(top_k + sh)];
    float* act = expert_act_.data() + (top_k + sh) * width;
    for (int64_t j = 0; j < width; ++j) act[j] *= w;
  }
  {
    const kernels::ProductLabel label("experts down");
    kernels::matvec_batch(downs);
  }
  for (int64_t slot = 0; slot < active; ++slot) {
    const float w = slot < top_k ? routing_weights_[size_t(order[size_t(slot)])] : 1.0f;
    const float* src = expert_out_.data() + slot * h;
    float* dst = m_.data();
    if (slot < top_k) {
      for (int64_t j = 0; j < h; ++j) dst[j] += w * src[j];
    } else {
      for (int64_t j = 0; j < h; ++j) dst[j] += src[j];
    }
  }
}

int64_t InklingModel::active_weight_bytes() const {
  int64_t bytes = weights_.embed.row_stride;  // one embedding row
  WeightMatrix head = weights_.lm_head;
  head.rows = vocab_;
  bytes += head.bytes_read();
  for (const LayerWeights& lw : weights_.layers) {
    for (const WeightMatrix* m : {&lw.attn.q, &lw.attn.k, &lw.attn.v, &lw.attn.r, &lw.attn.o}) bytes += m->bytes_read();
    const MlpWeights& mw = lw.mlp;
    auto expert_bytes = [](const GatedExpert& e) { return e.gate.bytes_read() + e.up.bytes_read() + e.down.bytes_read(); };
    if (mw.dense) {
      bytes += expert_bytes(mw.dense_mlp);
    } else {
      bytes += mw.router.bytes_read();
      if (!mw.experts.empty()) bytes += config_.experts_per_token * expert_bytes(mw.experts[0]);
      for (const GatedExpert& e : mw.shared) bytes += expert_bytes(e);
    }
  }
  return bytes;
}

}  // namespace inkling
