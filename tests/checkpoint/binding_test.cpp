// Synth round trips: every layout of the tiny preset with one seed is opened with
// Checkpoint::open, and the dequantized rows of its bound matrices are compared with the
// original-f32 checkpoint of the same seed (the generator's own values). Also: the w13
// interleave, NVFP4 per-expert scales, zero-copy views, independent decoders for the packed
// formats, determinism per seed, and the files a synth checkpoint holds.
#include <gtest/gtest.h>

#include <cstring>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <set>

#include "checkpoint_test_util.h"
#include "io/safetensors.h"
#include "model/weights.h"
#include "tensor/dtype.h"
#include "tensor/error.h"

namespace inkling {
namespace {

using namespace ckpt_test;

constexpr uint64_t kSeed = 11;

// Every bound matrix of a checkpoint, grouped by family, in a fixed order.
struct NamedMatrix {
  std::string family;
  std::string label;
  int layer = -1;
  const WeightMatrix* matrix = nullptr;
};

std::vector<NamedMatrix> all_matrices(const Checkpoint& ckpt) {
  std::vector<NamedMatrix> out;
  const ModelWeights& w = ckpt.weights();
  out.push_back({"embed", "embed", -1, &w.embed});
  out.push_back({"lm_head", "lm_head", -1, &w.lm_head});
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const LayerWeights& l = w.layers[i];
    int li = int(i);
    std::string p = "layer " + std::to_string(i) + " ";
    out.push_back({"attention", p + "q", li, &l.attn.q});
    out.push_back({"attention", p + "k", li, &l.attn.k});
    out.push_back({"attention", p + "v", li, &l.attn.v});
    out.push_back({"attention", p + "r", li, &l.attn.r});
    out.push_back({"attention", p + "o", li, &l.attn.o});
    auto gated = [&](const std::string& family, const std::string& label, const GatedExpert& e) {
      out.push_back({family, label + " gate", li, &e.gate});
      out.push_back({family, label + " up", li, &e.up});
      out.push_back({family, label + " down", li, &e.down});
    };
    if (l.mlp.dense) {
      gated("dense_mlp", p + "dense", l.mlp.dense_mlp);
    } else {
      out.push_back({"router", p + "router", li, &l.mlp.router});
      for (size_t e = 0; e < l.mlp.experts.size(); ++e)
        gated("routed_experts", p + "expert " + std::to_string(e), l.mlp.experts[e]);
      for (size_t e = 0; e < l.mlp.shared.size(); ++e)
        gated("shared_experts", p + "shared " + std::to_string(e), l.mlp.shared[e]);
    }
  }
  return out;
}

// Every small vector parameter (norms, conv taps, rel_proj).
std::vector<std::pair<std::string, const TensorView*>> all_vectors(const Checkpoint& ckpt) {
  std::vector<std::pair<std::string, const TensorView*>> out;
  const ModelWeights& w = ckpt.weights();
  out.push_back({"embed_norm", &w.embed_norm});
  out.push_back({"norm", &w.norm});
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const LayerWeights& l = w.layers[i];
    std::string p = "layer " + std::to_string(i) + " ";
    out.push_back({p + "attn_norm", &l.attn_norm});
    out.push_back({p + "mlp_norm", &l.mlp_norm});
    out.push_back({p + "attn_conv", &l.attn_conv});
    out.push_back({p + "mlp_conv", &l.mlp_conv});
    out.push_back({p + "q_norm", &l.attn.q_norm});
    out.push_back({p + "k_norm", &l.attn.k_norm});
    out.push_back({p + "k_conv", &l.attn.k_conv});
    out.push_back({p + "v_conv", &l.attn.v_conv});
    out.push_back({p + "rel_proj", &l.attn.rel_proj});
  }
  return out;
}

class RoundTrip : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!reference_) reference_ = Checkpoint::open(synth_tiny("original-f32", kSeed));
  }
  static std::unique_ptr<Checkpoint> reference_;

  // Compares a whole layout against the f32 reference; returns relative RMS error per family
  // over the matrices stored quantized, and checks BF16-stored matrices element by element.
  std::map<std::string, double> compare(const Checkpoint& ckpt, const std::string& layout) {
    std::vector<NamedMatrix> ref = all_matrices(*reference_);
    std::vector<NamedMatrix> got = all_matrices(ckpt);
    EXPECT_EQ(ref.size(), got.size());
    std::map<std::string, RelativeError> errors;
    std::map<std::string, int> bf16_mismatches;
    const float kBf16Rel = 1.0f / 256.0f;
    std::vector<float> a, b;
    for (size_t m = 0; m < std::min(ref.size(), got.size()); ++m) {
      const WeightMatrix& x = *got[m].matrix;
      const WeightMatrix& y = *ref[m].matrix;
      EXPECT_EQ(got[m].label, ref[m].label);
      EXPECT_EQ(y.format, WeightFormat::F32) << ref[m].label;
      if (x.rows != y.rows || x.cols != y.cols) {
        ADD_FAILURE() << layout << " " << got[m].label << ": [" << x.rows << ", " << x.cols << "] vs [" << y.rows
                      << ", " << y.cols << "]";
        continue;
      }
      a.resize(size_t(x.cols));
      b.resize(size_t(y.cols));
      for (int64_t r = 0; r < x.rows; ++r) {
        dequantize_row(x, r, a.data());
        dequantize_row(y, r, b.data());
        if (x.format == WeightFormat::BF16) {
          for (int64_t c = 0; c < x.cols; ++c)
            if (!(std::fabs(a[size_t(c)] - b[size_t(c)]) <= kBf16Rel * std::fabs(b[size_t(c)]))) {
              if (bf16_mismatches[got[m].label]++ == 0)
                ADD_FAILURE() << layout << " " << got[m].label << " row " << r << " col " << c << ": " << a[size_t(c)]
                              << " vs f32 " << b[size_t(c)];
            }
        } else if (x.format == WeightFormat::F32) {
          EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << layout << " " << got[m].label << " row " << r;
        } else {
          errors[got[m].family].add(a.data(), b.data(), x.cols);
        }
      }
    }
    // Vectors: bf16 rounding of the f32 values (or exact when stored f32).
    auto ref_vectors = all_vectors(*reference_);
    auto got_vectors = all_vectors(ckpt);
    EXPECT_EQ(ref_vectors.size(), got_vectors.size());
    for (size_t v = 0; v < std::min(ref_vectors.size(), got_vectors.size()); ++v) {
      const TensorView& x = *got_vectors[v].second;
      const TensorView& y = *ref_vectors[v].second;
      if (x.numel() != y.numel()) {
        ADD_FAILURE() << got_vectors[v].first << ": " << x.numel() << " vs " << y.numel() << " values";
        continue;
      }
      for (int64_t k = 0; k < x.numel(); ++k) {
        float xv = x.at_f32(size_t(k)), yv = y.at_f32(size_t(k));
        if (!(std::fabs(xv - yv) <= kBf16Rel * std::fabs(yv))) {
          ADD_FAILURE() << layout << " " << got_vectors[v].first << "[" << k << "]: " << xv << " vs " << yv;
          break;
        }
      }
    }
    // Router side vectors and scalars are stored f32 / exact.
    for (size_t i = 0; i < ckpt.weights().layers.size(); ++i) {
      const MlpWeights& x = ckpt.weights().layers[i].mlp;
      const MlpWeights& y = reference_->weights().layers[i].mlp;
      EXPECT_EQ(x.dense, y.dense);
      EXPECT_EQ(x.global_scale, y.global_scale) << layout << " layer " << i;
      EXPECT_EQ(x.correction_bias, y.correction_bias) << layout << " layer " << i;
    }
    std::map<std::string, double> out;
    for (const auto& [family, error] : errors) out[family] = error.value();
    return out;
  }

  // The expected storage format of each matrix in a layout.
  static WeightFormat expected_format(const std::string& layout, const NamedMatrix& m, int first_moe_layer) {
    if (layout == "original-f32") return WeightFormat::F32;
    bool mlp = m.family == "dense_mlp" || m.family == "routed_experts" || m.family == "shared_experts";
    if ((layout == "mlx-4bit" || layout == "mlx-8bit") && mlp) return WeightFormat::Affine;
    if (layout == "nvfp4" && m.family == "routed_experts" && m.layer != first_moe_layer) return WeightFormat::NvFp4;
    return WeightFormat::BF16;
  }
};

std::unique_ptr<Checkpoint> RoundTrip::reference_;

int first_moe_layer(const TextConfig& c) {
  for (int i = 0; i < c.num_layers; ++i)
    if (!c.layers[size_t(i)].dense_mlp) return i;
  return -1;
}

struct LayoutCase {
  std::string layout;
  CheckpointLayout expected;
  double bound;  // relative RMS error of the quantized families
};

class RoundTripLayouts : public RoundTrip, public ::testing::WithParamInterface<LayoutCase> {};

TEST_P(RoundTripLayouts, DequantizedWeightsMatchTheGenerator) {
  const LayoutCase& param = GetParam();
  std::unique_ptr<Checkpoint> ckpt = Checkpoint::open(synth_tiny(param.layout, kSeed));
  EXPECT_EQ(ckpt->layout(), param.expected) << layout_name(ckpt->layout());
  EXPECT_TRUE(ckpt->warnings().empty()) << ckpt->warnings()[0];
  int first_moe = first_moe_layer(ckpt->text());
  ASSERT_EQ(first_moe, 1);  // the tiny preset: layer 0 dense, layers 1-3 MoE
  for (const NamedMatrix& m : all_matrices(*ckpt)) {
    EXPECT_EQ(m.matrix->format, expected_format(param.layout, m, first_moe))
        << param.layout << " " << m.label << " is " << weight_format_name(m.matrix->format);
    if (m.matrix->format == WeightFormat::Affine) {
      EXPECT_EQ(m.matrix->bits, param.layout == "mlx-8bit" ? 8 : 4) << m.label;
      EXPECT_EQ(m.matrix->group_size, 64) << m.label;
    }
  }
  std::map<std::string, double> errors = compare(*ckpt, param.layout);
  bool quantized = param.layout != "original-f32" && param.layout != "original-bf16";
  EXPECT_EQ(!errors.empty(), quantized);
  for (const auto& [family, error] : errors) {
    std::printf("[ measured ] %-10s %-16s relative RMS error %.5f (bound %.3f)\n", param.layout.c_str(),
                family.c_str(), error, param.bound);
    EXPECT_LT(error, param.bound) << param.layout << " " << family;
    EXPECT_GT(error, 0.0) << param.layout << " " << family << ": quantized yet identical?";
  }
  if (param.layout == "nvfp4") {
    EXPECT_EQ(errors.count("routed_experts"), 1u);
  }
  if (param.layout == "mlx-4bit" || param.layout == "mlx-8bit") {
    for (const char* family : {"dense_mlp", "routed_experts", "shared_experts"}) {
      EXPECT_EQ(errors.count(family), 1u) << family;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Synth, RoundTripLayouts,
                         ::testing::Values(LayoutCase{"original-f32", CheckpointLayout::OriginalF32, 0.0},
                                           LayoutCase{"original-bf16", CheckpointLayout::OriginalBF16, 0.0},
                                           LayoutCase{"mlx-4bit", CheckpointLayout::MlxAffine, 0.1},
                                           LayoutCase{"mlx-8bit", CheckpointLayout::MlxAffine, 0.01},
                                           LayoutCase{"nvfp4", CheckpointLayout::NvFp4, 0.15}),
                         [](const auto& info) {
                           std::string name = info.param.layout;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// Reads row r of a raw f32 tensor [.., cols] from the store.
std::vector<float> raw_row(const TensorView& view, int64_t row) {
  int64_t cols = view.shape.back();
  std::vector<float> out(static_cast<size_t>(cols));
  for (int64_t c = 0; c < cols; ++c) out[size_t(c)] = view.at_f32(size_t(row * cols + c));
  return out;
}

std::vector<float> bound_row(const WeightMatrix& m, int64_t row) {
  std::vector<float> out(size_t(m.cols));
  dequantize_row(m, row, out.data());
  return out;
}

TEST_F(RoundTrip, W13InterleaveGateEvenUpOdd) {
  const Checkpoint& ckpt = *reference_;
  const TextConfig& c = ckpt.text();
  const ModelWeights& w = ckpt.weights();
  // Dense layer 0: gate row i == w13_dn row 2i, up row i == row 2i+1.
  TensorView w13 = ckpt.store().get("model.llm.layers.0.mlp.w13_dn.weight");
  ASSERT_EQ(w13.dtype, DType::F32);
  ASSERT_EQ(w13.shape, (std::vector<int64_t>{2 * int64_t(c.dense_width), c.hidden_size}));
  const GatedExpert& dense = w.layers[0].mlp.dense_mlp;
  ASSERT_EQ(dense.gate.rows, c.dense_width);
  for (int64_t i = 0; i < c.dense_width; ++i) {
    EXPECT_EQ(bound_row(dense.gate, i), raw_row(w13, 2 * i)) << "gate row " << i;
    EXPECT_EQ(bound_row(dense.up, i), raw_row(w13, 2 * i + 1)) << "up row " << i;
  }
  TensorView w2 = ckpt.store().get("model.llm.layers.0.mlp.w2_md.weight");
  for (int64_t j = 0; j < c.hidden_size; ++j) EXPECT_EQ(bound_row(dense.down, j), raw_row(w2, j)) << "down row " << j;
  // Zero-copy: views into the mapped tensor, up one row after gate, doubled stride.
  int64_t row_bytes = c.hidden_size * 4;
  EXPECT_EQ(dense.gate.data, w13.data);
  EXPECT_EQ(dense.up.data, w13.data + row_bytes);
  EXPECT_EQ(dense.gate.row_stride, 2 * row_bytes);
  EXPECT_EQ(dense.down.data, w2.data);

  // Routed and shared experts of layer 1: [E, 2I, H] interleaved per expert.
  TensorView ew13 = ckpt.store().get("model.llm.layers.1.mlp.experts.w13_weight");
  TensorView ew2 = ckpt.store().get("model.llm.layers.1.mlp.experts.w2_weight");
  TensorView sw13 = ckpt.store().get("model.llm.layers.1.mlp.shared_experts.shared_w13_weight");
  TensorView sw2 = ckpt.store().get("model.llm.layers.1.mlp.shared_experts.shared_w2_weight");
  const MlpWeights& moe = w.layers[1].mlp;
  ASSERT_EQ(int(moe.experts.size()), c.n_routed_experts);
  ASSERT_EQ(int(moe.shared.size()), c.n_shared_experts);
  int64_t width = c.moe_width;
  for (int e = 0; e < c.n_routed_experts; ++e)
    for (int64_t i = 0; i < width; ++i) {
      EXPECT_EQ(bound_row(moe.experts[size_t(e)].gate, i), raw_row(ew13, e * 2 * width + 2 * i)) << e << " " << i;
      EXPECT_EQ(bound_row(moe.experts[size_t(e)].up, i), raw_row(ew13, e * 2 * width + 2 * i + 1)) << e << " " << i;
    }
  for (int e = 0; e < c.n_routed_experts; ++e)
    for (int64_t j = 0; j < c.hidden_size; ++j)
      EXPECT_EQ(bound_row(moe.experts[size_t(e)].down, j), raw_row(ew2, e * c.hidden_size + j)) << e << " " << j;
  for (int s = 0; s < c.n_shared_experts; ++s) {
    for (int64_t i = 0; i < width; ++i) {
      EXPECT_EQ(bound_row(moe.shared[size_t(s)].gate, i), raw_row(sw13, s * 2 * width + 2 * i)) << s << " " << i;
      EXPECT_EQ(bound_row(moe.shared[size_t(s)].up, i), raw_row(sw13, s * 2 * width + 2 * i + 1)) << s << " " << i;
    }
    for (int64_t j = 0; j < c.hidden_size; ++j)
      EXPECT_EQ(bound_row(moe.shared[size_t(s)].down, j), raw_row(sw2, s * c.hidden_size + j)) << s << " " << j;
  }
  // The router keeps all Rn + SH rows (the last SH are the shared experts').
  TensorView gate = ckpt.store().get("model.llm.layers.1.mlp.gate.weight");
  ASSERT_EQ(moe.router.rows, c.n_routed_experts + c.n_shared_experts);
  for (int64_t r = 0; r < moe.router.rows; ++r) EXPECT_EQ(bound_row(moe.router, r), raw_row(gate, r));
}

// Own decoders, written from the format descriptions (not from the library).
float decode_e2m1(uint8_t nibble) {
  int exponent = (nibble >> 1) & 3, mantissa = nibble & 1;
  float magnitude = exponent == 0 ? 0.5f * float(mantissa) : std::ldexp(1.0f + 0.5f * float(mantissa), exponent - 1);
  return (nibble & 8) ? -magnitude : magnitude;
}

float decode_e4m3(uint8_t bits) {
  int exponent = (bits >> 3) & 15, mantissa = bits & 7;
  float magnitude = exponent == 0 ? std::ldexp(float(mantissa) / 8.0f, -6)
                                  : std::ldexp(1.0f + float(mantissa) / 8.0f, exponent - 7);
  return (bits & 0x80) ? -magnitude : magnitude;
}

TEST_F(RoundTrip, Nvfp4FirstMoeLayerBf16OthersPackedWithScale2) {
  std::unique_ptr<Checkpoint> ckpt = Checkpoint::open(synth_tiny("nvfp4", kSeed));
  const TextConfig& c = ckpt->text();
  const ModelWeights& w = ckpt->weights();
  ASSERT_EQ(c.num_layers, 4);
  ASSERT_EQ(ckpt->config().quantization.mode, QuantMode::NvFp4);
  // Layer 1 (first MoE layer) stays bf16 with unit global scales.
  for (const GatedExpert& e : w.layers[1].mlp.experts) {
    EXPECT_EQ(e.gate.format, WeightFormat::BF16);
    EXPECT_EQ(e.down.format, WeightFormat::BF16);
    EXPECT_EQ(e.gate.global_scale, 1.0f);
  }
  EXPECT_EQ(ckpt->store().get("model.llm.layers.1.mlp.experts.w13_weight").dtype, DType::BF16);
  EXPECT_FALSE(ckpt->store().contains("model.llm.layers.1.mlp.experts.w13_weight.scale2"));
  const int64_t h = c.hidden_size, width = c.moe_width;
  for (int layer : {2, 3}) {
    std::string p = "model.llm.layers." + std::to_string(layer) + ".mlp.experts.";
    TensorView w13 = ckpt->store().get(p + "w13_weight");
    TensorView s13 = ckpt->store().get(p + "w13_weight.scale");
    TensorView g13 = ckpt->store().get(p + "w13_weight.scale2");
    TensorView w2 = ckpt->store().get(p + "w2_weight");
    TensorView s2 = ckpt->store().get(p + "w2_weight.scale");
    TensorView g2 = ckpt->store().get(p + "w2_weight.scale2");
    EXPECT_EQ(w13.dtype, DType::U8);
    EXPECT_EQ(w13.shape, (std::vector<int64_t>{c.n_routed_experts, 2 * width, h / 2}));
    EXPECT_EQ(s13.dtype, DType::F8_E4M3);
    EXPECT_EQ(s13.shape, (std::vector<int64_t>{c.n_routed_experts, 2 * width, h / 16}));
    EXPECT_EQ(g13.dtype, DType::F32);
    EXPECT_EQ(g13.shape, (std::vector<int64_t>{c.n_routed_experts}));
    EXPECT_EQ(w2.shape, (std::vector<int64_t>{c.n_routed_experts, h, width / 2}));
    const MlpWeights& mlp = w.layers[size_t(layer)].mlp;
    // The f32 reference values of this layer, to check scale2 = amax / (6 * 448) per expert.
    TensorView ref13 = reference_->store().get(p + "w13_weight");
    TensorView ref2 = reference_->store().get(p + "w2_weight");
    for (int e = 0; e < c.n_routed_experts; ++e) {
      const GatedExpert& x = mlp.experts[size_t(e)];
      EXPECT_EQ(x.gate.format, WeightFormat::NvFp4);
      EXPECT_EQ(x.gate.global_scale, g13.at_f32(size_t(e))) << layer << " " << e;
      EXPECT_EQ(x.up.global_scale, g13.at_f32(size_t(e))) << layer << " " << e;
      EXPECT_EQ(x.down.global_scale, g2.at_f32(size_t(e))) << layer << " " << e;
      float amax13 = 0.0f, amax2 = 0.0f;
      for (int64_t k = 0; k < 2 * width * h; ++k) amax13 = std::max(amax13, std::fabs(ref13.at_f32(size_t(e * 2 * width * h + k))));
      for (int64_t k = 0; k < h * width; ++k) amax2 = std::max(amax2, std::fabs(ref2.at_f32(size_t(e * h * width + k))));
      EXPECT_NEAR(g13.at_f32(size_t(e)), amax13 / (6.0f * 448.0f), 1e-6f * amax13);
      EXPECT_NEAR(g2.at_f32(size_t(e)), amax2 / (6.0f * 448.0f), 1e-6f * amax2);
      // Independent decode of the packed bytes: gate row i = stored row 2i, up = 2i + 1.
      auto decode = [&](const TensorView& codes, const TensorView& scales, float scale2, int64_t stored_row,
                        int64_t cols) {
        std::vector<float> out(static_cast<size_t>(cols));
        for (int64_t col = 0; col < cols; ++col) {
          uint8_t byte = codes.data[stored_row * cols / 2 + col / 2];
          uint8_t nibble = (col & 1) ? uint8_t(byte >> 4) : uint8_t(byte & 15);
          out[size_t(col)] = decode_e2m1(nibble) * decode_e4m3(scales.data[stored_row * cols / 16 + col / 16]) * scale2;
        }
        return out;
      };
      for (int64_t i = 0; i < width; i += 7) {
        EXPECT_EQ(bound_row(x.gate, i), decode(w13, s13, g13.at_f32(size_t(e)), e * 2 * width + 2 * i, h));
        EXPECT_EQ(bound_row(x.up, i), decode(w13, s13, g13.at_f32(size_t(e)), e * 2 * width + 2 * i + 1, h));
      }
      for (int64_t j = 0; j < h; j += 5)
        EXPECT_EQ(bound_row(x.down, j), decode(w2, s2, g2.at_f32(size_t(e)), e * h + j, width));
    }
  }
  // Calibration sidecars are skipped, not bound.
  std::set<std::string> skipped(ckpt->skipped().begin(), ckpt->skipped().end());
  EXPECT_TRUE(skipped.count("model.llm.layers.2.mlp.experts.w13_weight.input_amax"));
}

TEST_F(RoundTrip, MlxAffineIndependentDecode) {
  for (const char* layout : {"mlx-4bit", "mlx-8bit"}) {
    std::unique_ptr<Checkpoint> ckpt = Checkpoint::open(synth_tiny(layout, kSeed));
    const TextConfig& c = ckpt->text();
    int bits = std::string(layout) == "mlx-8bit" ? 8 : 4;
    ASSERT_EQ(ckpt->config().quantization.mode, QuantMode::Affine);
    EXPECT_EQ(ckpt->config().quantization.bits, bits);
    EXPECT_EQ(ckpt->config().quantization.group_size, 64);
    struct Probe {
      std::string prefix;
      int expert;  // -1: unstacked
      const WeightMatrix* matrix;
    };
    const MlpWeights& dense = ckpt->weights().layers[0].mlp;
    const MlpWeights& moe = ckpt->weights().layers[2].mlp;
    std::vector<Probe> probes = {
        {"model.llm.layers.0.mlp.gate_proj", -1, &dense.dense_mlp.gate},
        {"model.llm.layers.0.mlp.up_proj", -1, &dense.dense_mlp.up},
        {"model.llm.layers.0.mlp.down_proj", -1, &dense.dense_mlp.down},
        {"model.llm.layers.2.mlp.experts.gate_proj", 5, &moe.experts[5].gate},
        {"model.llm.layers.2.mlp.experts.down_proj", 3, &moe.experts[3].down},
        {"model.llm.layers.2.mlp.shared_experts.up_proj", 1, &moe.shared[1].up},
    };
    for (const Probe& probe : probes) {
      TensorView codes = ckpt->store().get(probe.prefix + ".weight");
      TensorView scales = ckpt->store().get(probe.prefix + ".scales");
      TensorView biases = ckpt->store().get(probe.prefix + ".biases");
      ASSERT_EQ(codes.dtype, DType::U32) << probe.prefix;
      ASSERT_EQ(scales.dtype, DType::BF16) << probe.prefix;
      int64_t rows = probe.matrix->rows, cols = probe.matrix->cols;
      int64_t words = cols * bits / 32, groups = cols / 64;
      EXPECT_EQ(codes.shape.back(), words) << probe.prefix;
      EXPECT_EQ(scales.shape.back(), groups) << probe.prefix;
      const uint8_t* packed = codes.data;
      int64_t base_row = probe.expert < 0 ? 0 : probe.expert * rows;
      for (int64_t r = 0; r < rows; r += 3) {
        std::vector<float> mine(static_cast<size_t>(cols));
        int64_t row = base_row + r;
        for (int64_t col = 0; col < cols; ++col) {
          int per_word = 32 / bits;
          uint32_t word;  // tensors need not be 4-byte aligned inside a safetensors file
          std::memcpy(&word, packed + 4 * (row * words + col / per_word), sizeof(word));
          uint32_t code = (word >> ((col % per_word) * bits)) & ((1u << bits) - 1);
          float scale = scales.at_f32(size_t(row * groups + col / 64));
          float bias = biases.at_f32(size_t(row * groups + col / 64));
          mine[size_t(col)] = scale * float(code) + bias;
        }
        std::vector<float> bound = bound_row(*probe.matrix, r);
        for (int64_t col = 0; col < cols; ++col)
          ASSERT_NEAR(bound[size_t(col)], mine[size_t(col)], 1e-6f * (1.0f + std::fabs(mine[size_t(col)])))
              << layout << " " << probe.prefix << " row " << r << " col " << col;
      }
    }
    // Conv weights are written in the MLX [C, K, 1] shape.
    TensorView conv = ckpt->store().get("model.llm.layers.0.attn_sconv.weight");
    EXPECT_EQ(conv.shape, (std::vector<int64_t>{c.hidden_size, c.conv_kernel, 1}));
  }
}

// Copied into memory, MLX's separate gate and up projections (codes, scales and biases) are
// interleaved row by row, as the original layouts' w13 is: up starts one gate row after gate,
// both at twice the stored row length. Every bound matrix still dequantizes to exactly the rows
// the mapped checkpoint gives, and the bindings say which tensors were interleaved.
TEST_F(RoundTrip, MlxGateAndUpInterleavedWhenCopiedIntoMemory) {
  const std::filesystem::path dir = synth_tiny("mlx-4bit", kSeed);
  CheckpointOptions resident_options;
  resident_options.memory = WeightMemory::HugePages;
  const std::unique_ptr<Checkpoint> mapped = Checkpoint::open(dir), resident = Checkpoint::open(dir, resident_options);
  const std::vector<NamedMatrix> want = all_matrices(*mapped), got = all_matrices(*resident);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i)
    for (int64_t r = 0; r < want[i].matrix->rows; r += 5)
      ASSERT_EQ(bound_row(*got[i].matrix, r), bound_row(*want[i].matrix, r)) << got[i].label << " row " << r;

  auto expect_interleaved = [](const GatedExpert& e, bool interleaved, const std::string& label) {
    const int64_t code_row = e.gate.cols / 2, param_row = e.gate.cols / e.gate.group_size * 2;  // 4-bit, bf16 params
    EXPECT_EQ(e.gate.row_stride, interleaved ? 2 * code_row : code_row) << label;
    EXPECT_EQ(e.gate.scales_row_stride, interleaved ? 2 * param_row : param_row) << label;
    EXPECT_EQ(e.up.row_stride, e.gate.row_stride) << label;
    if (interleaved) {
      EXPECT_EQ(e.up.data, e.gate.data + code_row) << label;
      EXPECT_EQ(e.up.scales, e.gate.scales + param_row) << label;
      EXPECT_EQ(e.up.biases, e.gate.biases + param_row) << label;
    }
    EXPECT_EQ(e.down.row_stride, e.down.cols / 2) << label;  // down projections have no partner
  };
  for (const Checkpoint* ckpt : {mapped.get(), resident.get()}) {
    const bool interleaved = ckpt == resident.get();
    const ModelWeights& w = ckpt->weights();
    expect_interleaved(w.layers[0].mlp.dense_mlp, interleaved, "dense");
    for (size_t e = 0; e < w.layers[2].mlp.experts.size(); ++e)
      expect_interleaved(w.layers[2].mlp.experts[e], interleaved, "expert " + std::to_string(e));
    for (const GatedExpert& e : w.layers[2].mlp.shared) expect_interleaved(e, interleaved, "shared");
  }
  int noted = 0;
  for (const BindingRecord& b : resident->bindings()) {
    if (b.source == "model.llm.layers.2.mlp.experts.gate_proj.weight") {
      EXPECT_NE(b.how.find("rows interleaved in memory with model.llm.layers.2.mlp.experts.up_proj.weight"),
                std::string::npos) << b.how;
      ++noted;
    }
    if (b.source.find("down_proj") != std::string::npos) {
      EXPECT_EQ(b.how.find("interleaved"), std::string::npos) << b.source;
    }
  }
  EXPECT_EQ(noted, 1);
  for (const BindingRecord& b : mapped->bindings()) EXPECT_EQ(b.how.find("interleaved"), std::string::npos) << b.source;
}

// hf_quant_config.json alone (config.json without a quantization entry) still gives NVFP4.
// The binder marks NVFP4 matrices whose block scales were copied into memory and are all
// non-negative and finite (ModelOpt's always are), so the kernels need not check each row. One
// negative scale in a tensor unmarks the matrices bound from that tensor, and only those; scales
// left in the mapping are not scanned.
TEST_F(RoundTrip, Nvfp4ScalesCheckedOnceAtBinding) {
  const fs::path source = synth_tiny("nvfp4", kSeed);
  CheckpointOptions resident;
  resident.memory = WeightMemory::HugePages;
  const std::unique_ptr<Checkpoint> mapped = Checkpoint::open(source);
  for (const GatedExpert& e : mapped->weights().layers[2].mlp.experts)
    EXPECT_FALSE(e.gate.scales_nonnegative_finite || e.down.scales_nonnegative_finite);
  auto expect_marks = [](const Checkpoint& ckpt, bool layer2_down) {
    const ModelWeights& w = ckpt.weights();
    for (const GatedExpert& e : w.layers[1].mlp.experts) EXPECT_FALSE(e.gate.scales_nonnegative_finite);  // bf16
    for (int layer : {2, 3}) {
      for (const GatedExpert& e : w.layers[size_t(layer)].mlp.experts) {
        EXPECT_TRUE(e.gate.scales_nonnegative_finite) << layer;
        EXPECT_TRUE(e.up.scales_nonnegative_finite) << layer;
        EXPECT_EQ(e.down.scales_nonnegative_finite, layer == 2 ? layer2_down : true) << layer;
      }
    }
  };
  expect_marks(*Checkpoint::open(source, resident), true);

  const std::string name = "model.llm.layers.2.mlp.experts.w2_weight.scale";
  const fs::path dir = clone_checkpoint(source, "nvfp4_negative_scale");
  fs::path shard;
  for (const fs::path& file : shard_files(dir))
    if (SafetensorsFile::open(file).contains(name)) shard = file;
  ASSERT_FALSE(shard.empty()) << name;
  materialize(shard);
  std::fstream file(shard, std::ios::in | std::ios::out | std::ios::binary);
  uint64_t header_bytes = 0;
  file.read(reinterpret_cast<char*>(&header_bytes), 8);
  std::string header(size_t(header_bytes), '\0');
  file.read(header.data(), std::streamsize(header_bytes));
  const uint64_t last = nlohmann::json::parse(header)[name]["data_offsets"][1].get<uint64_t>();
  const std::streamoff at = std::streamoff(8 + header_bytes + last - 1);  // the tensor's last scale
  char byte = 0;
  file.seekg(at);
  file.read(&byte, 1);
  byte = char(uint8_t(byte) | 0x80);
  file.seekp(at);
  file.write(&byte, 1);
  ASSERT_TRUE(file.good());
  file.close();
  expect_marks(*Checkpoint::open(dir, resident), false);
}

TEST_F(RoundTrip, Nvfp4FromHfQuantConfigAlone) {
  fs::path dir = clone_checkpoint(synth_tiny("nvfp4", kSeed), "nvfp4_hfq");
  nlohmann::json config = read_json(dir / "config.json");
  config.erase("quantization");
  config.erase("quantization_config");
  write_json(dir / "config.json", config);
  std::unique_ptr<Checkpoint> ckpt = Checkpoint::open(dir);
  EXPECT_EQ(ckpt->layout(), CheckpointLayout::NvFp4);
  EXPECT_EQ(ckpt->config().quantization.mode, QuantMode::NvFp4);
  EXPECT_NE(ckpt->config().quantization.source.find("hf_quant_config.json"), std::string::npos)
      << ckpt->config().quantization.source;
  EXPECT_TRUE(ckpt->warnings().empty()) << ckpt->warnings()[0];
  EXPECT_EQ(ckpt->weights().layers[2].mlp.experts[0].gate.format, WeightFormat::NvFp4);
}

// ---- determinism and files ----

std::vector<std::string> shard_bytes(const fs::path& dir) {
  std::vector<std::string> out;
  for (const fs::path& shard : shard_files(dir)) out.push_back(read_file(shard));
  return out;
}

TEST(SynthFiles, DeterministicPerSeed) {
  const fs::path& first = synth_tiny("original-bf16", kSeed);
  fs::path again = fresh_dir("synth_again");
  ProcessResult result = run_inkling({"synth", (again / "ckpt").string(), "--layout", "original-bf16", "--preset",
                                      "tiny", "--seed", std::to_string(kSeed)});
  ASSERT_EQ(result.exit_code, 0) << result.describe();
  std::vector<std::string> a = shard_bytes(first), b = shard_bytes(again / "ckpt");
  ASSERT_FALSE(a.empty());
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(a[i] == b[i]) << "shard " << i << " differs for the same seed";
  EXPECT_EQ(read_file(first / "config.json"), read_file(again / "ckpt" / "config.json"));
  EXPECT_EQ(read_file(first / "model.safetensors.index.json"),
            read_file(again / "ckpt" / "model.safetensors.index.json"));

  const fs::path& other = synth_tiny("original-bf16", kSeed + 1);
  std::vector<std::string> c = shard_bytes(other);
  ASSERT_EQ(a.size(), c.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_FALSE(a[i] == c[i]) << "shard " << i << " is identical for different seeds";
}

class SynthFilesPerLayout : public ::testing::TestWithParam<std::string> {};

TEST_P(SynthFilesPerLayout, HoldsConfigTokenizerAndIndex) {
  const fs::path& dir = synth_tiny(GetParam(), kSeed);
  for (const char* name : {"model.safetensors.index.json", "config.json", "generation_config.json", "tokenizer.json",
                           "tokenizer_config.json"})
    EXPECT_TRUE(fs::is_regular_file(dir / name)) << GetParam() << " lacks " << name;
  EXPECT_EQ(fs::exists(dir / "hf_quant_config.json"), GetParam() == "nvfp4");
  if (GetParam() == "nvfp4") {
    EXPECT_EQ(read_json(dir / "hf_quant_config.json")["quantization"]["quant_algo"], "NVFP4");
  }
  // The index lists exactly the tensors of the shards, and every shard it names exists.
  nlohmann::json index = read_json(dir / "model.safetensors.index.json");
  std::set<std::string> indexed, shards_named;
  for (auto& [tensor, shard] : index["weight_map"].items()) {
    indexed.insert(tensor);
    shards_named.insert(shard.get<std::string>());
  }
  std::set<std::string> on_disk;
  for (const fs::path& shard : shard_files(dir)) on_disk.insert(shard.filename().string());
  EXPECT_EQ(shards_named, on_disk);
  TensorStore store = TensorStore::open_dir(dir);
  std::vector<std::string> names = store.names();
  EXPECT_EQ(indexed, std::set<std::string>(names.begin(), names.end()));
  nlohmann::json config = read_json(dir / "config.json");
  EXPECT_EQ(config["model_type"], "inkling_mm_model");
  nlohmann::json tokenizer_config = read_json(dir / "tokenizer_config.json");
  EXPECT_EQ(tokenizer_config["eos_token"], "<|content_model_end_sampling|>");
}

INSTANTIATE_TEST_SUITE_P(Layouts, SynthFilesPerLayout,
                         ::testing::Values("original-f32", "original-bf16", "nvfp4", "mlx-4bit", "mlx-8bit"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace inkling
