// Inkling from GGUF files our own writer lays out as llama.cpp's converter does: the config from
// metadata, the binding, and logits against the safetensors checkpoint they were written from.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <span>

#include "gguf_model_writer.h"
#include "kernels/isa.h"
#include "kernels/linear.h"
#include "model/forward.h"
#include "model/gguf_checkpoint.h"
#include "model/reference.h"
#include "model_fixture.h"

namespace inkling {
namespace {

using testing::GgufModelOptions;
using testing::open_tiny;
using testing::random_tokens;
using testing::write_gguf_model;

namespace fs = std::filesystem;

// This process's scratch directory, removed when the test program ends (the files are ~100 MB each).
const fs::path& scratch_root() {
  static const struct Root {
    fs::path path;
    ~Root() {
      std::error_code ignored;
      fs::remove_all(path, ignored);
    }
  } root{fs::temp_directory_path() / ("inkling_gguf_model_" + std::to_string(::getpid()))};
  return root.path;
}

fs::path scratch(const std::string& name) {
  const fs::path dir = scratch_root() / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::vector<float> logits_of(const Checkpoint& ckpt, const std::vector<int32_t>& tokens) {
  RunOptions options;
  options.kv_dtype = DType::F32;
  options.context = 128;
  InklingModel model(ckpt, options);
  SequenceState state = model.new_sequence();
  std::vector<float> logits;
  model.forward_all(state, tokens, logits);
  return logits;
}

struct Agreement {
  double max_relative = 0;  // max |a - b| / max |b|
  double rms_relative = 0;  // rms(a - b) / rms(b)
  double argmax_agree = 0;  // share of positions with the same top token
};

Agreement compare(const std::vector<float>& got, const std::vector<float>& want, int64_t vocab) {
  double worst = 0, peak = 0, diff2 = 0, want2 = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
    peak = std::max(peak, std::fabs(double(want[i])));
    diff2 += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    want2 += double(want[i]) * want[i];
  }
  int agree = 0;
  const int64_t positions = int64_t(want.size()) / vocab;
  for (int64_t t = 0; t < positions; ++t) {
    auto top = [&](const std::vector<float>& v) {
      return std::max_element(v.begin() + t * vocab, v.begin() + (t + 1) * vocab) - v.begin();
    };
    agree += top(got) == top(want);
  }
  return {worst / peak, std::sqrt(diff2 / want2), double(agree) / double(positions)};
}

TEST(GgufModel, ConfigFromMetadataMatchesConfigJson) {
  const Checkpoint& source = open_tiny("original-f32");
  const fs::path file = write_gguf_model(source, scratch("config") / "tiny.gguf");
  const ModelConfig config = load_checkpoint_config(file);
  const TextConfig &a = config.text, &b = source.text();
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.num_layers, b.num_layers);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.unpadded_vocab_size, b.unpadded_vocab_size);
  EXPECT_EQ(a.d_rel, b.d_rel);
  EXPECT_EQ(a.rel_extent, b.rel_extent);
  EXPECT_EQ(a.sliding_window, b.sliding_window);
  EXPECT_EQ(a.conv_kernel, b.conv_kernel);
  EXPECT_EQ(a.dense_width, b.dense_width);
  EXPECT_EQ(a.moe_width, b.moe_width);
  EXPECT_EQ(a.n_routed_experts, b.n_routed_experts);
  EXPECT_EQ(a.n_shared_experts, b.n_shared_experts);
  EXPECT_EQ(a.experts_per_token, b.experts_per_token);
  EXPECT_EQ(a.route_scale, b.route_scale);
  EXPECT_EQ(a.mup_width_multiplier, b.mup_width_multiplier);
  EXPECT_EQ(a.log_scaling_n_floor, b.log_scaling_n_floor);
  EXPECT_EQ(a.log_scaling_alpha, b.log_scaling_alpha);
  EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps);
  EXPECT_EQ(config.eos_token_id, source.config().eos_token_id);
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t i = 0; i < a.layers.size(); ++i) {
    EXPECT_EQ(a.layers[i].sliding, b.layers[i].sliding) << i;
    EXPECT_EQ(a.layers[i].dense_mlp, b.layers[i].dense_mlp) << i;
    EXPECT_EQ(a.layers[i].n_heads, b.layers[i].n_heads) << i;
    EXPECT_EQ(a.layers[i].n_kv_heads, b.layers[i].n_kv_heads) << i;
    EXPECT_EQ(a.layers[i].head_dim, b.layers[i].head_dim) << i;
    EXPECT_EQ(a.layers[i].rel_extent, b.layers[i].rel_extent) << i;
  }
}

// F32 in, F32 out: the same numbers through the same kernels.
TEST(GgufModel, F32LogitsEqualTheSafetensorsOnes) {
  const Checkpoint& source = open_tiny("original-f32");
  const fs::path file = write_gguf_model(source, scratch("f32") / "tiny-F32.gguf");
  auto gguf = Checkpoint::open(file);
  EXPECT_EQ(gguf->layout(), CheckpointLayout::Gguf);
  EXPECT_TRUE(gguf->warnings().empty()) << gguf->warnings().front();
  const std::vector<int32_t> tokens = random_tokens(24, 5);
  const Agreement agreement = compare(logits_of(*gguf, tokens), logits_of(source, tokens), source.text().vocab_size);
  std::printf("F32 GGUF vs safetensors: max relative %.3g, rms relative %.3g\n", agreement.max_relative,
              agreement.rms_relative);
  EXPECT_LE(agreement.max_relative, 1e-5);
}

TEST(GgufModel, Bf16LogitsEqualTheSafetensorsOnes) {
  const Checkpoint& source = open_tiny("original-bf16");
  GgufModelOptions options;
  options.matrices = GgmlType::BF16;
  const fs::path file = write_gguf_model(source, scratch("bf16") / "tiny-BF16.gguf", options);
  auto gguf = Checkpoint::open(file);
  const std::vector<int32_t> tokens = random_tokens(24, 6);
  const Agreement agreement = compare(logits_of(*gguf, tokens), logits_of(source, tokens), source.text().vocab_size);
  EXPECT_LE(agreement.max_relative, 1e-5);
}

// Block types through the scalar ggml path, three ways:
// - exactly: on the scalar kernels, the quantized file's logits equal bit for bit those of its
//   "twin", an F32 GGUF holding the same weights dequantized (both paths dot the same f32 values
//   in the same order), so the binding and the ggml path add no error of their own;
// - production against the reference pass on the same file;
// - against the f32 checkpoint, within the type's error. Q8_0's step is max|w| / 127 per 32
//   weights (~0.4% RMS weight error for these Gaussian weights), Q4_0's max|w| / 8 (~7%). This
//   random-weight model routes its MoE layers on near-tied scores, so small weight changes flip
//   expert choices and the logit error is far above the weight error (measured here, rms
//   relative: Q8_0 0.087 with 87% of top tokens kept, Q4_0 0.20 with 65%; the f32 weights
//   merely rounded to bf16 give 0.0034 with every top token kept): the bounds are ~2x those,
//   there to catch a wrong type or binding (errors of order 1); the twin check is the exact one.
struct QuantCase {
  GgmlType type;
  double rms_bound;
  double argmax_bound;
};

class GgufQuantized : public ::testing::TestWithParam<QuantCase> {};

TEST_P(GgufQuantized, LogitsWithinTheTypesError) {
  const QuantCase param = GetParam();
  const Checkpoint& source = open_tiny("original-f32");
  GgufModelOptions options;
  options.matrices = param.type;
  const std::string name(ggml_type_name(param.type));
  const fs::path file = write_gguf_model(source, scratch(name) / ("tiny-" + name + ".gguf"), options);
  auto gguf = Checkpoint::open(file);
  EXPECT_EQ(gguf->weights().layers[0].attn.q.format, WeightFormat::Ggml);
  const std::vector<int32_t> tokens = random_tokens(24, 7);
  const std::vector<float> got = logits_of(*gguf, tokens);
  const int64_t vocab = source.text().vocab_size;
  const Agreement agreement = compare(got, logits_of(source, tokens), vocab);
  std::printf("%s GGUF vs f32 safetensors: max relative %.3g, rms relative %.3g, top-1 agreement %.2f\n",
              name.c_str(), agreement.max_relative, agreement.rms_relative, agreement.argmax_agree);
  EXPECT_LE(agreement.rms_relative, param.rms_bound);
  EXPECT_GE(agreement.argmax_agree, param.argmax_bound);
  // Production in exact precision against the reference: the same f32 activations. (Fast precision,
  // the default and `got` above, quantizes x to int8 for the AVX2 ggml integer decode; its error is
  // within the type's bound above.)
  const kernels::MatmulPrecision precision = kernels::matmul_precision();
  kernels::set_matmul_precision(kernels::MatmulPrecision::Exact);
  const std::vector<float> exact = logits_of(*gguf, tokens);
  kernels::set_matmul_precision(precision);
  const std::vector<float> reference = reference::forward(*gguf, tokens);
  const Agreement exactness = compare(exact, reference, vocab);
  EXPECT_LE(exactness.rms_relative, 1e-4) << "production vs reference on the same " << name << " GGUF";

  // The twin comes from the f32 checkpoint, not from the binding under test.
  GgufModelOptions twin_options;
  twin_options.round_trip = param.type;
  const fs::path twin_file =
      write_gguf_model(source, scratch(name + "-twin") / ("tiny-" + name + "-dequantized.gguf"), twin_options);
  auto twin = Checkpoint::open(twin_file);
  EXPECT_EQ(twin->weights().layers[0].attn.q.format, WeightFormat::F32);
  const kernels::Isa isa = kernels::active_isa();
  kernels::set_isa(kernels::Isa::Scalar);
  const std::vector<float> quantized_scalar = logits_of(*gguf, tokens), twin_scalar = logits_of(*twin, tokens);
  kernels::set_isa(isa);
  EXPECT_TRUE(quantized_scalar == twin_scalar) << name << ": the quantized file and its dequantized twin differ";
}

// How much this model's logits move when its weights only round to bf16 (a 2^-9 relative change):
// the scale the quantized bounds above are read against.
TEST(GgufModel, Bf16RoundingOfTheF32Weights) {
  const Checkpoint& source = open_tiny("original-f32");
  GgufModelOptions options;
  options.matrices = GgmlType::BF16;
  auto gguf = Checkpoint::open(write_gguf_model(source, scratch("f32-as-bf16") / "tiny-BF16.gguf", options));
  const std::vector<int32_t> tokens = random_tokens(24, 7);
  const Agreement agreement = compare(logits_of(*gguf, tokens), logits_of(source, tokens), source.text().vocab_size);
  std::printf("f32 weights rounded to bf16: rms relative %.3g, top-1 agreement %.2f\n", agreement.rms_relative,
              agreement.argmax_agree);
  EXPECT_LE(agreement.rms_relative, 0.2);
}

INSTANTIATE_TEST_SUITE_P(Types, GgufQuantized,
                         ::testing::Values(QuantCase{GgmlType::Q8_0, 0.2, 0.6}, QuantCase{GgmlType::Q4_0, 0.4, 0.4}),
                         [](const ::testing::TestParamInfo<QuantCase>& info) {
                           return std::string(ggml_type_name(info.param.type));
                         });

TEST(GgufModel, SplitSetAndDirectoryOpenAsOneModel) {
  const Checkpoint& source = open_tiny("original-f32");
  const fs::path dir = scratch("split");
  GgufModelOptions options;
  options.splits = 3;
  const fs::path first = write_gguf_model(source, dir / "tiny.gguf", options);
  EXPECT_EQ(first.filename(), "tiny-00001-of-00003.gguf");
  auto from_file = Checkpoint::open(first);
  auto from_dir = Checkpoint::open(dir);
  EXPECT_EQ(from_file->gguf()->files().size(), 3u);
  EXPECT_EQ(from_dir->dir(), dir);
  const std::vector<int32_t> tokens = random_tokens(8, 9);
  EXPECT_EQ(logits_of(*from_file, tokens), logits_of(source, tokens));
  EXPECT_EQ(logits_of(*from_dir, tokens), logits_of(source, tokens));
}

// Weights copied into huge pages from a split set are the same bytes: logits bit-identical to the
// mapped file's, every tensor but the (gathered, not streamed) embedding bound to its copy.
TEST(GgufModel, HugePageWeightsGiveIdenticalLogits) {
  const Checkpoint& source = open_tiny("original-f32");
  const fs::path dir = scratch("resident");
  GgufModelOptions options;
  options.matrices = GgmlType::Q8_0;
  options.splits = 2;
  const fs::path first = write_gguf_model(source, dir / "tiny.gguf", options);
  auto mapped = Checkpoint::open(first);
  CheckpointOptions resident_options;
  resident_options.memory = WeightMemory::HugePages;
  uint64_t last_done = 0, last_total = 0;
  resident_options.progress = [&](uint64_t done, uint64_t total) { last_done = done, last_total = total; };
  auto resident = Checkpoint::open(first, resident_options);
  EXPECT_TRUE(mapped->resident_memory().empty());
  const std::span<const uint8_t> copies = resident->resident_memory();
  ASSERT_FALSE(copies.empty());
  EXPECT_GT(last_total, 0u);
  EXPECT_EQ(last_done, last_total);
  // Everything the text model binds but the embedding, each copy 64-byte aligned in the arena.
  uint64_t expected = 0;
  for (const BindingRecord& binding : mapped->bindings())
    if (binding.source != "token_embd.weight") expected += (mapped->gguf()->find(binding.source)->nbytes + 63) / 64 * 64;
  EXPECT_EQ(copies.size(), expected);
  EXPECT_EQ(resident->bindings().size(), mapped->bindings().size());
  auto in_copies = [&](const void* data) {
    const auto* byte = static_cast<const uint8_t*>(data);
    return byte >= copies.data() && byte < copies.data() + copies.size();
  };
  EXPECT_FALSE(in_copies(resident->weights().embed.data));
  EXPECT_EQ(resident->weights().embed.data,
            resident->gguf()->file_of("token_embd.weight").find_tensor("token_embd.weight")->data);
  EXPECT_TRUE(in_copies(resident->weights().lm_head.data));
  EXPECT_TRUE(in_copies(resident->weights().layers.back().attn.q.data));
  EXPECT_TRUE(in_copies(resident->weights().norm.data));
  const std::vector<int32_t> tokens = random_tokens(12, 5);
  EXPECT_EQ(logits_of(*resident, tokens), logits_of(*mapped, tokens));
}

// Copied into memory, each gate / up pair of one type (dense, routed and shared experts) has its
// rows interleaved, as the original layouts' w13: up starts one gate row after gate, both at twice
// the stored row length, every expert of a stack in turn. Every row still dequantizes to the
// mapped file's, the logits are bit-identical, and the bindings say which tensors were paired. A
// pair of two types (the routed experts' up here) stays apart.
TEST(GgufModel, GateAndUpOfOneTypeInterleavedWhenCopiedIntoMemory) {
  const Checkpoint& source = open_tiny("original-f32");
  const fs::path dir = scratch("interleaved");
  GgufModelOptions options;
  options.matrix_type = [](const GgufMatrixSlot& slot) {
    return slot.name.find("ffn_up_exps") != std::string::npos ? GgmlType::Q4_0 : GgmlType::Q8_0;
  };
  const fs::path file = write_gguf_model(source, dir / "tiny.gguf", options);
  CheckpointOptions resident_options;
  resident_options.memory = WeightMemory::HugePages;
  auto mapped = Checkpoint::open(file), resident = Checkpoint::open(file, resident_options);
  const std::span<const uint8_t> copies = resident->resident_memory();
  auto in_copies = [&](const uint8_t* data) { return data >= copies.data() && data < copies.data() + copies.size(); };
  auto same_rows = [](const WeightMatrix& a, const WeightMatrix& b, const std::string& label) {
    ASSERT_EQ(a.rows, b.rows) << label;
    std::vector<float> row_a(size_t(a.cols)), row_b(size_t(b.cols));
    for (int64_t r = 0; r < a.rows; ++r) {
      dequantize_row(a, r, row_a.data());
      dequantize_row(b, r, row_b.data());
      ASSERT_EQ(row_a, row_b) << label << " row " << r;
    }
  };
  auto expect_pair = [&](const GatedExpert& got, const GatedExpert& want, bool interleaved, const std::string& label) {
    const int64_t row_bytes = int64_t(ggml_row_bytes(got.gate.ggml_type, got.gate.cols).value());
    EXPECT_TRUE(in_copies(got.gate.data) && in_copies(got.up.data) && in_copies(got.down.data)) << label;
    EXPECT_EQ(got.gate.row_stride, interleaved ? 2 * row_bytes : row_bytes) << label;
    if (interleaved) {
      EXPECT_EQ(got.up.data, got.gate.data + row_bytes) << label;
    }
    EXPECT_EQ(got.down.row_stride, int64_t(ggml_row_bytes(got.down.ggml_type, got.down.cols).value())) << label;
    same_rows(got.gate, want.gate, label + " gate");
    same_rows(got.up, want.up, label + " up");
    same_rows(got.down, want.down, label + " down");
  };
  int dense = 0, routed = 0, shared = 0;
  for (size_t i = 0; i < resident->weights().layers.size(); ++i) {
    const MlpWeights &got = resident->weights().layers[i].mlp, &want = mapped->weights().layers[i].mlp;
    const std::string layer = "layer " + std::to_string(i);
    if (!got.experts.empty()) {
      for (size_t e = 0; e < got.experts.size(); ++e, ++routed)
        expect_pair(got.experts[e], want.experts[e], false, layer + " expert " + std::to_string(e));
      for (size_t e = 0; e < got.shared.size(); ++e, ++shared)
        expect_pair(got.shared[e], want.shared[e], true, layer + " shared " + std::to_string(e));
    } else {
      expect_pair(got.dense_mlp, want.dense_mlp, true, layer + " dense");
      ++dense;
    }
  }
  EXPECT_GT(dense, 0);
  EXPECT_GT(routed, 0);
  EXPECT_GT(shared, 0);
  int noted = 0;
  for (const BindingRecord& b : resident->bindings()) {
    const bool paired = b.source.find("ffn_gate_shexp") != std::string::npos ||
                        b.source.find("ffn_up_shexp") != std::string::npos ||
                        b.source.find("ffn_gate.") != std::string::npos || b.source.find("ffn_up.") != std::string::npos;
    EXPECT_EQ(b.how.find("rows interleaved in memory with") != std::string::npos, paired) << b.source << ": " << b.how;
    if (b.source == "blk.0.ffn_gate.weight") {
      EXPECT_EQ(b.how, "Q8_0, rows interleaved in memory with blk.0.ffn_up.weight");
    }
    noted += paired;
  }
  EXPECT_EQ(noted, 2 * resident->config().text.num_layers);  // each layer's dense or shared gate and up
  for (const BindingRecord& b : mapped->bindings()) EXPECT_EQ(b.how.find("interleaved"), std::string::npos) << b.source;
  const std::vector<int32_t> tokens = random_tokens(10, 3);
  EXPECT_EQ(logits_of(*resident, tokens), logits_of(*mapped, tokens));
}

// ---- bad files name the file and the key or tensor ----

void expect_open_error(const fs::path& file, const std::vector<std::string>& phrases) {
  try {
    Checkpoint::open(file);
  } catch (const Error& error) {
    const std::string message = error.what();
    for (const std::string& phrase : phrases)
      EXPECT_NE(message.find(phrase), std::string::npos) << "message: " << message << "\nlacks: " << phrase;
    return;
  }
  ADD_FAILURE() << "opened " << file;
}

// Rewrites `file` with tensor `name` (or key `name`) changed by `change`.
void rewrite(const fs::path& file, const std::function<void(testing::GgufBuilder&, const GgufFile&)>& build) {
  std::vector<uint8_t> bytes;
  {
    const GgufFile original = GgufFile::open(file);
    testing::GgufBuilder builder;
    build(builder, original);
    bytes = builder.build();
  }
  std::ofstream(file, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

// Copies every key (whatever its type) but `skip_key`, and every tensor through `tensor`.
void copy_with(testing::GgufBuilder& out, const GgufFile& in, const std::string& skip_key,
               const std::function<bool(const GgufTensor&, testing::GgufBuilder&)>& tensor) {
  for (const std::string& key : in.keys()) {
    if (key == skip_key) continue;
    out.add_value(key, *in.find(key));
  }
  for (const GgufTensor& t : in.tensors()) {
    if (tensor(t, out)) continue;
    out.add_tensor(t.name, t.type, {t.dims.begin(), t.dims.end()}, {t.data, t.data + t.nbytes});
  }
}

TEST(GgufModel, BadFilesNameTheFileAndTheKeyOrTensor) {
  const Checkpoint& source = open_tiny("original-f32");
  const fs::path dir = scratch("bad");
  const auto fresh = [&](const std::string& name) { return write_gguf_model(source, dir / (name + ".gguf")); };

  const fs::path missing = fresh("missing-tensor");
  rewrite(missing, [](testing::GgufBuilder& out, const GgufFile& in) {
    copy_with(out, in, "", [](const GgufTensor& t, testing::GgufBuilder&) { return t.name == "blk.2.attn_r.weight"; });
  });
  expect_open_error(missing, {missing.string(), "missing tensor \"blk.2.attn_r.weight\""});

  const fs::path shape = fresh("wrong-shape");
  rewrite(shape, [](testing::GgufBuilder& out, const GgufFile& in) {
    copy_with(out, in, "", [](const GgufTensor& t, testing::GgufBuilder& b) {
      if (t.name != "blk.1.attn_k.weight") return false;
      b.add_tensor(t.name, t.type, {uint64_t(t.dims[1]), uint64_t(t.dims[0])}, {t.data, t.data + t.nbytes});
      return true;
    });
  });
  expect_open_error(shape, {shape.string(), "tensor \"blk.1.attn_k.weight\": is [64, 32] F32, expected [32, 64]"});

  const fs::path norm = fresh("quantized-norm");
  rewrite(norm, [](testing::GgufBuilder& out, const GgufFile& in) {
    copy_with(out, in, "", [](const GgufTensor& t, testing::GgufBuilder& b) {
      if (t.name != "output_norm.weight") return false;
      b.add_tensor(t.name, GgmlType::Q8_0, {uint64_t(t.dims[0])});
      return true;
    });
  });
  expect_open_error(norm, {"tensor \"output_norm.weight\": is Q8_0; a vector weight must be F32, F16 or BF16"});

  const fs::path key = fresh("missing-key");
  rewrite(key, [](testing::GgufBuilder& out, const GgufFile& in) {
    copy_with(out, in, "inkling.d_rel", [](const GgufTensor&, testing::GgufBuilder&) { return false; });
  });
  expect_open_error(key, {key.string(), "key \"inkling.d_rel\": is missing"});

  const fs::path arch = fresh("other-arch");
  rewrite(arch, [](testing::GgufBuilder& out, const GgufFile& in) {
    out.add_string("general.architecture", "llama");
    copy_with(out, in, "general.architecture", [](const GgufTensor&, testing::GgufBuilder&) { return false; });
  });
  expect_open_error(arch, {"key \"general.architecture\": is \"llama\"; this engine runs Inkling models"});

  const fs::path unusable = fresh("unusable-type");
  rewrite(unusable, [](testing::GgufBuilder& out, const GgufFile& in) {
    copy_with(out, in, "", [](const GgufTensor& t, testing::GgufBuilder& b) {
      if (t.name != "blk.0.attn_k.weight") return false;
      b.add_tensor(t.name, GgmlType::I32, {uint64_t(t.dims[0]), uint64_t(t.dims[1])});
      return true;
    });
  });
  expect_open_error(unusable, {"tensor \"blk.0.attn_k.weight\": has type I32, which no Inkling weight can use"});
}

}  // namespace
}  // namespace inkling
