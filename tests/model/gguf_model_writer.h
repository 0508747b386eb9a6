// Writes a bound checkpoint back out as a GGUF file laid out as llama.cpp's Inkling converter
// writes one (names, row-major shapes as reversed ggml dims, gate / up de-interleaved, conv taps
// [C, K], the metadata keys), with the matrices in a chosen ggml type. Our own writer, so the
// GGUF tests need no llama.cpp; tests/gguf/test_converter.py checks the same binding against the
// real converter's files.
#pragma once

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "../io/gguf_test_util.h"
#include "../io/gguf_vocabulary_writer.h"
#include "model/weights.h"
#include "tensor/dtype.h"

namespace inkling::testing {

inline std::vector<float> matrix_values(const WeightMatrix& m) {
  std::vector<float> out(size_t(m.rows * m.cols));
  for (int64_t r = 0; r < m.rows; ++r) dequantize_row(m, r, out.data() + r * m.cols);
  return out;
}

inline std::vector<float> vector_values(const VectorWeight& v) {
  std::vector<float> out(size_t(v.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = v.at_f32(i);
  return out;
}

// Round to nearest, ties away from zero (C roundf, as ggml's reference quantizers use).
inline int round_away(float x) { return int(std::round(x)); }

// `values` (rows of `cols`) in ggml type `type`: F32, F16, BF16, Q8_0 or Q4_0, quantized as
// ggml's reference quantizers do (scale from the block's largest magnitude).
inline std::vector<uint8_t> encode_ggml(GgmlType type, const std::vector<float>& values) {
  std::vector<uint8_t> out;
  auto put16 = [&](uint16_t bits) {
    out.push_back(uint8_t(bits));
    out.push_back(uint8_t(bits >> 8));
  };
  switch (type) {
    case GgmlType::F32:
      out.resize(values.size() * 4);
      std::memcpy(out.data(), values.data(), out.size());
      return out;
    case GgmlType::F16:
      for (float v : values) put16(f32_to_f16(v));
      return out;
    case GgmlType::BF16:
      for (float v : values) put16(f32_to_bf16(v));
      return out;
    case GgmlType::Q8_0:
      for (size_t b = 0; b < values.size(); b += 32) {
        float amax = 0;
        for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(values[b + j]));
        const float d = amax / 127, id = d ? 1 / d : 0;
        put16(f32_to_f16(d));
        for (size_t j = 0; j < 32; ++j) out.push_back(uint8_t(int8_t(round_away(values[b + j] * id))));
      }
      return out;
    case GgmlType::Q4_0:
      for (size_t b = 0; b < values.size(); b += 32) {
        float amax = 0, max = 0;
        for (size_t j = 0; j < 32; ++j)
          if (std::fabs(values[b + j]) > amax) amax = std::fabs(values[b + j]), max = values[b + j];
        const float d = max / -8, id = d ? 1 / d : 0;
        put16(f32_to_f16(d));
        uint8_t codes[32];
        for (size_t j = 0; j < 32; ++j) codes[j] = uint8_t(std::min(15, int(values[b + j] * id + 8.5f)));
        for (size_t j = 0; j < 16; ++j) out.push_back(uint8_t(codes[j] | codes[j + 16] << 4));
      }
      return out;
    default: throw Error("encode_ggml: no test encoder for " + std::string(ggml_type_name(type)));
  }
}

struct GgufModelOptions {
  GgmlType matrices = GgmlType::F32;  // the projections, experts, embedding and head
  GgmlType vectors = GgmlType::F32;   // norms (convs, rel_proj, router, biases stay F32 as the converter keeps them)
  int splits = 1;                     // > 1: NAME-0000k-of-0000n.gguf files
  // Not F32: the matrices are encoded in this type and decoded again, and stored as `matrices`:
  // an F32 file of exactly the values a file of this type holds (its "dequantized twin").
  GgmlType round_trip = GgmlType::F32;
  // The tokenizer.ggml.* keys and tokenizer.chat_template, from the project's tokenizer.json and
  // chat template (what the tiny checkpoints carry).
  bool vocabulary = true;
};

// `values` as a file of `type` gives them back.
inline std::vector<float> round_trip_values(GgmlType type, const std::vector<float>& values) {
  const std::vector<uint8_t> encoded = encode_ggml(type, values);
  std::vector<float> out(values.size());
  dequantize_ggml_row(type, encoded.data(), out.data(), int64_t(values.size()));
  return out;
}

// Writes `ckpt` as GGUF `path` (for splits, path names the first file's prefix + ".gguf").
// Returns the first file.
inline std::filesystem::path write_gguf_model(const Checkpoint& ckpt, const std::filesystem::path& path,
                                              const GgufModelOptions& options = {}) {
  const TextConfig& c = ckpt.text();
  const ModelWeights& w = ckpt.weights();
  GgufBuilder meta;
  meta.add_string("general.architecture", "inkling");
  meta.add_u32("inkling.block_count", uint32_t(c.num_layers));
  meta.add_u32("inkling.context_length", uint32_t(std::min<int64_t>(c.max_position, 1 << 30)));
  meta.add_u32("inkling.embedding_length", uint32_t(c.hidden_size));
  meta.add_u32("inkling.feed_forward_length", uint32_t(c.dense_width));
  meta.add_u32("inkling.attention.head_count", uint32_t(c.n_heads));
  std::vector<int32_t> kv_heads;
  std::vector<uint8_t> local;
  for (const LayerSpec& layer : c.layers) {
    kv_heads.push_back(layer.n_kv_heads);
    local.push_back(layer.sliding ? 1 : 0);
  }
  meta.add_array<int32_t>("inkling.attention.head_count_kv", GgufValueType::I32, kv_heads);
  meta.add_f32("inkling.attention.layer_norm_rms_epsilon", c.rms_norm_eps);
  meta.add_u32("inkling.expert_count", uint32_t(c.n_routed_experts));
  meta.add_u32("inkling.expert_used_count", uint32_t(c.experts_per_token));
  meta.add_u32("inkling.attention.key_length", uint32_t(c.head_dim));
  meta.add_u32("inkling.attention.value_length", uint32_t(c.head_dim));
  meta.add_u32("inkling.vocab_size", uint32_t(c.vocab_size));
  meta.add_u32("inkling.expert_feed_forward_length", uint32_t(c.moe_width));
  meta.add_u32("inkling.expert_shared_count", uint32_t(c.n_shared_experts));
  meta.add_f32("inkling.expert_weights_scale", c.route_scale);
  meta.add_u32("inkling.expert_gating_func", 2);
  meta.add_u32("inkling.attention.sliding_window", uint32_t(c.sliding_window));
  meta.add_array<uint8_t>("inkling.attention.sliding_window_pattern", GgufValueType::Bool, local);
  meta.add_u32("inkling.d_rel", uint32_t(c.d_rel));
  meta.add_u32("inkling.rel_extent", uint32_t(c.rel_extent));
  meta.add_u32("inkling.rel_extent_swa", uint32_t(c.sliding_window));
  meta.add_u32("inkling.shortconv_kernel", uint32_t(c.conv_kernel));
  int dense = 0;
  while (dense < c.num_layers && c.layers[size_t(dense)].dense_mlp) ++dense;
  meta.add_u32("inkling.dense_block_count", uint32_t(dense));
  meta.add_f32("inkling.logit_scale_denom", c.mup_width_multiplier);
  meta.add_u32("inkling.log_scaling_n_floor", uint32_t(c.log_scaling_n_floor.value_or(0)));
  meta.add_f32("inkling.log_scaling_alpha", c.log_scaling_alpha);
  meta.add_u32("inkling.unpadded_vocab_size", uint32_t(c.unpadded_vocab_size));
  if (options.vocabulary)
    add_project_vocabulary_metadata(meta, c.vocab_size, uint32_t(ckpt.config().eos_token_id));
  else
    meta.add_u32("tokenizer.ggml.eos_token_id", uint32_t(ckpt.config().eos_token_id));

  struct Pending {
    std::string name;
    GgmlType type;
    std::vector<uint64_t> dims;
    std::vector<uint8_t> bytes;
  };
  std::vector<Pending> tensors;
  auto add = [&](const std::string& name, GgmlType type, std::vector<int64_t> shape, const std::vector<float>& values) {
    tensors.push_back({name, type, {shape.rbegin(), shape.rend()}, encode_ggml(type, values)});
  };
  auto matrix_payload = [&](std::vector<float> values) {
    if (options.round_trip != GgmlType::F32) values = round_trip_values(options.round_trip, values);
    return values;
  };
  // A projection, the embedding or the head, in options.matrices (the router stays F32, as the
  // converter keeps it).
  auto add_matrix = [&](const std::string& name, const WeightMatrix& m) {
    add(name, options.matrices, {m.rows, m.cols}, matrix_payload(matrix_values(m)));
  };
  auto add_stack = [&](const std::string& name, const std::vector<GatedExpert>& experts, WeightMatrix GatedExpert::*part) {
    std::vector<float> all;
    for (const GatedExpert& e : experts) {
      std::vector<float> one = matrix_values(e.*part);
      all.insert(all.end(), one.begin(), one.end());
    }
    const WeightMatrix& first = experts.front().*part;
    add(name, options.matrices, {int64_t(experts.size()), first.rows, first.cols}, matrix_payload(all));
  };
  auto add_vector = [&](const std::string& name, const VectorWeight& v, std::vector<int64_t> shape, GgmlType type) {
    add(name, type, std::move(shape), vector_values(v));
  };
  const int64_t h = c.hidden_size, k = c.conv_kernel;
  add_matrix("token_embd.weight", w.embed);
  add_vector("token_embd_norm.weight", w.embed_norm, {h}, GgmlType::F32);
  for (int i = 0; i < c.num_layers; ++i) {
    const LayerWeights& layer = w.layers[size_t(i)];
    const std::string g = "blk." + std::to_string(i) + ".";
    const int64_t kv_dim = int64_t(layer.spec.n_kv_heads) * layer.spec.head_dim;
    add_vector(g + "attn_k_norm.weight", layer.attn.k_norm, {layer.spec.head_dim}, options.vectors);
    add_vector(g + "shortconv_k.weight", layer.attn.k_conv, {kv_dim, k}, GgmlType::F32);
    add_vector(g + "attn_q_norm.weight", layer.attn.q_norm, {layer.spec.head_dim}, options.vectors);
    add_vector(g + "attn_rel_proj.weight", layer.attn.rel_proj, {c.d_rel, layer.spec.rel_extent}, GgmlType::F32);
    add_vector(g + "shortconv_v.weight", layer.attn.v_conv, {kv_dim, k}, GgmlType::F32);
    add_matrix(g + "attn_k.weight", layer.attn.k);
    add_matrix(g + "attn_output.weight", layer.attn.o);
    add_matrix(g + "attn_q.weight", layer.attn.q);
    add_matrix(g + "attn_r.weight", layer.attn.r);
    add_matrix(g + "attn_v.weight", layer.attn.v);
    add_vector(g + "attn_norm.weight", layer.attn_norm, {h}, options.vectors);
    add_vector(g + "shortconv_attn.weight", layer.attn_conv, {h, k}, GgmlType::F32);
    add(g + "ffn_gscale.weight", GgmlType::F32, {1}, {layer.mlp.global_scale});
    if (layer.mlp.dense) {
      add_matrix(g + "ffn_gate.weight", layer.mlp.dense_mlp.gate);
      add_matrix(g + "ffn_up.weight", layer.mlp.dense_mlp.up);
      add_matrix(g + "ffn_down.weight", layer.mlp.dense_mlp.down);
    } else {
      add_stack(g + "ffn_gate_exps.weight", layer.mlp.experts, &GatedExpert::gate);
      add_stack(g + "ffn_up_exps.weight", layer.mlp.experts, &GatedExpert::up);
      add_stack(g + "ffn_down_exps.weight", layer.mlp.experts, &GatedExpert::down);
      add(g + "exp_probs_b.bias", GgmlType::F32, {int64_t(layer.mlp.correction_bias.size())}, layer.mlp.correction_bias);
      add(g + "ffn_gate_inp.weight", GgmlType::F32, {layer.mlp.router.rows, layer.mlp.router.cols},
          matrix_values(layer.mlp.router));
      add_stack(g + "ffn_gate_shexp.weight", layer.mlp.shared, &GatedExpert::gate);
      add_stack(g + "ffn_up_shexp.weight", layer.mlp.shared, &GatedExpert::up);
      add_stack(g + "ffn_down_shexp.weight", layer.mlp.shared, &GatedExpert::down);
    }
    add_vector(g + "ffn_norm.weight", layer.mlp_norm, {h}, options.vectors);
    add_vector(g + "shortconv_mlp.weight", layer.mlp_conv, {h, k}, GgmlType::F32);
  }
  add_vector("output_norm.weight", w.norm, {h}, GgmlType::F32);
  add_matrix("output.weight", w.lm_head);

  if (options.splits <= 1) {
    for (Pending& t : tensors) meta.add_tensor(t.name, t.type, t.dims, std::move(t.bytes));
    meta.write(path);
    return path;
  }
  const std::string prefix = (path.parent_path() / path.stem()).string();
  std::filesystem::path first;
  const size_t per_file = (tensors.size() + size_t(options.splits) - 1) / size_t(options.splits);
  for (int s = 0; s < options.splits; ++s) {
    GgufBuilder part = s == 0 ? meta : GgufBuilder{};
    part.add_u16("split.no", uint16_t(s));
    part.add_u16("split.count", uint16_t(options.splits));
    if (s == 0) part.add_i32("split.tensors.count", int32_t(tensors.size()));
    for (size_t t = size_t(s) * per_file; t < std::min(tensors.size(), size_t(s + 1) * per_file); ++t)
      part.add_tensor(tensors[t].name, tensors[t].type, tensors[t].dims, tensors[t].bytes);
    char tail[32];
    std::snprintf(tail, sizeof tail, "-%05d-of-%05d.gguf", s + 1, options.splits);
    const std::filesystem::path file = prefix + tail;
    part.write(file);
    if (s == 0) first = file;
  }
  return first;
}

}  // namespace inkling::testing
