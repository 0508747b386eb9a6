// The production forward pass: threaded, preallocated, weights read in their stored format.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "model/state.h"
#include "model/weights.h"
#include "tensor/aligned_vector.h"

namespace inkling {

struct RunOptions {
  DType kv_dtype = DType::BF16;  // F32 or BF16
  int64_t context = 4096;        // longest sequence (prompt + generation) a state can hold
  int64_t max_chunk = 256;       // prefill chunk (tokens per forward call)
  // Fast mode trades exactness for speed the way llama.cpp does: prefill products round the
  // activations to bf16 (vdpbf16ps) and 4-bit decode splits x into int8 parts (VNNI). Off: every
  // product keeps f32 activations and matches the reference pass to ~1e-6 of the logits' spread.
  bool fast = false;
  // Batch invariance: prefill rows take the decode kernels (kernels::set_batch_invariant), so a
  // token's logits are bit for bit the same however its sequence was chunked, batched with
  // others or restored from a snapshot, decoded or prefilled. Prefill runs 1.6-1.7x slower. Off, a
  // prefilled position and a decoded one differ by f32 rounding (the matmuls sum in another order).
  bool batch_invariant = false;
  // The agreement mode (kernels::MatmulPrecision::LlamaCppActivations): fast, with GGUF block-type
  // weights seeing x rounded as llama.cpp's CPU kernels round it for their type, and attention's
  // Q (after the log-position temperature), K and V rounded to f16 as its banded flash attention
  // rounds them.
  bool llama_rounding = false;
};

// One sequence's share of a batched step (InklingModel::forward_batch).
struct BatchItem {
  SequenceState* state = nullptr;
  std::span<const int32_t> tokens;  // fed this step: a decode token or a prefill chunk
  float* logits = nullptr;          // the last token's logits [unpadded_vocab], or null for none
};

class InklingModel {
 public:
  InklingModel(const Checkpoint& checkpoint, RunOptions options);

  // A state with room for `positions` tokens in its global layers (0: the whole context); it
  // grows as it is fed (reserve), up to the context.
  SequenceState new_sequence(int64_t positions = 0) const;
  // Grows the global layers' caches to hold `positions` tokens (capped at the context). Keeps
  // what they hold; a no-op when they are big enough.
  void reserve(SequenceState& state, int64_t positions) const;
  // Bytes of KV cache and convolution state a sequence of `positions` tokens occupies.
  int64_t state_bytes(int64_t positions) const;
  // The state at its current position, as small as exactness allows (StateSnapshot), and back:
  // restore makes `state` (any state of this model, reused) continue exactly as the snapshotted
  // one would.
  StateSnapshot snapshot(const SequenceState& state) const;
  void restore(const StateSnapshot& snapshot, SequenceState& state) const;
  // Feeds `tokens` (chunked internally) and writes the logits of the last token
  // ([unpadded_vocab]) into last_logits when it is non-null.
  void prefill(SequenceState& state, std::span<const int32_t> tokens, float* last_logits);
  // Feeds tokens and returns logits for every one of them ([tokens, unpadded_vocab]).
  void forward_all(SequenceState& state, std::span<const int32_t> tokens, std::vector<float>& logits);
  // One step over several sequences at once: every item's tokens go through one forward call, so
  // the projections, MLPs, experts and head read their weights once for all of them; attention,
  // the convolution states and the KV cache stay per sequence. Each sequence gets what it would
  // get alone. At most max_chunk tokens in all; the states must be distinct. Throws (and changes
  // no state) when an item is invalid.
  void forward_batch(std::span<const BatchItem> items);
  // Throws the error forward_batch would throw for feeding `tokens` to `state` (bad ids, context).
  void check_tokens(const SequenceState& state, std::span<const int32_t> tokens) const;
  // Tokens one forward call may take (the prefill chunk; the batch budget of a step).
  int64_t max_step_tokens() const { return options_.max_chunk; }

  int64_t vocab() const { return vocab_; }
  const TextConfig& config() const { return config_; }
  const RunOptions& options() const { return options_; }
  // Bytes of weights read per decoded token (active experts only).
  int64_t active_weight_bytes() const;
  // Progress during long prefills: called with (tokens done, total).
  std::function<void(int64_t, int64_t)> on_prefill_progress;

 private:
  // Slots of a sliding layer's ring (window - 1 + max_chunk), or 0 when the layer keeps every
  // position (global, or a window no shorter than the context).
  int64_t ring_slots(const LayerSpec& spec) const;
  // The step over items (rows of the activations in item order). all_logits: a single item's
  // logits for every token ([n, vocab]) instead of each item's last.
  void forward_step(std::span<const BatchItem> items, float* all_logits);
  // Projections over all `rows` of the step, then attention per item.
  void attention(int layer, std::span<const BatchItem> items, int64_t rows);
  void attend_sequence(int layer, SequenceState& state, int64_t row0, int64_t n);
  void mlp(int layer, int64_t n);
  void moe_decode(const MlpWeights& mw);

  const ModelWeights& weights_;
  TextConfig config_;
  RunOptions options_;
  int64_t vocab_ = 0;

  // f32 copies of the small per-layer vectors (norms, conv taps, rel_proj).
  struct LayerVectors {
    std::vector<float> attn_norm, mlp_norm, attn_conv, mlp_conv, q_norm, k_norm, k_conv, v_conv;
    std::vector<float> rel_proj;    // [d_rel, R], as stored
  };
  std::vector<LayerVectors> vectors_;
  std::vector<float> embed_norm_, final_norm_;

  // Scratch, sized for max_chunk tokens at construction. Cache-line aligned: the kernels read
  // activations in 64-byte vectors (tensor/aligned_vector.h).
  AlignedVector<float> x_, h_, q_, k_, v_, r_, attn_out_, a_, m_, tmp_, router_logits_;
  AlignedVector<float> expert_in_, expert_act_, expert_out_;
  AlignedVector<float> attention_scores_;  // [threads, 2 * group * context]: scores, decode biases
  AlignedVector<float> keys_t_;            // prefill: one KV head's keys for the chunk, transposed [d, span]
  std::vector<float> bias_by_dist_;      // prefill: [threads, R]
  std::vector<int32_t> routed_experts_;  // [chunk, k]
  std::vector<float> routing_weights_;   // [chunk, k + shared]
  std::vector<int64_t> expert_rows_;     // tokens routed to the expert being computed
  std::vector<float> expert_row_weights_;
  AlignedVector<float> head_logits_;     // [items that sample, vocab] when more than one does
  int64_t decode_rows_ = 0;              // the step's leading rows that take the decode kernels
};

// RMSNorm over `n` values: x * rsqrt(mean(x^2) + eps) * weight (f32 math, no +1 offset).
void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* out);

// Reads a small parameter vector of any float dtype as f32.
std::vector<float> to_f32(const TensorView& view);

}  // namespace inkling
