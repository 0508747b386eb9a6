// Inkling weights bound in place: every matrix is a view into the checkpoint's bytes in their
// stored format: the mmap'd files, or with WeightMemory::HugePages one copy of the tensors the
// text model uses, in memory backed by huge pages (io/resident_memory.h). The seed's sanitize rules become views rather than copies:
//   - w13 row interleave: gate = even rows, up = odd rows (same pointer, doubled row stride);
//   - shared experts: one GatedExpert per shared expert (the dense concatenation of the seed is
//     the same sum computed expert by expert);
//   - conv weights: [C, 1, K] and [C, K, 1] are the same bytes;
//   - NVFP4: scale2 folded into each expert's WeightMatrix::global_scale (gate_scale / out_scale
//     of the seed multiply out to exactly this).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/sanitize.h"
#include "tensor/weight_matrix.h"

namespace inkling {

// Gguf: a GGUF file (or split set) as llama.cpp's Inkling converter writes it, any ggml types.
enum class CheckpointLayout { OriginalF32, OriginalBF16, NvFp4, MlxAffine, Gguf };
const char* layout_name(CheckpointLayout layout);
// The layout as synth, quantize and the CLI name it: "mlx-4bit" / "mlx-8bit" for MLX affine
// checkpoints (by their bits), else layout_name().
std::string layout_label(CheckpointLayout layout, const QuantizationConfig& quantization);

// A small vector parameter (norm weights, conv taps, biases) in its stored dtype.
using VectorWeight = TensorView;

struct GatedExpert {
  WeightMatrix gate;  // [I, H]
  WeightMatrix up;    // [I, H]
  WeightMatrix down;  // [H, I]
};

struct AttentionWeights {
  WeightMatrix q, k, v, r, o;  // [n_h*d, H], [n_kv*d, H] x2, [n_h*d_rel, H], [H, n_h*d]
  VectorWeight q_norm, k_norm;  // [d]
  VectorWeight k_conv, v_conv;  // [n_kv*d, K]
  VectorWeight rel_proj;        // [d_rel, R]
};

struct MlpWeights {
  bool dense = false;
  float global_scale = 1.0f;
  GatedExpert dense_mlp;                // dense layers
  WeightMatrix router;                  // [Rn + SH, H]; the last SH rows belong to shared experts
  std::vector<float> correction_bias;   // [Rn]
  std::vector<GatedExpert> experts;     // [Rn]
  std::vector<GatedExpert> shared;      // [SH]
};

struct LayerWeights {
  LayerSpec spec;
  VectorWeight attn_norm, mlp_norm;  // [H]
  VectorWeight attn_conv, mlp_conv;  // [H, K]
  AttentionWeights attn;
  MlpWeights mlp;
};

struct ModelWeights {
  WeightMatrix embed;    // [V, H], rows read one at a time
  VectorWeight embed_norm;
  VectorWeight norm;
  WeightMatrix lm_head;  // [V, H]
  std::vector<LayerWeights> layers;
};

// One canonical (post-sanitize) tensor name and where its data came from.
struct BindingRecord {
  std::string canonical;
  std::string source;
  std::string how;  // "as stored", "even rows", "odd rows", "expert 3", ...
  WeightFormat format = WeightFormat::F32;
};

// Where the bound weights live.
enum class WeightMemory {
  Mapped,     // in the files' mappings: zero-copy, paged in lazily on first use
  HugePages,  // copied at open into anonymous memory advised for transparent huge pages
};

struct CheckpointOptions {
  WeightMemory memory = WeightMemory::Mapped;
  // HugePages: (bytes copied, bytes to copy) after each tensor.
  std::function<void(uint64_t, uint64_t)> progress;
};

// An opened, validated checkpoint directory with its weights bound in place.
class Checkpoint {
 public:
  // Opens DIR: config.json, the safetensors (mmap), layout detection and binding. With
  // WeightMemory::HugePages, the tensors the text model uses (not the vision, audio or MTP ones)
  // are copied first. Throws inkling::Error naming the problem (missing tensor, wrong shape or
  // dtype, unreadable file, ...).
  // A .gguf file (the first of a split set), or a directory holding one and no config.json, is
  // opened as a GGUF model instead: the config from its metadata, its tensors bound by name (with
  // WeightMemory::HugePages, every one but the embedding copied first).
  static std::unique_ptr<Checkpoint> open(const std::filesystem::path& dir, const CheckpointOptions& options = {});

  // The checkpoint directory; for a GGUF model, the directory holding its file.
  const std::filesystem::path& dir() const { return dir_; }
  // The GGUF files of a GGUF model; null for a safetensors checkpoint.
  const GgufModelFiles* gguf() const { return gguf_.get(); }
  uint64_t file_bytes() const { return gguf_ ? gguf_->total_file_bytes() : store_.total_file_bytes(); }
  const ModelConfig& config() const { return config_; }
  const TextConfig& text() const { return config_.text; }
  CheckpointLayout layout() const { return layout_; }
  const ModelWeights& weights() const { return weights_; }
  const TensorStore& store() const { return store_; }
  // The weights copied out of the files (WeightMemory::HugePages), as one range; empty when they
  // are used in place in the mappings.
  std::span<const uint8_t> resident_memory() const {
    return gguf_ ? gguf_->resident_memory() : store_.resident_memory();
  }
  uint64_t resident_huge_page_bytes() const {
    return gguf_ ? gguf_->resident_huge_page_bytes() : store_.resident_huge_page_bytes();
  }
  const std::vector<BindingRecord>& bindings() const { return bindings_; }
  const std::vector<std::string>& skipped() const { return skipped_; }  // towers, mtp, ...
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  std::filesystem::path dir_;
  ModelConfig config_;
  CheckpointLayout layout_ = CheckpointLayout::OriginalF32;
  TensorStore store_;
  ModelWeights weights_;
  std::vector<BindingRecord> bindings_;
  std::vector<std::string> skipped_;
  std::vector<std::string> warnings_;
  std::unique_ptr<GgufModelFiles> gguf_;
  static std::unique_ptr<Checkpoint> open_gguf(const std::filesystem::path& path, const CheckpointOptions& options);
  friend class WeightBinder;
  friend class GgufBinder;
};

}  // namespace inkling
