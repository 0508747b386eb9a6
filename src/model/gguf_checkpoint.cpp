// GGUF Inkling models: config from metadata, tensors bound by name (see gguf_checkpoint.h).
#include "model/gguf_checkpoint.h"

#include <set>

#include "model/weights.h"
#include "tensor/error.h"

namespace inkling {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kMaxLayers = 4096;  // as config.json's limit: tables are sized from it
constexpr int64_t kMaxExperts = 1 << 16;
constexpr int64_t kMaxWidth = int64_t(1) << 24;

std::string in_quotes(std::string_view text) { return "\"" + std::string(text) + "\""; }

// Reads the `inkling.*` keys of one file, each checked for range as it is read.
class MetadataReader {
 public:
  explicit MetadataReader(const GgufFile& file) : file_(file) {}

  static std::string key(std::string_view name) { return "inkling." + std::string(name); }
  bool has(std::string_view name) const { return file_.find(key(name)) != nullptr; }

  int64_t integer(std::string_view name, int64_t lo, int64_t hi) const {
    const std::string full = key(name);
    const int64_t value = file_.signed_integer(full);
    check_range(full, value, lo, hi);
    return value;
  }
  int64_t integer_or(std::string_view name, int64_t fallback, int64_t lo, int64_t hi) const {
    return has(name) ? integer(name, lo, hi) : fallback;
  }
  double number(std::string_view name) const { return file_.number(key(name)); }
  double number_or(std::string_view name, double fallback) const { return has(name) ? number(name) : fallback; }
  // A per-layer key given as one integer for every layer or as an array of `layers` integers
  // (llama.cpp reads both spellings).
  std::vector<int64_t> per_layer(std::string_view name, int64_t layers, int64_t lo, int64_t hi) const {
    const std::string full = key(name);
    const GgufValue* value = file_.find(full);
    if (!value) file_.fail_key(full, "is missing");
    std::vector<int64_t> out;
    if (value->type == GgufValueType::Array) {
      out = file_.integer_array(full);
      if (int64_t(out.size()) != layers)
        file_.fail_key(full, "lists " + std::to_string(out.size()) + " layers, but block_count is " + std::to_string(layers));
    } else {
      out.assign(size_t(layers), file_.signed_integer(full));
    }
    for (int64_t entry : out) check_range(full, entry, lo, hi);
    return out;
  }
  [[noreturn]] void fail(std::string_view name, const std::string& what) const { file_.fail_key(key(name), what); }

 private:
  void check_range(const std::string& full, int64_t value, int64_t lo, int64_t hi) const {
    if (value < lo || value > hi)
      file_.fail_key(full, "is " + std::to_string(value) + ", outside " + std::to_string(lo) + ".." + std::to_string(hi));
  }
  const GgufFile& file_;
};

}  // namespace

ModelConfig model_config_from_gguf(const GgufFile& file) {
  const std::string_view arch = file.string("general.architecture");
  if (arch != "inkling")
    file.fail_key("general.architecture", "is " + in_quotes(arch) + "; this engine runs Inkling models (\"inkling\")");
  MetadataReader meta(file);
  TextConfig c;
  c.num_layers = int(meta.integer("block_count", 1, kMaxLayers));
  c.hidden_size = int(meta.integer("embedding_length", 1, kMaxWidth));
  if (meta.has("vocab_size")) {
    c.vocab_size = int(meta.integer("vocab_size", 1, kMaxWidth));
  } else if (file.find("tokenizer.ggml.tokens")) {
    c.vocab_size = int(file.string_array("tokenizer.ggml.tokens").size());
  } else {
    meta.fail("vocab_size", "is missing (and there is no tokenizer.ggml.tokens to count)");
  }
  c.unpadded_vocab_size = int(meta.integer_or("unpadded_vocab_size", c.vocab_size, 1, c.vocab_size));
  const std::vector<int64_t> heads = meta.per_layer("attention.head_count", c.num_layers, 1, kMaxWidth);
  const std::vector<int64_t> kv_heads = meta.per_layer("attention.head_count_kv", c.num_layers, 1, kMaxWidth);
  c.head_dim = int(meta.integer("attention.key_length", 1, kMaxWidth));
  if (meta.has("attention.value_length") && meta.integer("attention.value_length", 1, kMaxWidth) != c.head_dim)
    meta.fail("attention.value_length", "differs from attention.key_length (" + std::to_string(c.head_dim) +
                                            "); Inkling's keys and values have one head size");
  c.d_rel = int(meta.integer("d_rel", 1, kMaxWidth));
  c.rel_extent = int(meta.integer("rel_extent", 1, kMaxWidth));
  c.sliding_window = int(meta.integer("attention.sliding_window", 1, kMaxWidth));
  // The engine takes a sliding layer's relative extent to be its window; the converter writes it so.
  if (meta.integer("rel_extent_swa", 1, kMaxWidth) != c.sliding_window)
    meta.fail("rel_extent_swa", "is " + std::to_string(meta.integer("rel_extent_swa", 1, kMaxWidth)) +
                                    " but attention.sliding_window is " + std::to_string(c.sliding_window) +
                                    " (Inkling's sliding layers use one for the other)");
  c.conv_kernel = int(meta.integer("shortconv_kernel", 2, 64));
  const int64_t dense_layers = meta.integer_or("dense_block_count", 0, 0, c.num_layers);
  const int64_t routed = meta.integer_or("expert_count", 0, 0, kMaxExperts);
  c.n_routed_experts = int(routed);
  c.n_shared_experts = int(meta.integer_or("expert_shared_count", 0, 0, kMaxExperts));
  c.experts_per_token = int(meta.integer_or("expert_used_count", 0, 0, kMaxExperts));
  if (dense_layers > 0) {
    const std::vector<int64_t> widths = meta.per_layer("feed_forward_length", c.num_layers, 0, kMaxWidth);
    c.dense_width = int(widths.front());
    for (int64_t i = 0; i < dense_layers; ++i)
      if (widths[size_t(i)] != c.dense_width || c.dense_width == 0)
        meta.fail("feed_forward_length", "must give every dense layer one positive width");
  }
  if (dense_layers < c.num_layers) {
    c.moe_width = int(meta.integer("expert_feed_forward_length", 1, kMaxWidth));
    if (c.n_routed_experts <= 0) meta.fail("expert_count", "must be positive: the model has MoE layers");
    if (c.experts_per_token <= 0 || c.experts_per_token > c.n_routed_experts)
      meta.fail("expert_used_count", "is " + std::to_string(c.experts_per_token) + ", outside 1..expert_count (" +
                                         std::to_string(c.n_routed_experts) + ")");
    if (meta.has("expert_gating_func") && meta.integer("expert_gating_func", 0, 1 << 20) != 2)
      meta.fail("expert_gating_func", "is " + std::to_string(meta.integer("expert_gating_func", 0, 1 << 20)) +
                                          "; Inkling routes with sigmoid gating (2)");
  }
  c.route_scale = float(meta.number_or("expert_weights_scale", 1.0));
  c.mup_width_multiplier = float(meta.number("logit_scale_denom"));
  if (!(c.mup_width_multiplier > 0)) meta.fail("logit_scale_denom", "must be positive");
  // The converter writes 0 for "no log-position temperature".
  const int64_t floor = meta.integer_or("log_scaling_n_floor", 0, 0, int64_t(1) << 40);
  if (floor > 0) c.log_scaling_n_floor = floor;
  c.log_scaling_alpha = float(meta.number_or("log_scaling_alpha", c.log_scaling_alpha));
  c.rms_norm_eps = float(meta.number("attention.layer_norm_rms_epsilon"));
  if (!(c.rms_norm_eps > 0)) meta.fail("attention.layer_norm_rms_epsilon", "must be positive");
  c.max_position = meta.integer_or("context_length", c.max_position, 1, int64_t(1) << 40);
  c.use_embed_norm = true;  // the converter refuses checkpoints without it

  const std::vector<int64_t> local = meta.per_layer("attention.sliding_window_pattern", c.num_layers, 0, 1);
  c.layers.resize(size_t(c.num_layers));
  bool seen_global = false, seen_sliding = false;
  for (int i = 0; i < c.num_layers; ++i) {
    LayerSpec& layer = c.layers[size_t(i)];
    layer.sliding = local[size_t(i)] != 0;
    layer.dense_mlp = i < dense_layers;
    layer.n_heads = int(heads[size_t(i)]);
    layer.n_kv_heads = int(kv_heads[size_t(i)]);
    layer.head_dim = c.head_dim;
    layer.rel_extent = layer.sliding ? c.sliding_window : c.rel_extent;
    if (layer.n_heads % layer.n_kv_heads != 0)
      meta.fail("attention.head_count_kv", "layer " + std::to_string(i) + " has " + std::to_string(layer.n_heads) +
                                               " heads, not a multiple of its " + std::to_string(layer.n_kv_heads) +
                                               " key/value heads");
    // TextConfig's per-kind fields, from the first layer of each kind (LayerSpec is what runs).
    bool& seen = layer.sliding ? seen_sliding : seen_global;
    if (!seen) {
      (layer.sliding ? c.swa_n_heads : c.n_heads) = layer.n_heads;
      (layer.sliding ? c.swa_n_kv_heads : c.n_kv_heads) = layer.n_kv_heads;
      (layer.sliding ? c.swa_head_dim : c.head_dim) = layer.head_dim;
      seen = true;
    }
  }
  if (!seen_global) c.n_heads = c.swa_n_heads, c.n_kv_heads = c.swa_n_kv_heads;
  if (!seen_sliding) c.swa_n_heads = c.n_heads, c.swa_n_kv_heads = c.n_kv_heads, c.swa_head_dim = c.head_dim;

  ModelConfig m;
  m.model_type = "inkling";
  m.text = std::move(c);
  m.vocab_size = m.text.vocab_size;
  if (file.find("tokenizer.ggml.eos_token_id")) {
    const uint64_t eos = file.unsigned_integer("tokenizer.ggml.eos_token_id");
    if (eos >= uint64_t(m.text.vocab_size))
      file.fail_key("tokenizer.ggml.eos_token_id", "is " + std::to_string(eos) + ", outside the vocabulary");
    m.eos_token_id = int(eos);
  }
  m.quantization.source = "gguf";
  return m;
}

fs::path checkpoint_side_dir(const fs::path& model) {
  std::error_code ec;
  if (fs::is_directory(model, ec)) return model;
  const fs::path parent = model.parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

ModelConfig load_checkpoint_config(const fs::path& model) {
  if (!GgufModelFiles::looks_like_gguf(model)) return load_model_config(model);
  // Only the first file's header is needed; the tensors stay unmapped until the checkpoint opens.
  const GgufFile first = GgufFile::open(GgufModelFiles::resolve(model));
  return model_config_from_gguf(first);
}

// ---- binding ----

class GgufBinder {
 public:
  GgufBinder(Checkpoint& checkpoint, const GgufModelFiles& files) : ckpt_(checkpoint), files_(files) {}

  void bind_all();
  const std::set<std::string>& used() const { return used_; }

 private:
  const GgufTensor& require(const std::string& name) {
    const GgufTensor* tensor = files_.find(name);
    if (!tensor) throw Error(files_.first().label() + ": missing tensor " + in_quotes(name));
    used_.insert(name);
    return *tensor;
  }
  [[noreturn]] void bad(const GgufTensor& tensor, const std::string& what) const {
    files_.file_of(tensor.name).fail_tensor(tensor.name, what);
  }
  std::string described(const GgufTensor& tensor) const {
    return shape_to_string(tensor.shape()) + " " + std::string(ggml_type_name(tensor.type));
  }
  void record(const std::string& canonical, const GgufTensor& tensor, const std::string& how, WeightFormat format) {
    ckpt_.bindings_.push_back({canonical, tensor.name, how.empty() ? std::string(ggml_type_name(tensor.type)) : how, format});
  }

  // A norm, conv or bias vector: F32, F16 or BF16, `length` values.
  VectorWeight vector(const std::string& name, const std::string& canonical, int64_t length) {
    const GgufTensor& t = require(name);
    if (t.elements() != length)
      bad(t, "is " + described(t) + " but " + std::to_string(length) + " values are expected");
    VectorWeight view;
    switch (t.type) {
      case GgmlType::F32: view.dtype = DType::F32; break;
      case GgmlType::F16: view.dtype = DType::F16; break;
      case GgmlType::BF16: view.dtype = DType::BF16; break;
      default: bad(t, "is " + std::string(ggml_type_name(t.type)) + "; a vector weight must be F32, F16 or BF16");
    }
    view.shape = t.shape();
    view.data = t.data;
    view.nbytes = size_t(t.nbytes);
    record(canonical, t, "", view.dtype == DType::F32 ? WeightFormat::F32 : WeightFormat::BF16);
    return view;
  }

  // `count` matrices [rows, cols] stacked in one tensor ([count, rows, cols]; count 0: a plain
  // [rows, cols] tensor), each a view of its rows in the file.
  std::vector<WeightMatrix> matrices(const std::string& name, const std::string& canonical, int64_t count, int64_t rows,
                                     int64_t cols) {
    const GgufTensor& t = require(name);
    std::vector<int64_t> expected;
    if (count > 0) expected.push_back(count);
    expected.push_back(rows);
    expected.push_back(cols);
    if (t.shape() != expected)
      bad(t, "is " + described(t) + ", expected " + shape_to_string(expected) + " (GGUF dims " +
                 shape_to_string({expected.rbegin(), expected.rend()}) + ")");
    const GgmlTypeInfo& info = ggml_type_info(t.type);
    if (!info.dequantizable)
      bad(t, "has type " + std::string(info.name) + ", which no Inkling weight can use (supported: the float, "
                                                    "Q and K, and IQ types)");
    WeightMatrix base;
    base.rows = rows;
    base.cols = cols;
    switch (t.type) {
      case GgmlType::F32: base.format = WeightFormat::F32; break;
      case GgmlType::F16: base.format = WeightFormat::F16; break;
      case GgmlType::BF16: base.format = WeightFormat::BF16; break;
      default:
        base.format = WeightFormat::Ggml;
        base.ggml_type = t.type;
    }
    const int64_t row_bytes = int64_t(ggml_row_bytes(t.type, cols).value());  // whole blocks: checked by the reader
    // Copied interleaved with a partner (a gate with its up), the rows alternate with the
    // partner's in the copy, each matrix's at twice the row length.
    const uint8_t* start = t.data;
    base.row_stride = row_bytes;
    std::string how;
    if (auto copy = files_.interleaved_rows(name); copy && int64_t(copy->row_bytes) == row_bytes) {
      start = copy->data + (copy->odd ? row_bytes : 0);
      base.row_stride = 2 * row_bytes;
      how = std::string(ggml_type_name(t.type)) + ", rows interleaved in memory with " + copy->partner;
    }
    std::vector<WeightMatrix> out(size_t(count > 0 ? count : 1), base);
    for (size_t e = 0; e < out.size(); ++e) out[e].data = start + int64_t(e) * rows * base.row_stride;
    record(canonical, t, how, base.format);
    return out;
  }
  WeightMatrix matrix(const std::string& name, const std::string& canonical, int64_t rows, int64_t cols) {
    return matrices(name, canonical, 0, rows, cols)[0];
  }
  float scalar(const std::string& name, const std::string& canonical) {
    return vector(name, canonical, 1).at_f32(0);
  }
  std::vector<GatedExpert> gated_stack(const std::string& prefix, const std::string& suffix, const std::string& canonical,
                                       int64_t count, int64_t width, int64_t hidden) {
    auto gate = matrices(prefix + "ffn_gate_" + suffix + ".weight", canonical + "gate_proj.weight", count, width, hidden);
    auto up = matrices(prefix + "ffn_up_" + suffix + ".weight", canonical + "up_proj.weight", count, width, hidden);
    auto down = matrices(prefix + "ffn_down_" + suffix + ".weight", canonical + "down_proj.weight", count, hidden, width);
    std::vector<GatedExpert> experts(static_cast<size_t>(count));
    for (size_t e = 0; e < experts.size(); ++e) experts[e] = {gate[e], up[e], down[e]};
    return experts;
  }

  Checkpoint& ckpt_;
  const GgufModelFiles& files_;
  std::set<std::string> used_;
};

void GgufBinder::bind_all() {
  const TextConfig& c = ckpt_.config_.text;
  ModelWeights& w = ckpt_.weights_;
  const int64_t h = c.hidden_size;
  w.embed = matrix("token_embd.weight", "model.embed_tokens.weight", c.vocab_size, h);
  w.lm_head = matrix("output.weight", "lm_head.weight", c.vocab_size, h);
  w.embed_norm = vector("token_embd_norm.weight", "model.embed_norm.weight", h);
  w.norm = vector("output_norm.weight", "model.norm.weight", h);
  w.layers.resize(size_t(c.num_layers));
  for (int i = 0; i < c.num_layers; ++i) {
    LayerWeights& layer = w.layers[size_t(i)];
    layer.spec = c.layers[size_t(i)];
    const LayerSpec& s = layer.spec;
    const std::string g = "blk." + std::to_string(i) + ".";
    const std::string p = "model.layers." + std::to_string(i) + ".";
    layer.attn_norm = vector(g + "attn_norm.weight", p + "input_layernorm.weight", h);
    layer.mlp_norm = vector(g + "ffn_norm.weight", p + "post_attention_layernorm.weight", h);
    layer.attn_conv = vector(g + "shortconv_attn.weight", p + "attn_sconv.conv.weight", h * c.conv_kernel);
    layer.mlp_conv = vector(g + "shortconv_mlp.weight", p + "mlp_sconv.conv.weight", h * c.conv_kernel);
    AttentionWeights& a = layer.attn;
    const int64_t q_dim = int64_t(s.n_heads) * s.head_dim, kv_dim = int64_t(s.n_kv_heads) * s.head_dim;
    a.q = matrix(g + "attn_q.weight", p + "self_attn.q_proj.weight", q_dim, h);
    a.k = matrix(g + "attn_k.weight", p + "self_attn.k_proj.weight", kv_dim, h);
    a.v = matrix(g + "attn_v.weight", p + "self_attn.v_proj.weight", kv_dim, h);
    a.r = matrix(g + "attn_r.weight", p + "self_attn.r_proj.weight", int64_t(s.n_heads) * c.d_rel, h);
    a.o = matrix(g + "attn_output.weight", p + "self_attn.o_proj.weight", h, q_dim);
    a.q_norm = vector(g + "attn_q_norm.weight", p + "self_attn.q_norm.weight", s.head_dim);
    a.k_norm = vector(g + "attn_k_norm.weight", p + "self_attn.k_norm.weight", s.head_dim);
    a.k_conv = vector(g + "shortconv_k.weight", p + "self_attn.k_sconv.conv.weight", kv_dim * c.conv_kernel);
    a.v_conv = vector(g + "shortconv_v.weight", p + "self_attn.v_sconv.conv.weight", kv_dim * c.conv_kernel);
    {
      const GgufTensor& rel = require(g + "attn_rel_proj.weight");
      const std::vector<int64_t> expected = {c.d_rel, s.rel_extent};
      if (rel.shape() != expected)
        bad(rel, "is " + described(rel) + ", expected " + shape_to_string(expected) +
                     (s.sliding ? " (d_rel, the window on a sliding layer)" : " (d_rel, rel_extent on a global layer)"));
      a.rel_proj = vector(g + "attn_rel_proj.weight", p + "self_attn.rel_proj", int64_t(c.d_rel) * s.rel_extent);
    }
    MlpWeights& m = layer.mlp;
    m.dense = s.dense_mlp;
    m.global_scale = scalar(g + "ffn_gscale.weight", p + "mlp.global_scale");
    if (m.dense) {
      m.dense_mlp = {matrix(g + "ffn_gate.weight", p + "mlp.gate_proj.weight", c.dense_width, h),
                     matrix(g + "ffn_up.weight", p + "mlp.up_proj.weight", c.dense_width, h),
                     matrix(g + "ffn_down.weight", p + "mlp.down_proj.weight", h, c.dense_width)};
      continue;
    }
    const int64_t routed = c.n_routed_experts, shared = c.n_shared_experts;
    m.router = matrix(g + "ffn_gate_inp.weight", p + "mlp.gate_weight", routed + shared, h);
    const VectorWeight bias = vector(g + "exp_probs_b.bias", p + "mlp.e_score_correction_bias", routed);
    m.correction_bias.resize(size_t(routed));
    for (int64_t e = 0; e < routed; ++e) m.correction_bias[size_t(e)] = bias.at_f32(size_t(e));
    m.experts = gated_stack(g, "exps", p + "mlp.switch_mlp.", routed, c.moe_width, h);
    if (shared > 0) m.shared = gated_stack(g, "shexp", p + "mlp.shared_experts.", shared, c.moe_width, h);
  }
}

namespace {

// Every gate / up pair the model binds (dense, routed and shared experts) whose two tensors have
// one type and shape, to be copied with their rows interleaved: swiglu then reads each pair as
// one w13 matrix, one stream instead of two. One decode step's front half of 8 experts (bench_kernels
// ggml_swiglu_experts/, 2 threads, 6 alternated runs, medians): Q4_K 25.4 -> 27.6 GiB/s, IQ4_XS
// 24.0 -> 25.6 GiB/s. Pairs of different types (a quantizer's mixture) stay apart.
std::vector<GgufModelFiles::RowPair> gate_up_row_pairs(const GgufModelFiles& files, const std::set<std::string>& used) {
  std::vector<GgufModelFiles::RowPair> pairs;
  static const std::string kGate = "ffn_gate";
  for (const std::string& gate : used) {
    const size_t at = gate.find(kGate);
    if (at == std::string::npos || gate.rfind("blk.", 0) != 0 || gate.find("ffn_gate_inp") != std::string::npos) continue;
    const std::string up = gate.substr(0, at) + "ffn_up" + gate.substr(at + kGate.size());
    if (!used.count(up)) continue;
    const GgufTensor *a = files.find(gate), *b = files.find(up);
    if (a && b && a->type == b->type && a->shape() == b->shape() && a->nbytes > 0) pairs.push_back({gate, up});
  }
  return pairs;
}

}  // namespace

std::unique_ptr<Checkpoint> Checkpoint::open_gguf(const fs::path& path, const CheckpointOptions& options) {
  auto ckpt = std::make_unique<Checkpoint>();
  ckpt->gguf_ = GgufModelFiles::open(path);
  ckpt->dir_ = checkpoint_side_dir(path);
  ckpt->config_ = model_config_from_gguf(ckpt->gguf_->first());
  ckpt->layout_ = CheckpointLayout::Gguf;
  GgufBinder binder(*ckpt, *ckpt->gguf_);
  binder.bind_all();
  for (const std::string& name : ckpt->gguf_->names())
    if (!binder.used().count(name)) ckpt->warnings_.push_back("unrecognised tensor ignored: " + name);
  if (options.memory == WeightMemory::HugePages) {
    // Bound once in the mappings first, so a bad file fails before gigabytes are copied; then the
    // tensors the text model uses are copied and bound again from the copies. The embedding is
    // gathered a row per token, never streamed: it stays in the mapping.
    std::vector<std::string> used;
    for (const std::string& name : binder.used())
      if (name != "token_embd.weight") used.push_back(name);
    ckpt->gguf_->make_resident(used, gate_up_row_pairs(*ckpt->gguf_, binder.used()), options.progress);
    ckpt->weights_ = {};
    ckpt->bindings_.clear();
    GgufBinder resident_binder(*ckpt, *ckpt->gguf_);
    resident_binder.bind_all();
  }
  return ckpt;
}

}  // namespace inkling
