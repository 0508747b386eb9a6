// Writing GGUF files the way ggml's writer lays them out (see io/gguf.h for the format): the
// metadata encoded as it is added, then the header, the tensor infos at ggml's aligned offsets,
// and each tensor's bytes produced and written in turn, so a model file never has to sit in
// memory whole.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "io/gguf.h"

namespace inkling {

// Key/value pairs in GGUF's encoding, in the order added.
class GgufMetadata {
 public:
  void add_raw(const std::string& key, uint32_t type, const std::vector<uint8_t>& value);
  template <class T>
  void add_scalar(const std::string& key, GgufValueType type, T value) {
    std::vector<uint8_t> bytes;
    put<T>(bytes, value);
    add_raw(key, uint32_t(type), bytes);
  }
  void add_u16(const std::string& key, uint16_t value) { add_scalar(key, GgufValueType::U16, value); }
  void add_u32(const std::string& key, uint32_t value) { add_scalar(key, GgufValueType::U32, value); }
  void add_i32(const std::string& key, int32_t value) { add_scalar(key, GgufValueType::I32, value); }
  void add_u64(const std::string& key, uint64_t value) { add_scalar(key, GgufValueType::U64, value); }
  void add_f32(const std::string& key, float value) { add_scalar(key, GgufValueType::F32, value); }
  void add_bool(const std::string& key, bool value) { add_scalar<uint8_t>(key, GgufValueType::Bool, value ? 1 : 0); }
  void add_string(const std::string& key, const std::string& value);
  template <class T>
  void add_array(const std::string& key, GgufValueType element, const std::vector<T>& values) {
    std::vector<uint8_t> bytes;
    put<uint32_t>(bytes, uint32_t(element));
    put<uint64_t>(bytes, values.size());
    for (const T& value : values) put<T>(bytes, value);
    add_raw(key, uint32_t(GgufValueType::Array), bytes);
  }
  void add_string_array(const std::string& key, const std::vector<std::string>& values);
  // A copy of `value` (a key read from another GGUF file), whatever its type.
  void add_value(const std::string& key, const GgufValue& value);

  const std::vector<uint8_t>& encoded() const { return kv_; }
  uint64_t count() const { return kvs_; }

  template <class T>
  static void put(std::vector<uint8_t>& out, T value) {
    append(out, &value, sizeof(T));
  }
  // (resize and copy: GCC 12 warns falsely on inserting into a byte vector)
  static void append(std::vector<uint8_t>& out, const void* data, size_t size) {
    if (size == 0) return;
    const size_t at = out.size();
    out.resize(at + size);
    std::memcpy(out.data() + at, data, size);
  }
  static void put_string(std::vector<uint8_t>& out, const std::string& text);

 private:
  std::vector<uint8_t> kv_;
  uint64_t kvs_ = 0;
};

// One tensor to write: `dims` in ggml's order (dims[0] the row length), its bytes made by
// `produce` (exactly ggml_row_bytes(type, elements) of them) when the writer reaches it.
struct GgufTensorPlan {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<uint64_t> dims;
  std::function<void(std::vector<uint8_t>&)> produce;

  int64_t elements() const;
  uint64_t nbytes() const;  // throws when the row is not a whole number of blocks
};

// Writes `meta` and `tensors` as the GGUF file `path` (version 3, alignment 32): written to
// PATH.partial and renamed at the end, so a failed write leaves no file that looks whole.
// `progress(done, total)` counts tensor bytes. Throws inkling::Error naming the file.
void write_gguf_file(const std::filesystem::path& path, const GgufMetadata& meta,
                     const std::vector<GgufTensorPlan>& tensors,
                     const std::function<void(uint64_t, uint64_t)>& progress = {});

}  // namespace inkling
