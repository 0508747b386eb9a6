// Checkpoints as GGUF files in the converter's layout (see gguf_export.h).
#include "model/gguf_export.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "io/gguf_vocabulary.h"
#include "io/text_file.h"
#include "tensor/ggml_quantize.h"

namespace inkling {
namespace {

namespace fs = std::filesystem;

// llama.cpp's "more bits" layers of the K mixes: the first and last eighth, and every third
// layer between.
bool more_bits(int layer, int layers) {
  return layer < layers / 8 || layer >= 7 * layers / 8 || (layer - layers / 8) % 3 == 2;
}

// llama-quantize's replacement for a type whose blocks do not tile a row of `cols`.
GgmlType fallback_for_row(const GgufMatrixSlot& slot, GgmlType type) {
  if (slot.cols % ggml_type_info(type).block_elements == 0) return type;
  GgmlType fallback;
  switch (type) {
    case GgmlType::Q4_K: fallback = GgmlType::Q5_0; break;
    case GgmlType::Q5_K: fallback = GgmlType::Q5_1; break;
    case GgmlType::Q6_K: fallback = GgmlType::Q8_0; break;
    default:
      throw Error(slot.name + ": rows of " + std::to_string(slot.cols) + " values are not whole " +
                  std::string(ggml_type_name(type)) + " blocks, and llama-quantize has no fallback for it");
  }
  return slot.cols % ggml_type_info(fallback).block_elements == 0 ? fallback : GgmlType::F16;
}

bool contains(const std::string& text, const char* part) { return text.find(part) != std::string::npos; }

}  // namespace

GgmlType gguf_q4_k_m_type(const GgufMatrixSlot& slot) {
  // The 8-expert rules are llama.cpp's for Mixtral; they apply to any model of exactly 8 experts.
  const bool eight_experts = slot.experts == 8;
  // llama-quantize tells the tensors apart by substrings of their names, tried in this order.
  GgmlType type = GgmlType::Q4_K;
  if (slot.name == "output.weight") {
    // Rows that are not whole Q6_K blocks take Q8_0 by this rule, before any fallback.
    type = slot.cols % ggml_type_info(GgmlType::Q6_K).block_elements == 0 ? GgmlType::Q6_K : GgmlType::Q8_0;
  } else if (slot.name == "token_embd.weight") {
    // Q4_K: the output.weight rule covers it only for tied embeddings, and the file always holds
    // an output.weight.
  } else if (contains(slot.name, "attn_v.weight")) {
    // llama-quantize counts attn_v tensors; the count is the layer, as every Inkling layer has one.
    type = eight_experts ? GgmlType::Q8_0 : more_bits(slot.layer, slot.num_layers) ? GgmlType::Q6_K : GgmlType::Q4_K;
  } else if (contains(slot.name, "attn_k.weight")) {
    if (eight_experts) type = GgmlType::Q8_0;
  } else if (contains(slot.name, "attn_q.weight")) {
    // Q4_K (attn_q's own rules are for the IQ3 mixes).
  } else if (contains(slot.name, "attn_output.weight")) {
    if (eight_experts) type = GgmlType::Q5_K;
  } else if (contains(slot.name, "ffn_up") || contains(slot.name, "ffn_gate")) {
    // Q4_K (their rules are for IQ3_XS).
  } else if (contains(slot.name, "ffn_down")) {
    const int layer = slot.experts > 1 ? slot.layer : slot.ffn_down_ordinal;
    if (more_bits(layer, slot.num_layers)) type = GgmlType::Q6_K;
  }
  return fallback_for_row(slot, type);
}

namespace {

nlohmann::json read_json_or_null(const fs::path& path, size_t limit) {
  if (!fs::exists(path)) return nullptr;
  nlohmann::json root = nlohmann::json::parse(read_text_file(path.string(), limit), nullptr, false);
  if (root.is_discarded()) throw Error(path.string() + ": invalid JSON");
  return root;
}

// The tokenizer.ggml.* keys (and the converter's general.sampling.* copy of generation_config.json).
void add_side_metadata(GgufMetadata& meta, const Checkpoint& ckpt, const GgufExportOptions& options) {
  const uint32_t eos = uint32_t(ckpt.config().eos_token_id);
  if (ckpt.gguf()) {
    bool copied_eos = false;
    const GgufFile& source = ckpt.gguf()->first();
    for (const std::string& key : source.keys()) {
      const bool tokenizer = key.rfind("tokenizer.", 0) == 0, sampling = key.rfind("general.sampling.", 0) == 0;
      if (!((sampling && options.sampling) || (tokenizer && (options.vocabulary || key == "tokenizer.ggml.eos_token_id")))) continue;
      meta.add_value(key, *source.find(key));
      copied_eos = copied_eos || key == "tokenizer.ggml.eos_token_id";
    }
    if (!copied_eos) meta.add_u32("tokenizer.ggml.eos_token_id", eos);
    return;
  }
  const fs::path dir = options.side_files.empty() ? ckpt.dir() : options.side_files;
  const nlohmann::json generation = read_json_or_null(dir / "generation_config.json", kMaxConfigFileBytes);
  if (generation.is_object() && options.sampling) {
    auto number = [&](const char* key) { return generation.contains(key) && generation[key].is_number(); };
    if (number("top_k")) meta.add_i32("general.sampling.top_k", generation["top_k"].get<int32_t>());
    if (number("top_p")) meta.add_f32("general.sampling.top_p", generation["top_p"].get<float>());
    if (number("min_p")) meta.add_f32("general.sampling.min_p", generation["min_p"].get<float>());
    if (number("temperature")) meta.add_f32("general.sampling.temp", generation["temperature"].get<float>());
  }
  const nlohmann::json tokenizer = options.vocabulary ? read_json_or_null(dir / "tokenizer.json", kMaxTokenizerFileBytes)
                                                      : nlohmann::json(nullptr);
  if (tokenizer.is_null()) {
    meta.add_u32("tokenizer.ggml.eos_token_id", eos);
    return;
  }
  const nlohmann::json config = read_json_or_null(dir / "tokenizer_config.json", kMaxConfigFileBytes);
  std::string chat_template;
  if (config.is_object() && config.contains("chat_template") && config["chat_template"].is_string())
    chat_template = config["chat_template"].get<std::string>();
  else if (fs::exists(dir / "chat_template.jinja"))
    chat_template = read_text_file((dir / "chat_template.jinja").string(), kMaxTemplateFileBytes);
  std::optional<uint32_t> padding;
  if (config.is_object() && config.contains("pad_token")) {
    const nlohmann::json& pad = config["pad_token"];
    const std::string content = pad.is_string() ? pad.get<std::string>()
                                : pad.is_object() ? pad.value("content", std::string()) : std::string();
    for (const auto& token : tokenizer.value("added_tokens", nlohmann::json::array()))
      if (token.value("content", std::string()) == content) padding = token["id"].get<uint32_t>();
  }
  add_vocabulary_metadata(meta, gguf_vocabulary(tokenizer, ckpt.text().vocab_size), eos, padding, chat_template);
}

std::vector<float> matrix_values(const WeightMatrix& m) {
  std::vector<float> out(size_t(m.rows * m.cols));
  for (int64_t r = 0; r < m.rows; ++r) dequantize_row(m, r, out.data() + r * m.cols);
  return out;
}

std::vector<float> vector_values(const VectorWeight& v) {
  std::vector<float> out(size_t(v.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = v.at_f32(i);
  return out;
}

}  // namespace

GgufTarget gguf_target(const std::string& name) {
  auto all = [](GgmlType type) { return [type](const GgufMatrixSlot&) { return type; }; };
  if (name == "f32") return {name, 0, all(GgmlType::F32)};
  if (name == "bf16") return {name, 32, all(GgmlType::BF16)};
  if (name == "q8_0") return {name, 7, all(GgmlType::Q8_0)};
  if (name == "q4_k_m") return {name, 15, gguf_q4_k_m_type};
  throw Error("unknown GGUF target \"" + name + "\" (f32, bf16, q8_0, q4_k_m)");
}

GgufModelPlan plan_gguf_model(const Checkpoint& ckpt, const GgufExportOptions& options) {
  if (!options.matrix_type) throw Error("plan_gguf_model: no matrix type policy");
  const TextConfig& c = ckpt.text();
  const ModelWeights& w = ckpt.weights();
  GgufModelPlan plan;
  GgufMetadata& meta = plan.meta;
  std::string name = options.name;
  if (name.empty()) name = (ckpt.gguf() ? ckpt.gguf()->first().path().stem() : fs::path(ckpt.dir()).filename()).string();
  meta.add_string("general.architecture", "inkling");
  meta.add_string("general.type", "model");
  meta.add_string("general.name", name);
  meta.add_u32("inkling.block_count", uint32_t(c.num_layers));
  meta.add_u32("inkling.context_length", uint32_t(std::min<int64_t>(c.max_position, int64_t(1) << 30)));
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
  meta.add_u32("general.file_type", options.file_type);
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
  meta.add_u32("general.quantization_version", 2);
  add_side_metadata(meta, ckpt, options);

  std::vector<GgufTensorPlan>& tensors = plan.tensors;
  auto add = [&](const std::string& tensor, GgmlType type, std::vector<int64_t> shape,
                 std::function<std::vector<float>()> values, bool transform) {
    GgufTensorPlan t{tensor, type, {shape.rbegin(), shape.rend()}, nullptr};
    const uint64_t dims0 = t.dims.front();
    t.produce = [type, dims0, values = std::move(values), transform, &options](std::vector<uint8_t>& out) {
      std::vector<float> v = values();
      if (transform && options.transform) options.transform(v);
      out.resize(size_t(ggml_row_bytes(type, int64_t(v.size())).value()));
      // Row by row across the threads (a row is whole blocks; K types search scales per block).
      const int64_t cols = int64_t(dims0), rows = int64_t(v.size()) / cols;
      const int64_t row_bytes = int64_t(ggml_row_bytes(type, cols).value());
#pragma omp parallel for schedule(static)
      for (int64_t r = 0; r < rows; ++r) quantize_ggml_row(type, v.data() + r * cols, out.data() + r * row_bytes, cols);
    };
    (void)t.nbytes();  // a shape the type cannot hold fails now, naming the tensor
    tensors.push_back(std::move(t));
  };
  int ffn_downs = 0;  // matrices come by layer, and within one by name, as llama-quantize orders them
  auto slot_type = [&](const std::string& tensor, int layer, int64_t cols) {
    GgufMatrixSlot slot{tensor, layer, c.num_layers, cols, c.n_routed_experts, -1};
    if (tensor.find("ffn_down") != std::string::npos) slot.ffn_down_ordinal = ffn_downs++;
    return options.matrix_type(slot);
  };
  auto add_matrix = [&](const std::string& tensor, int layer, const WeightMatrix& m) {
    add(tensor, slot_type(tensor, layer, m.cols), {m.rows, m.cols}, [&m] { return matrix_values(m); }, true);
  };
  auto add_stack = [&](const std::string& tensor, int layer, const std::vector<GatedExpert>& experts,
                       WeightMatrix GatedExpert::*part) {
    const WeightMatrix& first = experts.front().*part;
    add(tensor, slot_type(tensor, layer, first.cols), {int64_t(experts.size()), first.rows, first.cols},
        [&experts, part] {
          std::vector<float> all;
          for (const GatedExpert& e : experts) {
            std::vector<float> one = matrix_values(e.*part);
            all.insert(all.end(), one.begin(), one.end());
          }
          return all;
        },
        true);
  };
  auto add_vector = [&](const std::string& tensor, const VectorWeight& v, std::vector<int64_t> shape, GgmlType type) {
    add(tensor, type, std::move(shape), [&v] { return vector_values(v); }, false);
  };
  auto add_values = [&](const std::string& tensor, std::vector<int64_t> shape, std::vector<float> values) {
    add(tensor, GgmlType::F32, std::move(shape), [values = std::move(values)] { return values; }, false);
  };
  const int64_t h = c.hidden_size, k = c.conv_kernel;
  add_matrix("token_embd.weight", -1, w.embed);
  add_vector("token_embd_norm.weight", w.embed_norm, {h}, GgmlType::F32);
  for (int i = 0; i < c.num_layers; ++i) {
    const LayerWeights& layer = w.layers[size_t(i)];
    const std::string g = "blk." + std::to_string(i) + ".";
    const int64_t kv_dim = int64_t(layer.spec.n_kv_heads) * layer.spec.head_dim;
    add_vector(g + "attn_k_norm.weight", layer.attn.k_norm, {layer.spec.head_dim}, options.vector_type);
    add_vector(g + "shortconv_k.weight", layer.attn.k_conv, {kv_dim, k}, GgmlType::F32);
    add_vector(g + "attn_q_norm.weight", layer.attn.q_norm, {layer.spec.head_dim}, options.vector_type);
    add_vector(g + "attn_rel_proj.weight", layer.attn.rel_proj, {c.d_rel, layer.spec.rel_extent}, GgmlType::F32);
    add_vector(g + "shortconv_v.weight", layer.attn.v_conv, {kv_dim, k}, GgmlType::F32);
    add_matrix(g + "attn_k.weight", i, layer.attn.k);
    add_matrix(g + "attn_output.weight", i, layer.attn.o);
    add_matrix(g + "attn_q.weight", i, layer.attn.q);
    add_matrix(g + "attn_r.weight", i, layer.attn.r);
    add_matrix(g + "attn_v.weight", i, layer.attn.v);
    add_vector(g + "attn_norm.weight", layer.attn_norm, {h}, options.vector_type);
    add_vector(g + "shortconv_attn.weight", layer.attn_conv, {h, k}, GgmlType::F32);
    if (layer.mlp.dense) {
      add_values(g + "ffn_gscale.weight", {1}, {layer.mlp.global_scale});
      add_matrix(g + "ffn_gate.weight", i, layer.mlp.dense_mlp.gate);
      add_matrix(g + "ffn_up.weight", i, layer.mlp.dense_mlp.up);
      add_matrix(g + "ffn_down.weight", i, layer.mlp.dense_mlp.down);
    } else {
      add_stack(g + "ffn_gate_exps.weight", i, layer.mlp.experts, &GatedExpert::gate);
      add_stack(g + "ffn_up_exps.weight", i, layer.mlp.experts, &GatedExpert::up);
      add_stack(g + "ffn_down_exps.weight", i, layer.mlp.experts, &GatedExpert::down);
      add_values(g + "exp_probs_b.bias", {int64_t(layer.mlp.correction_bias.size())}, layer.mlp.correction_bias);
      add_values(g + "ffn_gscale.weight", {1}, {layer.mlp.global_scale});
      const WeightMatrix& router = layer.mlp.router;
      add(g + "ffn_gate_inp.weight", GgmlType::F32, {router.rows, router.cols}, [&router] { return matrix_values(router); },
          false);
      if (!layer.mlp.shared.empty()) {
        add_stack(g + "ffn_gate_shexp.weight", i, layer.mlp.shared, &GatedExpert::gate);
        add_stack(g + "ffn_up_shexp.weight", i, layer.mlp.shared, &GatedExpert::up);
        add_stack(g + "ffn_down_shexp.weight", i, layer.mlp.shared, &GatedExpert::down);
      }
    }
    add_vector(g + "ffn_norm.weight", layer.mlp_norm, {h}, options.vector_type);
    add_vector(g + "shortconv_mlp.weight", layer.mlp_conv, {h, k}, GgmlType::F32);
  }
  add_vector("output_norm.weight", w.norm, {h}, GgmlType::F32);
  add_matrix("output.weight", -1, w.lm_head);
  return plan;
}

GgufExportReport export_gguf(const fs::path& input, const fs::path& output, const GgufTarget& target,
                             const std::function<void(uint64_t, uint64_t)>& progress) {
  std::error_code ec;
  if (fs::exists(output) && fs::equivalent(output, input, ec)) throw Error("the output file must differ from the input");
  if (fs::is_directory(output)) throw Error(output.string() + " is a directory; give the .gguf file to write");
  std::unique_ptr<Checkpoint> ckpt = Checkpoint::open(input);
  GgufExportOptions options;
  options.matrix_type = target.policy;
  options.file_type = target.file_type;
  GgufModelPlan plan = plan_gguf_model(*ckpt, options);
  GgufExportReport report;
  for (const GgufTensorPlan& t : plan.tensors) ++report.types[std::string(ggml_type_name(t.type))];
  write_gguf_file(output, plan.meta, plan.tensors, progress);
  report.output_bytes = fs::file_size(output);
  return report;
}

}  // namespace inkling
