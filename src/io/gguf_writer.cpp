#include "io/gguf_writer.h"

#include <cerrno>
#include <fstream>

namespace inkling {

void GgufMetadata::add_raw(const std::string& key, uint32_t type, const std::vector<uint8_t>& value) {
  put_string(kv_, key);
  put<uint32_t>(kv_, type);
  append(kv_, value.data(), value.size());
  ++kvs_;
}

void GgufMetadata::add_string(const std::string& key, const std::string& value) {
  std::vector<uint8_t> bytes;
  put_string(bytes, value);
  add_raw(key, uint32_t(GgufValueType::String), bytes);
}

void GgufMetadata::add_string_array(const std::string& key, const std::vector<std::string>& values) {
  std::vector<uint8_t> bytes;
  put<uint32_t>(bytes, uint32_t(GgufValueType::String));
  put<uint64_t>(bytes, values.size());
  for (const std::string& value : values) put_string(bytes, value);
  add_raw(key, uint32_t(GgufValueType::Array), bytes);
}

void GgufMetadata::put_string(std::vector<uint8_t>& out, const std::string& text) {
  put<uint64_t>(out, text.size());
  append(out, text.data(), text.size());
}

void GgufMetadata::add_value(const std::string& key, const GgufValue& value) {
  auto size_of = [](GgufValueType type) -> size_t {
    switch (type) {
      case GgufValueType::U8: case GgufValueType::I8: case GgufValueType::Bool: return 1;
      case GgufValueType::U16: case GgufValueType::I16: return 2;
      case GgufValueType::U32: case GgufValueType::I32: case GgufValueType::F32: return 4;
      default: return 8;
    }
  };
  if (value.type == GgufValueType::String) return add_string(key, std::string(value.text));
  if (value.type != GgufValueType::Array) {
    add_raw(key, uint32_t(value.type), std::vector<uint8_t>(value.data, value.data + size_of(value.type)));
    return;
  }
  if (value.element_type == GgufValueType::String) {
    add_string_array(key, std::vector<std::string>(value.strings.begin(), value.strings.end()));
    return;
  }
  std::vector<uint8_t> bytes;
  put<uint32_t>(bytes, uint32_t(value.element_type));
  put<uint64_t>(bytes, value.count);
  append(bytes, value.data, size_t(value.count) * size_of(value.element_type));
  add_raw(key, uint32_t(GgufValueType::Array), bytes);
}

int64_t GgufTensorPlan::elements() const {
  int64_t n = 1;
  for (uint64_t dim : dims) n *= int64_t(dim);
  return n;
}

uint64_t GgufTensorPlan::nbytes() const {
  const std::optional<uint64_t> bytes = ggml_row_bytes(type, elements());
  if (!bytes || dims.empty() || int64_t(dims[0]) % ggml_type_info(type).block_elements != 0)
    throw Error("tensor " + name + ": rows of " + std::to_string(dims.empty() ? 0 : dims[0]) + " values are not a " +
                "whole number of " + std::string(ggml_type_name(type)) + " blocks (" +
                std::to_string(ggml_type_info(type).block_elements) + " values)");
  return *bytes;
}

void write_gguf_file(const std::filesystem::path& path, const GgufMetadata& meta,
                     const std::vector<GgufTensorPlan>& tensors, const std::function<void(uint64_t, uint64_t)>& progress) {
  constexpr uint64_t kAlign = kGgufDefaultAlignment;
  auto pad = [](uint64_t at) { return (at + kAlign - 1) / kAlign * kAlign; };
  std::vector<uint8_t> head;
  GgufMetadata::append(head, "GGUF", 4);
  GgufMetadata::put<uint32_t>(head, 3);
  GgufMetadata::put<uint64_t>(head, tensors.size());
  GgufMetadata::put<uint64_t>(head, meta.count());
  GgufMetadata::append(head, meta.encoded().data(), meta.encoded().size());
  uint64_t offset = 0;
  for (const GgufTensorPlan& t : tensors) {
    if (t.name.empty() || t.name.size() > kGgufMaxTensorName)
      throw Error("tensor name \"" + t.name + "\" must be 1.." + std::to_string(kGgufMaxTensorName) + " bytes");
    GgufMetadata::put_string(head, t.name);
    GgufMetadata::put<uint32_t>(head, uint32_t(t.dims.size()));
    for (uint64_t dim : t.dims) GgufMetadata::put<uint64_t>(head, dim);
    GgufMetadata::put<uint32_t>(head, uint32_t(t.type));
    GgufMetadata::put<uint64_t>(head, offset);
    offset = pad(offset + t.nbytes());
  }
  const uint64_t total = offset;
  head.resize(size_t(pad(head.size())), 0);

  const std::filesystem::path partial = path.string() + ".partial";
  std::ofstream out(partial, std::ios::binary | std::ios::trunc);
  auto check = [&] {
    if (!out) throw Error("cannot write " + partial.string() + ": " + std::strerror(errno));
  };
  check();
  out.write(reinterpret_cast<const char*>(head.data()), std::streamsize(head.size()));
  check();
  std::vector<uint8_t> bytes;
  uint64_t done = 0;
  for (const GgufTensorPlan& t : tensors) {
    bytes.clear();
    t.produce(bytes);
    if (bytes.size() != t.nbytes())
      throw Error("tensor " + t.name + ": produced " + std::to_string(bytes.size()) + " bytes, its type and shape need " +
                  std::to_string(t.nbytes()));
    bytes.resize(size_t(pad(bytes.size())), 0);
    out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    check();
    done += bytes.size();
    if (progress) progress(done, total);
  }
  out.close();
  check();
  std::filesystem::rename(partial, path);
}

}  // namespace inkling
