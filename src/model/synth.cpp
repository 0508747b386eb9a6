#include "model/synth.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "model/config.h"
#include "tensor/error.h"

#ifndef INKLING_DATA_DIR
#define INKLING_DATA_DIR ""
#endif
// Where `cmake --install` puts the data, relative to the prefix (the binary is in PREFIX/bin).
#ifndef INKLING_INSTALL_DATA_DIR
#define INKLING_INSTALL_DATA_DIR "share/inkling"
#endif

namespace inkling {

namespace {

using ojson = nlohmann::ordered_json;

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t hash_name(const std::string& name) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char ch : name) h = (h ^ ch) * 1099511628211ull;
  return h;
}

// Uniform with unit variance: deterministic per (seed, tensor, index) and cheap enough for 2.5B values.
inline float unit_noise(uint64_t stream, uint64_t index) {
  uint64_t bits = splitmix64(stream ^ splitmix64(index));
  float u = float(bits >> 40) * (1.0f / 16777216.0f);  // [0, 1)
  return (2.0f * u - 1.0f) * 1.7320508f;
}

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  if (!out) throw Error("cannot write " + path.string());
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace

SynthPreset parse_synth_preset(const std::string& name) {
  if (name == "tiny") return SynthPreset::Tiny;
  if (name == "small") return SynthPreset::Small;
  if (name == "bench") return SynthPreset::Bench;
  throw Error("unknown preset \"" + name + "\" (expected tiny, small or bench)");
}

namespace {

std::vector<std::filesystem::path> data_dir_candidates() {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("INKLING_DATA")) return {env};
  std::vector<fs::path> out;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) out.push_back(exe.parent_path().parent_path() / INKLING_INSTALL_DATA_DIR);
  if (*INKLING_DATA_DIR) out.push_back(INKLING_DATA_DIR);
  return out;
}

}  // namespace

int64_t synth_successor(int64_t token) {
  if (token < 0 || token >= kSynthChainTokens) return -1;
  // 7919 is prime and divides no factor of 199998 = 2 * 3^2 * 41 * 271: a bijection.
  return (token * 7919 + 1) % kSynthChainTokens;
}

std::filesystem::path data_dir() {
  const std::vector<std::filesystem::path> candidates = data_dir_candidates();
  for (const auto& dir : candidates)
    if (std::filesystem::exists(dir / "tokenizer.json")) return dir;
  std::string looked;
  for (const auto& dir : candidates) looked += (looked.empty() ? "" : ", ") + dir.string();
  throw Error("tokenizer.json not found in " + (looked.empty() ? std::string("(no data folder)") : looked) +
              " (install with cmake --install, or set INKLING_DATA to the repository's data/ folder)");
}

ojson synth_text_config(SynthPreset preset, bool hf_style) {
  struct Shape {
    int hidden, layers, heads, kv, swa_heads, swa_kv, head_dim, d_rel, rel_extent, window;
    int dense_width, moe_width, routed, active, shared, dense_layers;
    double mup;
    int64_t log_floor;
    std::vector<int> global_layers;
  };
  Shape s;
  switch (preset) {
    case SynthPreset::Tiny:
      // Every code path: sliding + global, dense + MoE (two MoE layers so the NVFP4 layout has a
      // bf16 first MoE layer and a quantized one), window 16 and log-scaling floor 32 inside 64 tokens.
      s = {64, 4, 4, 1, 4, 2, 16, 4, 24, 16, 128, 64, 8, 2, 2, 1, 4.0, 32, {3}};
      break;
    case SynthPreset::Small:
      s = {1024, 12, 8, 2, 8, 2, 128, 16, 1024, 512, 4096, 512, 8, 2, 2, 1, 8.0, 128000, {5, 11}};
      break;
    case SynthPreset::Bench:
      s = {2048, 8, 16, 4, 16, 4, 128, 16, 1024, 512, 8192, 1024, 32, 6, 2, 1, 8.0, 128000, {5, 7}};
      break;
    default:  // a value outside the enum: without this, every field of s may be read uninitialized
      throw Error("unknown synth preset " + std::to_string(int(preset)));
  }
  ojson tc = ojson::object();
  tc["model_type"] = "inkling_text";
  tc["hidden_size"] = s.hidden;
  tc["num_hidden_layers"] = s.layers;
  tc["num_attention_heads"] = s.heads;
  tc["num_key_value_heads"] = s.kv;
  tc["head_dim"] = s.head_dim;
  tc["swa_num_attention_heads"] = s.swa_heads;
  tc["swa_num_key_value_heads"] = s.swa_kv;
  tc["swa_head_dim"] = s.head_dim;
  tc["d_rel"] = s.d_rel;
  tc["rel_extent"] = s.rel_extent;
  tc["sliding_window_size"] = s.window;
  tc["log_scaling_n_floor"] = s.log_floor;
  tc["log_scaling_alpha"] = 0.1;
  if (hf_style) {
    ojson types = ojson::array();
    for (int i = 0; i < s.layers; ++i) {
      bool global = std::find(s.global_layers.begin(), s.global_layers.end(), i) != s.global_layers.end();
      types.push_back(global ? "hybrid" : "hybrid_sliding");
    }
    tc["layer_types"] = types;
    ojson mlp_types = ojson::array();
    for (int i = 0; i < s.layers; ++i) mlp_types.push_back(i < s.dense_layers ? "dense" : "sparse");
    tc["mlp_layer_types"] = mlp_types;
    tc["dense_mlp_idx"] = s.dense_layers;
    tc["intermediate_size"] = s.dense_width;
    tc["moe_intermediate_size"] = s.moe_width;
  } else {
    ojson local = ojson::array();
    for (int i = 0; i < s.layers; ++i)
      if (std::find(s.global_layers.begin(), s.global_layers.end(), i) == s.global_layers.end()) local.push_back(i);
    tc["local_layer_ids"] = local;
    tc["dense_mlp_idx"] = s.dense_layers;
    tc["dense_intermediate_size"] = s.dense_width;
    tc["intermediate_size"] = s.moe_width;
  }
  tc["use_sconv"] = true;
  tc["sconv_kernel_size"] = 4;
  tc["n_routed_experts"] = s.routed;
  tc["num_experts_per_tok"] = s.active;
  tc["n_shared_experts"] = s.shared;
  tc["route_scale"] = 8.0;
  tc["logits_mup_width_multiplier"] = s.mup;
  tc["rms_norm_eps"] = 1e-6;
  tc["vocab_size"] = 201024;
  tc["unpadded_vocab_size"] = 200058;
  tc["model_max_length"] = 1048576;
  tc["gate_activation"] = "sigmoid";
  tc["norm_after_topk"] = true;
  tc["use_global_scale"] = true;
  tc["use_gate_bias"] = true;
  tc["use_embed_norm"] = true;
  tc["shared_expert_sink"] = true;
  tc["tie_word_embeddings"] = false;
  return tc;
}

void write_tokenizer_files(const std::filesystem::path& dir) {
  std::filesystem::path data = data_dir();
  std::filesystem::copy_file(data / "tokenizer.json", dir / "tokenizer.json",
                             std::filesystem::copy_options::overwrite_existing);
  ojson tokenizer_config = ojson::object();
  tokenizer_config["tokenizer_class"] = "PreTrainedTokenizerFast";
  tokenizer_config["bos_token"] = nullptr;
  tokenizer_config["eos_token"] = "<|content_model_end_sampling|>";
  tokenizer_config["pad_token"] = "<|endoftext|>";
  tokenizer_config["add_bos_token"] = false;
  tokenizer_config["add_eos_token"] = false;
  tokenizer_config["model_max_length"] = 1048576;
  if (std::filesystem::exists(data / "inkling_chat_template.jinja"))
    tokenizer_config["chat_template"] = read_text(data / "inkling_chat_template.jinja");
  write_text(dir / "tokenizer_config.json", tokenizer_config.dump(2) + "\n");
}

void write_synthetic_checkpoint(const std::filesystem::path& dir, const SynthOptions& options) {
  const TargetFormat& format = options.format;
  bool f32 = format.layout == TargetLayout::OriginalF32;
  ojson text = synth_text_config(options.preset, /*hf_style=*/f32);
  TextConfig tc = parse_text_config(nlohmann::json::parse(text.dump()));
  data_dir();  // fails now, not after the weights are written, when the tokenizer is nowhere
  std::filesystem::create_directories(dir);

  // ---- original-layout tensor list (names, shapes and release dtypes) ----
  DType wdt = f32 ? DType::F32 : DType::BF16;
  std::vector<TensorSpec> specs;
  std::vector<float> stddev;  // per spec: noise scale; < 0 means "1 + |value| noise" (norm weights)
  auto add = [&](const std::string& name, DType dtype, std::vector<int64_t> shape, float scale) {
    specs.push_back({name, dtype, std::move(shape)});
    stddev.push_back(scale);
  };
  const int64_t h = tc.hidden_size, v = tc.vocab_size, k = tc.conv_kernel;
  const float norm_weight = -0.1f;
  add("model.llm.embed.weight", wdt, {v, h}, 1.0f);
  add("model.llm.embed_norm.weight", wdt, {h}, norm_weight);
  int first_moe_layer = -1;
  for (int i = 0; i < tc.num_layers; ++i) {
    const LayerSpec& s = tc.layers[size_t(i)];
    std::string p = "model.llm.layers." + std::to_string(i) + ".";
    int64_t qd = int64_t(s.n_heads) * s.head_dim, kvd = int64_t(s.n_kv_heads) * s.head_dim;
    float in_scale = 1.0f / std::sqrt(float(h));
    add(p + "attn_norm.weight", wdt, {h}, norm_weight);
    add(p + "mlp_norm.weight", wdt, {h}, norm_weight);
    add(p + "attn_sconv.weight", wdt, {h, 1, k}, 0.2f);
    add(p + "mlp_sconv.weight", wdt, {h, 1, k}, 0.2f);
    add(p + "attn.wq_du.weight", wdt, {qd, h}, in_scale);
    add(p + "attn.wk_dv.weight", wdt, {kvd, h}, in_scale);
    add(p + "attn.wv_dv.weight", wdt, {kvd, h}, in_scale);
    add(p + "attn.wr_du.weight", wdt, {int64_t(s.n_heads) * tc.d_rel, h}, in_scale);
    add(p + "attn.wo_ud.weight", wdt, {h, qd}, 0.5f / std::sqrt(float(qd)));
    add(p + "attn.q_norm.weight", wdt, {s.head_dim}, norm_weight);
    add(p + "attn.k_norm.weight", wdt, {s.head_dim}, norm_weight);
    add(p + "attn.k_sconv.weight", wdt, {kvd, 1, k}, 0.2f);
    add(p + "attn.v_sconv.weight", wdt, {kvd, 1, k}, 0.2f);
    add(p + "attn.rel_logits_proj.proj", wdt, {tc.d_rel, s.rel_extent}, 0.5f);
    if (s.dense_mlp) {
      add(p + "mlp.w13_dn.weight", wdt, {2 * int64_t(tc.dense_width), h}, in_scale);
      add(p + "mlp.w2_md.weight", wdt, {h, tc.dense_width}, 1.0f / std::sqrt(float(tc.dense_width)));
      add(p + "mlp.global_scale", wdt, {1}, 0.0f);  // constant, see below
    } else {
      if (first_moe_layer < 0) first_moe_layer = i;
      int64_t e = tc.n_routed_experts, sh = tc.n_shared_experts, w = tc.moe_width;
      add(p + "mlp.gate.weight", wdt, {e + sh, h}, in_scale);
      add(p + "mlp.gate.bias", DType::F32, {e}, 0.05f);
      add(p + "mlp.gate.global_scale", DType::F32, {1}, 0.0f);
      add(p + "mlp.experts.w13_weight", wdt, {e, 2 * w, h}, in_scale);
      add(p + "mlp.experts.w2_weight", wdt, {e, h, w}, 1.0f / std::sqrt(float(w)));
      if (sh > 0) {
        add(p + "mlp.shared_experts.shared_w13_weight", wdt, {sh, 2 * w, h}, in_scale);
        add(p + "mlp.shared_experts.shared_w2_weight", wdt, {sh, h, w}, 1.0f / std::sqrt(float(w)));
      }
    }
  }
  add("model.llm.norm.weight", wdt, {h}, norm_weight);
  // Logits std ~ 3 after the muP division so greedy decoding has a clear top-1.
  add("model.llm.unembed.weight", wdt, {v, h}, 3.0f * tc.mup_width_multiplier / std::sqrt(float(h)));
  // Towers and the MTP head the loader must skip.
  add("model.visual.patch_embed.proj.weight", DType::BF16, {32, 3, 2, 2}, 0.1f);
  add("model.audio.encoder.weight", DType::BF16, {16, 16}, 0.1f);
  add("model.mtp.layers.0.input_layernorm.weight", wdt, {h}, norm_weight);

  OriginalTensors source;
  source.specs = specs;
  uint64_t seed = options.seed;
  source.read = [&, seed](const TensorSpec& spec, std::vector<float>& out) {
    size_t index = size_t(&spec - source.specs.data());
    float scale = stddev[index];
    int64_t n = 1;
    for (int64_t dim : spec.shape) n *= dim;
    out.resize(size_t(n));
    uint64_t stream = splitmix64(seed ^ hash_name(spec.name));
    if (options.separated_routing && spec.name.ends_with("mlp.gate.bias")) {
      for (int64_t e = 0; e < n; ++e) out[size_t(e)] = 2.0f - 2.0f * float(e);
      return;
    }
    bool is_global_scale = spec.name.find("global_scale") != std::string::npos;
    if (is_global_scale) {
      // Dense: a plain multiplier; MoE: route_scale x global_scale ~ 1 total routing weight.
      out[0] = spec.name.find("gate.global_scale") != std::string::npos ? 1.0f / tc.route_scale : 0.5f;
      return;
    }
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < n; ++j) {
      float noise = unit_noise(stream, uint64_t(j));
      out[size_t(j)] = scale < 0 ? 1.0f + (-scale) * noise : scale * noise;
    }
    if (options.confident_head && spec.name == "model.llm.unembed.weight") {
      // Row successor(t) += scale * embedding(t) (the embedding's own noise, unit scale): the
      // final hidden state keeps a share c of its token's normalized embedding through the
      // residual, which adds about 3 * c * sqrt(h) to that row's logit (tens; the rest's std
      // stays near 3 * sqrt(2)).
      const uint64_t embed_stream = splitmix64(seed ^ hash_name("model.llm.embed.weight"));
      if (spec.shape[0] < kSynthChainTokens)
        throw Error("confident head: the vocabulary has " + std::to_string(spec.shape[0]) + " rows, fewer than " +
                    std::to_string(kSynthChainTokens) + " regular tokens");
#pragma omp parallel for schedule(static)
      for (int64_t token = 0; token < kSynthChainTokens; ++token) {
        float* row = out.data() + size_t(synth_successor(token) * h);
        for (int64_t c = 0; c < h; ++c) row[c] += scale * unit_noise(embed_stream, uint64_t(token * h + c));
      }
    }
  };
  WriteOptions write_options;
  write_options.progress = options.progress;
  write_options.max_shard_bytes = options.preset == SynthPreset::Tiny ? (16ull << 20) : (2ull << 30);
  write_layout_tensors(dir, source, format, first_moe_layer, write_options);

  // ---- config files ----
  ojson config = ojson::object();
  config["architectures"] = {"InklingForConditionalGeneration"};
  config["model_type"] = "inkling_mm_model";
  config["eos_token_id"] = 200006;
  config["pad_token_id"] = 199999;
  config["image_token_id"] = 200054;
  config["audio_token_id"] = 200053;
  config["vocab_size"] = 201024;
  config["tie_word_embeddings"] = false;
  config["torch_dtype"] = f32 ? "float32" : "bfloat16";
  config["text_config"] = text;
  config["vision_config"] = {{"model_type", "inkling_vision"}, {"hidden_size", 32}};
  config["audio_config"] = {{"model_type", "inkling_audio"}, {"hidden_size", 16}};
  config["mtp_config"] = {{"num_layers", 1}};
  if (format.layout == TargetLayout::MlxAffine) {
    ojson quant = {{"group_size", format.group_size}, {"bits", format.bits}, {"mode", "affine"}, {"recipe", "experts_only"}};
    config["quantization"] = quant;
    config["quantization_config"] = quant;
  }
  if (format.layout == TargetLayout::NvFp4) {
    ojson exclude = ojson::array({"lm_head", "model.llm.embed", "model.visual*", "model.audio*", "model.mtp*"});
    for (int i = 0; i < tc.num_layers; ++i) {
      std::string p = "model.llm.layers." + std::to_string(i);
      exclude.push_back(p + ".attn*");
      exclude.push_back(p + ".mlp.gate");
      exclude.push_back(p + ".mlp.shared_experts*");
      if (tc.layers[size_t(i)].dense_mlp || i == first_moe_layer) exclude.push_back(p + ".mlp*");
    }
    ojson hf_quant = {{"producer", {{"name", "modelopt"}, {"version", "0.29.0"}}},
                      {"quantization", {{"quant_algo", "NVFP4"}, {"kv_cache_quant_algo", nullptr},
                                        {"group_size", 16}, {"exclude_modules", exclude}}}};
    write_text(dir / "hf_quant_config.json", hf_quant.dump(4) + "\n");
    config["quantization_config"] = {{"quant_method", "modelopt"}, {"quant_algo", "NVFP4"},
                                     {"group_size", 16}, {"ignore", exclude}};
  }
  write_text(dir / "config.json", config.dump(2) + "\n");
  ojson generation = {{"bos_token_id", nullptr}, {"eos_token_id", 200006}, {"pad_token_id", 199999},
                      {"do_sample", true}, {"temperature", 1.0}, {"top_p", 1.0}};
  write_text(dir / "generation_config.json", generation.dump(2) + "\n");
  write_tokenizer_files(dir);
}

}  // namespace inkling
