#include "model/weights.h"

#include <algorithm>
#include <cmath>

#include "tensor/error.h"

namespace inkling {

const char* layout_name(CheckpointLayout layout) {
  switch (layout) {
    case CheckpointLayout::OriginalF32: return "original-f32";
    case CheckpointLayout::OriginalBF16: return "original-bf16";
    case CheckpointLayout::NvFp4: return "nvfp4";
    case CheckpointLayout::MlxAffine: return "mlx-affine";
    case CheckpointLayout::Gguf: return "gguf";
  }
  return "?";
}

std::string layout_label(CheckpointLayout layout, const QuantizationConfig& quantization) {
  if (layout == CheckpointLayout::MlxAffine) return "mlx-" + std::to_string(quantization.bits) + "bit";
  return layout_name(layout);
}

namespace {

// True when every byte is a non-negative finite E4M3 value (sign clear, not the NaN 0x7F).
// ModelOpt's block scales always are (amax / 6 / global scale); the kernels then skip checking
// each row (NVFP4 decode cache-resident +5-7% in --fast, +3-4% exact). Only scales copied into
// memory are scanned: through the mapping (--mmap) the scan would read a ninth of the NVFP4 bytes
// from disk before the first token, where the kernels check rows as they stream them anyway.
bool e4m3_all_nonnegative_finite(const uint8_t* bytes, size_t n) {
  uint8_t largest = 0;
  for (size_t i = 0; i < n; ++i) largest = std::max(largest, bytes[i]);
  return largest <= 0x7e;
}

// Gate and up projections stored as separate tensors (MLX: gate_proj / up_proj, each with its
// .scales and .biases), to be copied with their rows interleaved: the decode kernels then read a
// gate / up pair as one w13 matrix, three streams (codes, scales, biases) instead of six. Two threads, the 4-bit experts of the bench model, fast host phase: 69% of the
// bandwidth probe apart, 81% interleaved. Only pairs whose every part (codes, scales, biases)
// has one dtype and shape on both sides, each bound whole; anything else stays as it is.
std::vector<TensorStore::RowPair> gate_up_row_pairs(const SanitizeResult& names, const TensorStore& store) {
  static const std::string kGate = "gate_proj.weight";
  std::vector<TensorStore::RowPair> pairs;
  for (const auto& [canonical, entry] : names.tensors) {
    if (canonical.size() < kGate.size() || canonical.compare(canonical.size() - kGate.size(), kGate.size(), kGate) != 0)
      continue;
    const std::string prefix = canonical.substr(0, canonical.size() - kGate.size());
    std::vector<TensorStore::RowPair> parts;
    bool ok = true;
    for (const char* suffix : {".weight", ".scales", ".biases"}) {
      auto gate = names.tensors.find(prefix + "gate_proj" + suffix), up = names.tensors.find(prefix + "up_proj" + suffix);
      const bool has_gate = gate != names.tensors.end(), has_up = up != names.tensors.end();
      if (!has_gate && !has_up) continue;
      if (has_gate != has_up || gate->second.rows != RowSelect::All || up->second.rows != RowSelect::All) {
        ok = false;
        break;
      }
      const TensorView a = store.get(gate->second.source), b = store.get(up->second.source);
      if (a.dtype != b.dtype || a.shape != b.shape || a.shape.empty() || a.nbytes == 0) {
        ok = false;
        break;
      }
      parts.push_back({gate->second.source, up->second.source});
    }
    if (ok) pairs.insert(pairs.end(), parts.begin(), parts.end());
  }
  return pairs;
}

}  // namespace

class WeightBinder {
 public:
  WeightBinder(Checkpoint& checkpoint, const SanitizeResult& names)
      : ckpt_(checkpoint), names_(names), store_(checkpoint.store_) {}

  void bind_all();

 private:
  struct Source {
    std::string canonical;
    const SanitizedEntry* entry = nullptr;
    TensorView view;
  };

  std::optional<Source> find(const std::string& canonical) {
    auto it = names_.tensors.find(canonical);
    if (it == names_.tensors.end()) return std::nullopt;
    return Source{canonical, &it->second, store_.get(it->second.source)};
  }
  Source require(const std::string& canonical) {
    if (auto found = find(canonical)) return *found;
    throw Error(ckpt_.dir_.string() + ": missing tensor " + canonical + " (" + original_hint(canonical) + ")");
  }
  // The release spelling of a canonical name, for error messages.
  static std::string original_hint(const std::string& canonical) {
    static const std::vector<std::pair<std::string, std::string>> kSpellings = {
        {"model.embed_tokens.weight", "model.llm.embed.weight"}, {"lm_head.weight", "model.llm.unembed.weight"},
        {"model.embed_norm.weight", "model.llm.embed_norm.weight"}, {"model.norm.weight", "model.llm.norm.weight"},
        {"model.layers.", "model.llm.layers."}, {"self_attn.q_proj", "attn.wq_du"}, {"self_attn.k_proj", "attn.wk_dv"},
        {"self_attn.v_proj", "attn.wv_dv"}, {"self_attn.r_proj", "attn.wr_du"}, {"self_attn.o_proj", "attn.wo_ud"},
        {"self_attn.rel_proj", "attn.rel_logits_proj.proj"}, {"self_attn.k_sconv.conv", "attn.k_sconv"},
        {"self_attn.v_sconv.conv", "attn.v_sconv"}, {"self_attn.", "attn."}, {"input_layernorm", "attn_norm"},
        {"post_attention_layernorm", "mlp_norm"}, {"_sconv.conv.", "_sconv."}, {"mlp.gate_weight", "mlp.gate.weight"},
        {"mlp.e_score_correction_bias", "mlp.gate.bias"}, {"mlp.switch_mlp.gate_proj", "mlp.experts.w13_weight (even rows)"},
        {"mlp.switch_mlp.up_proj", "mlp.experts.w13_weight (odd rows)"}, {"mlp.switch_mlp.down_proj", "mlp.experts.w2_weight"},
        {"mlp.shared_experts.gate_proj", "mlp.shared_experts.shared_w13_weight (even rows)"},
        {"mlp.shared_experts.up_proj", "mlp.shared_experts.shared_w13_weight (odd rows)"},
        {"mlp.shared_experts.down_proj", "mlp.shared_experts.shared_w2_weight"},
        {"mlp.gate_proj", "mlp.w13_dn (even rows)"}, {"mlp.up_proj", "mlp.w13_dn (odd rows)"}, {"mlp.down_proj", "mlp.w2_md"},
    };
    std::string name = canonical;
    for (const auto& [from, to] : kSpellings)
      if (size_t at = name.find(from); at != std::string::npos) name.replace(at, from.size(), to);
    return name == canonical ? "canonical name" : "in the original layout: " + name;
  }
  [[noreturn]] void bad(const Source& src, const std::string& what) {
    throw Error(ckpt_.dir_.string() + ": tensor " + src.entry->source + " (bound as " + src.canonical +
                ") " + what);
  }
  void record(const Source& src, const std::string& how, WeightFormat format) {
    std::string detail = how;
    if (src.entry->rows == RowSelect::Even) detail += detail.empty() ? "even rows" : ", even rows";
    if (src.entry->rows == RowSelect::Odd) detail += detail.empty() ? "odd rows" : ", odd rows";
    if (detail.empty()) detail = "as stored";
    ckpt_.bindings_.push_back({src.canonical, src.entry->source, detail, format});
  }

  VectorWeight vector(const std::string& canonical, int64_t length) {
    Source src = require(canonical);
    if (src.view.numel() != length)
      bad(src, "has shape " + shape_to_string(src.view.shape) + " but " + std::to_string(length) +
                   " values are expected");
    if (src.view.dtype != DType::F32 && src.view.dtype != DType::BF16 && src.view.dtype != DType::F16)
      bad(src, "has dtype " + std::string(dtype_name(src.view.dtype)) + " (expected F32, BF16 or F16)");
    record(src, "", src.view.dtype == DType::F32 ? WeightFormat::F32 : WeightFormat::BF16);
    return src.view;
  }
  // Conv taps: [C, 1, K] (torch) or [C, K, 1] (MLX) are the same bytes.
  VectorWeight conv(const std::string& canonical, int64_t channels) {
    Source src = require(canonical);
    int64_t k = ckpt_.config_.text.conv_kernel;
    const auto& shape = src.view.shape;
    bool ok = shape.size() == 3 && shape[0] == channels &&
              ((shape[1] == 1 && shape[2] == k) || (shape[1] == k && shape[2] == 1));
    if (!ok)
      bad(src, "has shape " + shape_to_string(shape) + ", expected [" + std::to_string(channels) +
                   ", 1, " + std::to_string(k) + "] or [" + std::to_string(channels) + ", " +
                   std::to_string(k) + ", 1]");
    return vector(canonical, channels * k);
  }
  float scalar(const std::string& canonical) {
    VectorWeight view = vector(canonical, 1);
    return view.at_f32(0);
  }

  // Binds `prefix`.weight (+ .scales/.biases or NVFP4 sidecars) as `count` matrices [rows, cols]
  // (count == 0: an unstacked 2-D tensor).
  // The router is the one matrix whose canonical name ("mlp.gate_weight") has no ".weight".
  std::vector<WeightMatrix> matrices(const std::string& prefix, int64_t count, int64_t rows, int64_t cols,
                                     const std::string& weight_suffix = ".weight");
  // Where the rows of a bound tensor are: row k at start + k * stride. The tensor's own bytes,
  // or, when make_resident interleaved it with a partner (a gate with its up), its rows in that copy.
  struct RowLayout {
    const uint8_t* start = nullptr;
    int64_t stride = 0;
  };
  RowLayout row_layout(const Source& src, const uint8_t* data, int64_t row_bytes) const {
    auto copy = store_.interleaved_rows(src.entry->source);
    if (!copy || int64_t(copy->row_bytes) != row_bytes) return {data, row_bytes};
    return {copy->data + (copy->odd ? row_bytes : 0), 2 * row_bytes};
  }
  WeightMatrix matrix(const std::string& prefix, int64_t rows, int64_t cols, const std::string& weight_suffix = ".weight") {
    return matrices(prefix, 0, rows, cols, weight_suffix)[0];
  }
  GatedExpert gated(const std::string& prefix, int64_t width, int64_t hidden) {
    return {matrix(prefix + "gate_proj", width, hidden), matrix(prefix + "up_proj", width, hidden),
            matrix(prefix + "down_proj", hidden, width)};
  }
  std::vector<GatedExpert> gated_stack(const std::string& prefix, int64_t count, int64_t width, int64_t hidden) {
    auto gate = matrices(prefix + "gate_proj", count, width, hidden);
    auto up = matrices(prefix + "up_proj", count, width, hidden);
    auto down = matrices(prefix + "down_proj", count, hidden, width);
    std::vector<GatedExpert> experts(static_cast<size_t>(count));
    for (size_t e = 0; e < experts.size(); ++e) experts[e] = {gate[e], up[e], down[e]};
    return experts;
  }

  Checkpoint& ckpt_;
  const SanitizeResult& names_;
  const TensorStore& store_;
};

std::vector<WeightMatrix> WeightBinder::matrices(const std::string& prefix, int64_t count, int64_t rows,
                                                 int64_t cols, const std::string& weight_suffix) {
  Source src = require(prefix + weight_suffix);
  const TensorView& w = src.view;
  bool stacked = count > 0;
  int64_t n = stacked ? count : 1;
  int64_t stored_rows = src.entry->rows == RowSelect::All ? rows : 2 * rows;
  size_t rank = stacked ? 3 : 2;
  auto shape_error = [&](const std::string& expected) {
    bad(src, "has shape " + shape_to_string(w.shape) + " " + std::string(dtype_name(w.dtype)) +
                 ", expected " + expected);
  };
  auto expect_dims = [&](const std::vector<int64_t>& shape, int64_t last) {
    std::vector<int64_t> expected;
    if (stacked) expected.push_back(count);
    expected.push_back(stored_rows);
    expected.push_back(last);
    return shape == expected;
  };
  auto dims_text = [&](const std::string& last) {
    return std::string("[") + (stacked ? std::to_string(count) + ", " : "") + std::to_string(stored_rows) +
           ", " + last + "]";
  };

  WeightMatrix base;
  base.rows = rows;
  base.cols = cols;
  int64_t stored_row_bytes = 0;       // bytes per stored row of .weight
  int64_t scale_row_bytes = 0;        // bytes per stored row of .scales / .biases
  const uint8_t* scales = nullptr;
  const uint8_t* biases = nullptr;
  std::optional<Source> scale_src, bias_src;
  std::vector<float> global_scales(size_t(n), 1.0f);
  std::string how;

  switch (w.dtype) {
    case DType::F32:
    case DType::BF16:
    case DType::F16: {
      if (w.shape.size() != rank || !expect_dims(w.shape, cols)) shape_error(dims_text(std::to_string(cols)));
      base.format = w.dtype == DType::F32 ? WeightFormat::F32 : w.dtype == DType::BF16 ? WeightFormat::BF16 : WeightFormat::F16;
      stored_row_bytes = cols * int64_t(dtype_size(w.dtype));
      break;
    }
    case DType::U32: {  // MLX affine: codes packed in uint32, bits inferred from the shapes
      scale_src = require(prefix + ".scales");
      bias_src = require(prefix + ".biases");
      if (w.shape.size() != rank) shape_error(dims_text("cols * bits / 32"));
      int64_t packed = w.shape.back();
      if (packed <= 0 || (packed * 32) % cols != 0) shape_error(dims_text("cols * bits / 32"));
      int bits = int(packed * 32 / cols);
      if (bits != 4 && bits != 8) bad(src, "packs " + std::to_string(bits) + "-bit codes (supported: 4, 8)");
      if (!expect_dims(w.shape, packed)) shape_error(dims_text(std::to_string(cols * bits / 32)));
      const TensorView& s = scale_src->view;
      if (s.shape.size() != rank || s.shape.back() <= 0 || cols % s.shape.back() != 0)
        bad(*scale_src, "has shape " + shape_to_string(s.shape) + ", which gives no whole quantization group");
      int group = int(cols / s.shape.back());
      if (group != 32 && group != 64 && group != 128)
        bad(*scale_src, "implies group size " + std::to_string(group) + " (supported: 32, 64, 128)");
      if (!expect_dims(s.shape, s.shape.back()))
        bad(*scale_src, "has shape " + shape_to_string(s.shape) + ", expected " + dims_text(std::to_string(cols / group)));
      if (bias_src->view.shape != s.shape || bias_src->view.dtype != s.dtype)
        bad(*bias_src, "must match its .scales in shape and dtype");
      if (s.dtype != DType::BF16 && s.dtype != DType::F16 && s.dtype != DType::F32)
        bad(*scale_src, "has dtype " + std::string(dtype_name(s.dtype)) + " (expected BF16, F16 or F32)");
      base.format = WeightFormat::Affine;
      base.bits = bits;
      base.group_size = group;
      base.scale_dtype = s.dtype;
      stored_row_bytes = packed * 4;
      scale_row_bytes = (cols / group) * int64_t(dtype_size(s.dtype));
      scales = s.data;
      biases = bias_src->view.data;
      how = std::to_string(bits) + "-bit g" + std::to_string(group);
      record(*scale_src, "", base.format);
      record(*bias_src, "", base.format);
      break;
    }
    case DType::U8: {  // NVFP4: two E2M1 codes per byte, E4M3 scale per 16, f32 scale2 per expert
      if (w.shape.size() != rank || !expect_dims(w.shape, cols / 2) || cols % 16 != 0)
        shape_error(dims_text(std::to_string(cols / 2)) + " (packed fp4)");
      scale_src = require(prefix + ".scales");
      const TensorView& s = scale_src->view;
      if (s.dtype != DType::F8_E4M3 && s.dtype != DType::U8)
        bad(*scale_src, "has dtype " + std::string(dtype_name(s.dtype)) + " (expected F8_E4M3)");
      if (s.shape.size() != rank || !expect_dims(s.shape, cols / 16))
        bad(*scale_src, "has shape " + shape_to_string(s.shape) + ", expected " + dims_text(std::to_string(cols / 16)));
      base.format = WeightFormat::NvFp4;
      base.bits = 4;
      base.group_size = 16;
      base.scale_dtype = DType::F8_E4M3;
      stored_row_bytes = cols / 2;
      scale_row_bytes = cols / 16;
      scales = s.data;
      base.scales_nonnegative_finite =
          store_.is_resident(scale_src->entry->source) && e4m3_all_nonnegative_finite(s.data, s.nbytes);
      record(*scale_src, "", base.format);
      if (auto scale2 = find(prefix + ".scale2")) {
        if (scale2->view.numel() != n)
          bad(*scale2, "has " + std::to_string(scale2->view.numel()) + " values, expected " + std::to_string(n));
        for (int64_t e = 0; e < n; ++e) global_scales[size_t(e)] = scale2->view.at_f32(size_t(e));
        record(*scale2, "folded into the dequantization", base.format);
      } else {
        bad(src, "is NVFP4 but has no .scale2 per-expert scale");
      }
      how = "nvfp4";
      break;
    }
    default:
      bad(src, "has dtype " + std::string(dtype_name(w.dtype)) + ", which no Inkling layout uses for a weight");
  }
  int64_t row_offset = src.entry->rows == RowSelect::Odd ? 1 : 0;
  int64_t row_step = src.entry->rows == RowSelect::All ? 1 : 2;
  const RowLayout code_rows = row_layout(src, w.data, stored_row_bytes);
  const RowLayout scale_rows = scales ? row_layout(*scale_src, scales, scale_row_bytes) : RowLayout{};
  const RowLayout bias_rows = biases ? row_layout(*bias_src, biases, scale_row_bytes) : RowLayout{};
  std::vector<WeightMatrix> out(size_t(n), base);
  for (int64_t e = 0; e < n; ++e) {
    WeightMatrix& m = out[size_t(e)];
    const int64_t first_row = e * stored_rows + row_offset;
    m.row_stride = code_rows.stride * row_step;
    m.data = code_rows.start + first_row * code_rows.stride;
    if (scales) {
      m.scales = scale_rows.start + first_row * scale_rows.stride;
      m.scales_row_stride = scale_rows.stride * row_step;
    }
    if (biases) {
      m.biases = bias_rows.start + first_row * bias_rows.stride;
      m.biases_row_stride = bias_rows.stride * row_step;
    }
    m.global_scale = global_scales[size_t(e)];
  }
  if (auto copy = store_.interleaved_rows(src.entry->source))
    how += std::string(how.empty() ? "" : ", ") + "rows interleaved in memory with " + copy->partner;
  record(src, how, base.format);
  return out;
}

void WeightBinder::bind_all() {
  const TextConfig& c = ckpt_.config_.text;
  ModelWeights& w = ckpt_.weights_;
  int64_t h = c.hidden_size;
  w.embed = matrix("model.embed_tokens", c.vocab_size, h);
  w.lm_head = matrix("lm_head", c.vocab_size, h);
  if (c.use_embed_norm) w.embed_norm = vector("model.embed_norm.weight", h);
  w.norm = vector("model.norm.weight", h);
  w.layers.resize(size_t(c.num_layers));
  for (int i = 0; i < c.num_layers; ++i) {
    LayerWeights& layer = w.layers[size_t(i)];
    layer.spec = c.layers[size_t(i)];
    const LayerSpec& s = layer.spec;
    std::string p = "model.layers." + std::to_string(i) + ".";
    layer.attn_norm = vector(p + "input_layernorm.weight", h);
    layer.mlp_norm = vector(p + "post_attention_layernorm.weight", h);
    layer.attn_conv = conv(p + "attn_sconv.conv.weight", h);
    layer.mlp_conv = conv(p + "mlp_sconv.conv.weight", h);
    AttentionWeights& a = layer.attn;
    int64_t q_dim = int64_t(s.n_heads) * s.head_dim, kv_dim = int64_t(s.n_kv_heads) * s.head_dim;
    a.q = matrix(p + "self_attn.q_proj", q_dim, h);
    a.k = matrix(p + "self_attn.k_proj", kv_dim, h);
    a.v = matrix(p + "self_attn.v_proj", kv_dim, h);
    a.r = matrix(p + "self_attn.r_proj", int64_t(s.n_heads) * c.d_rel, h);
    a.o = matrix(p + "self_attn.o_proj", h, q_dim);
    a.q_norm = vector(p + "self_attn.q_norm.weight", s.head_dim);
    a.k_norm = vector(p + "self_attn.k_norm.weight", s.head_dim);
    a.k_conv = conv(p + "self_attn.k_sconv.conv.weight", kv_dim);
    a.v_conv = conv(p + "self_attn.v_sconv.conv.weight", kv_dim);
    {
      Source rel = require(p + "self_attn.rel_proj");
      std::vector<int64_t> expected = {c.d_rel, s.rel_extent};
      if (rel.view.shape != expected)
        bad(rel, "has shape " + shape_to_string(rel.view.shape) + ", expected " + shape_to_string(expected) +
                     (s.sliding ? " (d_rel, sliding_window_size on a sliding layer)" : " (d_rel, rel_extent on a global layer)"));
      a.rel_proj = vector(p + "self_attn.rel_proj", int64_t(c.d_rel) * s.rel_extent);
    }
    MlpWeights& m = layer.mlp;
    m.dense = s.dense_mlp;
    if (m.dense) {
      m.dense_mlp = gated(p + "mlp.", c.dense_width, h);
      m.global_scale = scalar(p + "mlp.global_scale");
    } else {
      int64_t routed = c.n_routed_experts, shared = c.n_shared_experts;
      m.router = matrix(p + "mlp.gate_weight", routed + shared, h, "");
      VectorWeight bias = vector(p + "mlp.e_score_correction_bias", routed);
      m.correction_bias.resize(size_t(routed));
      for (int64_t e = 0; e < routed; ++e) m.correction_bias[size_t(e)] = bias.at_f32(size_t(e));
      m.global_scale = scalar(p + "mlp.global_scale");
      m.experts = gated_stack(p + "mlp.switch_mlp.", routed, c.moe_width, h);
      if (shared > 0) m.shared = gated_stack(p + "mlp.shared_experts.", shared, c.moe_width, h);
    }
  }
}

std::unique_ptr<Checkpoint> Checkpoint::open(const std::filesystem::path& dir, const CheckpointOptions& options) {
  if (GgufModelFiles::looks_like_gguf(dir)) return open_gguf(dir, options);
  if (!std::filesystem::is_directory(dir)) throw Error(dir.string() + " is not a directory");
  auto ckpt = std::make_unique<Checkpoint>();
  ckpt->dir_ = dir;
  ckpt->config_ = load_model_config(dir);
  ckpt->store_ = TensorStore::open_dir(dir);
  SanitizeResult names = sanitize_names(ckpt->store_.names());
  ckpt->skipped_ = names.dropped;
  for (const std::string& key : names.unknown) ckpt->warnings_.push_back("unrecognised tensor ignored: " + key);
  if (options.memory == WeightMemory::HugePages) {
    std::vector<std::string> used;
    used.reserve(names.tensors.size());
    for (const auto& [canonical, entry] : names.tensors) {
      // The embedding is gathered a row per token, never streamed: it stays in the mapping
      // (the head is a separate tensor in every layout).
      if (canonical.rfind("model.embed_tokens.", 0) == 0) continue;
      used.push_back(entry.source);
    }
    // Tensors of a pair are copied once, interleaved, though `used` names them too.
    ckpt->store_.make_resident(used, gate_up_row_pairs(names, ckpt->store_), options.progress);
  }

  // Layout: the quantization config first, then what the tensors say.
  const QuantizationConfig& quant = ckpt->config_.quantization;
  auto embed = names.tensors.find("model.embed_tokens.weight");
  if (embed == names.tensors.end())
    throw Error(dir.string() + ": missing tensor model.llm.embed.weight (token embedding)");
  DType embed_dtype = ckpt->store_.get(embed->second.source).dtype;
  // Every token reads one embedding row through the mapping. Cold, each new row was a disk read:
  // 2.3 ms a token (12% of a decode step of the bench model) against 31 us from the page cache.
  ckpt->store_.read_ahead(embed->second.source);
  bool packed_fp4 = false, packed_affine = false;
  for (const auto& [canonical, entry] : names.tensors) {
    if (canonical.find("switch_mlp.gate_proj.weight") == std::string::npos &&
        canonical.find("mlp.gate_proj.weight") == std::string::npos)
      continue;
    DType dtype = ckpt->store_.get(entry.source).dtype;
    packed_fp4 |= dtype == DType::U8;
    packed_affine |= dtype == DType::U32;
  }
  if (quant.mode == QuantMode::NvFp4 || packed_fp4) {
    if (quant.mode != QuantMode::NvFp4)
      ckpt->warnings_.push_back("packed fp4 experts found but config.json declares no NVFP4 quantization");
    ckpt->layout_ = CheckpointLayout::NvFp4;
  } else if (quant.mode == QuantMode::Affine || packed_affine) {
    if (quant.mode != QuantMode::Affine)
      throw Error(dir.string() + ": uint32-packed weights found but config.json has no \"quantization\" entry");
    ckpt->layout_ = CheckpointLayout::MlxAffine;
  } else {
    ckpt->layout_ = embed_dtype == DType::F32 ? CheckpointLayout::OriginalF32 : CheckpointLayout::OriginalBF16;
  }
  WeightBinder binder(*ckpt, names);
  binder.bind_all();
  return ckpt;
}

}  // namespace inkling
