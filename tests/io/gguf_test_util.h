// A GGUF image builder for tests: the library's metadata encoding (io/gguf_writer.h), and the
// whole file in memory laid out as ggml's writer lays it out, with knobs to make each field lie
// (counts, types, offsets, lengths).
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "io/gguf_writer.h"

namespace inkling::testing {

class GgufBuilder : public GgufMetadata {
 public:
  struct Tensor {
    std::string name;
    uint32_t type = 0;             // ggml type code
    std::vector<uint64_t> dims;    // ggml order: dims[0] is the row length
    std::vector<uint8_t> bytes;
    std::optional<uint64_t> offset;  // default: where ggml's writer puts it
  };

  uint32_t version = 3;
  uint32_t alignment = kGgufDefaultAlignment;  // used for the layout; add_u32("general.alignment") to declare it
  std::optional<uint64_t> tensor_count, kv_count;  // default: the real counts
  bool pad_last_tensor = true;

  Tensor& add_tensor(const std::string& name, GgmlType type, std::vector<uint64_t> dims, std::vector<uint8_t> bytes) {
    tensors_.push_back({name, uint32_t(type), std::move(dims), std::move(bytes), std::nullopt});
    return tensors_.back();
  }
  // A tensor of `type` whose bytes are a counting pattern of the right length.
  Tensor& add_tensor(const std::string& name, GgmlType type, std::vector<uint64_t> dims) {
    int64_t elements = 1;
    for (uint64_t dim : dims) elements *= int64_t(dim);
    std::vector<uint8_t> bytes(size_t(ggml_row_bytes(type, elements).value()));
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = uint8_t(i * 7 + 3);
    return add_tensor(name, type, std::move(dims), std::move(bytes));
  }
  std::vector<Tensor>& tensors() { return tensors_; }

  std::vector<uint8_t> build() const {
    std::vector<uint8_t> out = {'G', 'G', 'U', 'F'};
    put<uint32_t>(out, version);
    put<uint64_t>(out, tensor_count.value_or(tensors_.size()));
    put<uint64_t>(out, kv_count.value_or(count()));
    out.insert(out.end(), encoded().begin(), encoded().end());
    uint64_t offset = 0;
    std::vector<uint64_t> offsets;
    for (const Tensor& tensor : tensors_) {
      put_string(out, tensor.name);
      put<uint32_t>(out, uint32_t(tensor.dims.size()));
      for (uint64_t dim : tensor.dims) put<uint64_t>(out, dim);
      put<uint32_t>(out, tensor.type);
      offsets.push_back(offset);
      put<uint64_t>(out, tensor.offset.value_or(offset));
      offset = pad(offset + tensor.bytes.size());
    }
    if (!tensors_.empty()) out.resize(size_t(pad(out.size())), 0);
    const size_t data_start = out.size();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      out.resize(data_start + size_t(offsets[i]), 0);
      out.insert(out.end(), tensors_[i].bytes.begin(), tensors_[i].bytes.end());
      if (pad_last_tensor || i + 1 < tensors_.size()) out.resize(size_t(pad(out.size())), 0);
    }
    return out;
  }
  void write(const std::filesystem::path& path) const {
    const std::vector<uint8_t> bytes = build();
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  }

 private:
  uint64_t pad(uint64_t at) const { return (at + alignment - 1) / alignment * alignment; }

  std::vector<Tensor> tensors_;
};

}  // namespace inkling::testing
