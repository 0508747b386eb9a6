// Writes a bound checkpoint back out as a GGUF file laid out as llama.cpp's Inkling converter
// writes one, through the library's exporter (model/gguf_export.h: names, shapes, metadata), with
// the matrices in a chosen ggml type, optionally as a split set or as the "dequantized twin" of
// another type. Our own writer, so the GGUF tests need no llama.cpp; tests/gguf/test_converter.py
// checks the same binding against the real converter's files.
#pragma once

#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "../io/gguf_test_util.h"
#include "model/gguf_export.h"
#include "model/weights.h"
#include "tensor/ggml_quantize.h"

namespace inkling::testing {

inline std::vector<float> matrix_values(const WeightMatrix& m) {
  std::vector<float> out(size_t(m.rows * m.cols));
  for (int64_t r = 0; r < m.rows; ++r) dequantize_row(m, r, out.data() + r * m.cols);
  return out;
}

// `values` in ggml type `type`, as ggml's reference quantizers encode them.
inline std::vector<uint8_t> encode_ggml(GgmlType type, const std::vector<float>& values) {
  std::vector<uint8_t> out(size_t(ggml_row_bytes(type, int64_t(values.size())).value()));
  quantize_ggml_row(type, values.data(), out.data(), int64_t(values.size()));
  return out;
}

struct GgufModelOptions {
  GgmlType matrices = GgmlType::F32;  // the projections, experts, embedding and head
  std::function<GgmlType(const GgufMatrixSlot&)> matrix_type;  // when set, each matrix's type instead
  GgmlType vectors = GgmlType::F32;   // norms (convs, rel_proj, router, biases stay F32 as the converter keeps them)
  int splits = 1;                     // > 1: NAME-0000k-of-0000n.gguf files
  // Not F32: the matrices are encoded in this type and decoded again, and stored as `matrices`:
  // an F32 file of exactly the values a file of this type holds (its "dequantized twin").
  GgmlType round_trip = GgmlType::F32;
  // The tokenizer.ggml.* keys and tokenizer.chat_template, from the checkpoint's tokenizer.json
  // and chat template.
  bool vocabulary = true;
  // More metadata keys, added after the model's own.
  std::function<void(GgufBuilder&)> extra_metadata;
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
  GgufExportOptions exporting;
  exporting.matrix_type = options.matrix_type ? options.matrix_type
                                              : [type = options.matrices](const GgufMatrixSlot&) { return type; };
  exporting.vector_type = options.vectors;
  exporting.vocabulary = options.vocabulary;
  exporting.sampling = false;  // the tests add general.sampling.* keys themselves (extra_metadata)
  if (options.round_trip != GgmlType::F32)
    exporting.transform = [type = options.round_trip](std::vector<float>& v) { v = round_trip_values(type, v); };
  GgufModelPlan plan = plan_gguf_model(ckpt, exporting);
  GgufBuilder meta;
  static_cast<GgufMetadata&>(meta) = plan.meta;
  if (options.extra_metadata) options.extra_metadata(meta);
  auto bytes_of = [](const GgufTensorPlan& t) {
    std::vector<uint8_t> bytes;
    t.produce(bytes);
    return bytes;
  };

  if (options.splits <= 1) {
    for (const GgufTensorPlan& t : plan.tensors) meta.add_tensor(t.name, t.type, t.dims, bytes_of(t));
    meta.write(path);
    return path;
  }
  const std::vector<GgufTensorPlan>& tensors = plan.tensors;
  const std::string prefix = (path.parent_path() / path.stem()).string();
  std::filesystem::path first;
  const size_t per_file = (tensors.size() + size_t(options.splits) - 1) / size_t(options.splits);
  for (int s = 0; s < options.splits; ++s) {
    GgufBuilder part = s == 0 ? meta : GgufBuilder{};
    part.add_u16("split.no", uint16_t(s));
    part.add_u16("split.count", uint16_t(options.splits));
    if (s == 0) part.add_i32("split.tensors.count", int32_t(tensors.size()));
    for (size_t t = size_t(s) * per_file; t < std::min(tensors.size(), size_t(s + 1) * per_file); ++t)
      part.add_tensor(tensors[t].name, tensors[t].type, tensors[t].dims, bytes_of(tensors[t]));
    char tail[32];
    std::snprintf(tail, sizeof tail, "-%05d-of-%05d.gguf", s + 1, options.splits);
    const std::filesystem::path file = prefix + tail;
    part.write(file);
    if (s == 0) first = file;
  }
  return first;
}

}  // namespace inkling::testing
