// Any checkpoint this engine loads, written as a GGUF file laid out as llama.cpp's Inkling
// converter (convert_hf_to_gguf.py) writes one: its tensor names and order, row-major shapes as
// reversed ggml dims, gate / up de-interleaved, conv taps [C, K], router, biases, convs and
// rel_proj kept F32; the inkling.* / general.* metadata keys; the tokenizer.ggml.* keys from the
// checkpoint's tokenizer.json (or, for a GGUF source, copied from its metadata). The matrices take
// the types a GgufTypePolicy picks: the converter's (F32, BF16, Q8_0) or llama-quantize's Q4_K_M
// mix.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "io/gguf_writer.h"
#include "model/weights.h"

namespace inkling {

// One matrix (or stack of matrices) to type: its GGUF name ("blk.3.attn_v.weight"), layer (-1 for
// token_embd / output), row length, and what llama-quantize's choice reads besides: the model's
// routed expert count and, for the ffn_down family, how many of them come before this one in
// llama-quantize's order (by layer, then by name), which it uses for the layer when the model has
// at most one expert.
struct GgufMatrixSlot {
  std::string name;
  int layer = -1;
  int num_layers = 0;
  int64_t cols = 0;
  int experts = 0;
  int ffn_down_ordinal = -1;
};
using GgufTypePolicy = std::function<GgmlType(const GgufMatrixSlot&)>;

// The named targets of `inkling quantize --to gguf-...`: "f32", "bf16", "q8_0" (every matrix),
// "q4_k_m" (llama-quantize's Q4_K_M mix without an importance matrix, see gguf_q4_k_m_type).
// Throws for another name.
struct GgufTarget {
  std::string name;       // as given: "q4_k_m"
  uint32_t file_type = 0; // general.file_type (llama_ftype): 0, 32, 7, 15
  GgufTypePolicy policy;
};
GgufTarget gguf_target(const std::string& name);

// The type llama-quantize's Q4_K_M gives an Inkling matrix (docs/gguf.md has the table): Q4_K, but
// Q6_K for output.weight and, in its "more bits" layers, attn_v and the ffn_down family; for a
// model of exactly 8 experts Q8_0 for attn_k and attn_v and Q5_K for attn_output. A row that is
// not whole blocks of that type falls back as llama-quantize's does (Q4_K to Q5_0, Q5_K to Q5_1,
// Q6_K to Q8_0, F16 when not a multiple of 32 either). Throws inkling::Error where llama-quantize
// stops: a Q8_0 choice for rows that are not a multiple of 32.
GgmlType gguf_q4_k_m_type(const GgufMatrixSlot& slot);

struct GgufModelPlan {
  GgufMetadata meta;
  std::vector<GgufTensorPlan> tensors;
};

struct GgufExportOptions {
  GgufTypePolicy matrix_type;              // required
  uint32_t file_type = 0;                  // general.file_type
  GgmlType vector_type = GgmlType::F32;    // the norms (the convs, rel_proj, router and biases stay F32)
  // Applied to each matrix's f32 values before they are encoded in `type` (tests: a round trip
  // through another type).
  std::function<void(std::vector<float>&)> transform;
  // Where tokenizer.json (tokenizer_config.json, chat_template.jinja, generation_config.json) are;
  // empty: the checkpoint's own directory. Without a tokenizer.json (and for a GGUF source without
  // tokenizer.ggml.* keys), only tokenizer.ggml.eos_token_id is written.
  std::filesystem::path side_files;
  bool vocabulary = true;  // false: no tokenizer.ggml.* keys but the EOS id
  bool sampling = true;    // general.sampling.* from generation_config.json (or the source GGUF), as the converter
  std::string name;        // general.name (default: the source directory's or file's name)
};

// The metadata and tensors of `ckpt` as a GGUF file; each tensor's bytes are made (dequantized
// from the source, encoded) when its producer runs, so `ckpt` must outlive the plan.
GgufModelPlan plan_gguf_model(const Checkpoint& ckpt, const GgufExportOptions& options);

struct GgufExportReport {
  uint64_t output_bytes = 0;
  std::map<std::string, int> types;  // ggml type name -> tensor count
};

// Writes `input` (any checkpoint Checkpoint::open reads) as the GGUF file `output` in `target`.
// `progress(done, total)` counts output bytes.
GgufExportReport export_gguf(const std::filesystem::path& input, const std::filesystem::path& output,
                             const GgufTarget& target, const std::function<void(uint64_t, uint64_t)>& progress = {});

}  // namespace inkling
