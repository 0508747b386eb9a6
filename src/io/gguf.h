// GGUF files (llama.cpp's model format): strict, zero-copy reading (mmap).
//
// Layout (little-endian): "GGUF", version (2 or 3: the same layout), tensor count and key/value
// count (uint64), the key/value pairs (key string, value type, value), the tensor infos (name,
// dimension count, dimensions, ggml type, offset), padding to `general.alignment` (default 32),
// then the data section. A string is a uint64 length and that many bytes; an array is an element
// type, a uint64 count and the elements.
//
// Reading checks as strictly as ggml's own reader, and more: every length, count and offset lies
// inside the file (overflow-safe), value and tensor types are known codes, keys and tensor names
// are unique and non-empty, arrays hold at most 2^30 elements (as ggml's reader allows), booleans
// are 0 or 1, `general.alignment` is a power-of-two uint32,
// tensors have at most 4 dimensions whose row length is a whole number of blocks, and the tensors
// sit in file order at the aligned offsets ggml's writer gives them (no gaps, no overlaps), their
// bytes inside the file. Every violation throws inkling::Error naming the file and the key or
// tensor.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/mapped_file.h"
#include "io/resident_memory.h"
#include "tensor/error.h"
#include "tensor/ggml_types.h"

namespace inkling {

constexpr uint32_t kGgufDefaultAlignment = 32;
constexpr size_t kGgufMaxDims = 4;
constexpr size_t kGgufMaxTensorName = 63;  // ggml's GGML_MAX_NAME less its terminating NUL
constexpr uint64_t kGgufMaxArrayElements = uint64_t(1) << 30;  // ggml's GGUF_MAX_ARRAY_ELEMENTS

enum class GgufValueType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  Bool = 7,
  String = 8,
  Array = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};
std::string_view gguf_value_type_name(GgufValueType type);

// One metadata value, viewing the file's bytes. A scalar or string has `type` of its own; an
// array has type Array, its elements' type in `element_type` (never Array: nested arrays are
// refused) and `count` elements at `data` (strings: in `strings`).
struct GgufValue {
  GgufValueType type = GgufValueType::U8;
  GgufValueType element_type = GgufValueType::U8;
  uint64_t count = 1;
  const uint8_t* data = nullptr;          // the scalar, or the first array element
  std::string_view text;                  // String
  std::vector<std::string_view> strings;  // Array of String

  bool is_integer() const;  // a scalar of one of the eight integer types
  bool is_number() const;   // an integer or F32 / F64 scalar
};

// One tensor as the file describes it. `dims` are ggml's order: dims[0] is the row length (the
// contiguous dimension); shape() is the row-major order the rest of the engine uses.
struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<int64_t> dims;
  uint64_t offset = 0;  // from the start of the data section
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;

  std::vector<int64_t> shape() const { return {dims.rbegin(), dims.rend()}; }
  int64_t elements() const;
  int64_t row_length() const { return dims.empty() ? 1 : dims[0]; }
  int64_t rows() const { return row_length() == 0 ? 0 : elements() / row_length(); }
};

// One mmap'd .gguf file. Movable, not copyable; views stay valid while it lives.
class GgufFile {
 public:
  static GgufFile open(const std::filesystem::path& path);
  // Parses an in-memory image (tests and fuzzing); `label` names it in errors.
  static GgufFile from_bytes(std::vector<uint8_t> bytes, std::string label);

  GgufFile(GgufFile&&) noexcept = default;  // the views move with the mapping
  GgufFile& operator=(GgufFile&&) noexcept = default;

  const std::filesystem::path& path() const { return path_; }
  const std::string& label() const { return label_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t file_bytes() const { return bytes_.size(); }
  uint64_t data_offset() const { return data_offset_; }  // where the data section starts

  const std::vector<std::string>& keys() const { return keys_; }  // in file order
  const GgufValue* find(std::string_view key) const;
  const std::vector<GgufTensor>& tensors() const { return tensors_; }  // in file order
  const GgufTensor* find_tensor(std::string_view name) const;

  // Typed reads of a key. Each throws naming the file and key when the key is missing or holds
  // another type (integers: any integer type whose value fits the result).
  std::string_view string(std::string_view key) const;
  uint64_t unsigned_integer(std::string_view key) const;
  int64_t signed_integer(std::string_view key) const;
  double number(std::string_view key) const;  // integer or float
  bool boolean(std::string_view key) const;
  // An array of integers (any integer element type, values fitting int64) or of booleans (0 / 1).
  std::vector<int64_t> integer_array(std::string_view key) const;
  std::vector<float> float_array(std::string_view key) const;  // F32 / F64 elements
  const std::vector<std::string_view>& string_array(std::string_view key) const;
  [[noreturn]] void fail_key(std::string_view key, const std::string& what) const;
  [[noreturn]] void fail_tensor(std::string_view name, const std::string& what) const;
  // Copies bytes [begin, begin + count) of one of this file's tensors to `out`: read from the file
  // (read_file_range, the mapping's pages untouched) when it is mapped, else from the held bytes.
  void read_tensor(const GgufTensor& tensor, uint64_t begin, uint64_t count, uint8_t* out) const;
  // Copies `rows` rows of `row_bytes` from row `first_row` of `tensor` (its bytes taken as rows of
  // that length) to out + i * out_stride, read as read_tensor reads: a copy that interleaves two
  // tensors' rows.
  void read_tensor_rows(const GgufTensor& tensor, uint64_t first_row, uint64_t rows, uint64_t row_bytes, uint8_t* out,
                        uint64_t out_stride) const;

 private:
  GgufFile() = default;
  void parse();
  const GgufValue& require(std::string_view key) const;

  std::filesystem::path path_;
  std::string label_;
  MappedFile bytes_;
  uint32_t version_ = 0;
  uint32_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<std::string> keys_;
  std::map<std::string, GgufValue, std::less<>> values_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// A model in one GGUF file or a split set (NAME-00001-of-0000N.gguf ... NAME-0000N-of-0000N.gguf,
// each with split.no / split.count, the first with split.tensors.count), read as one: the
// metadata is the first file's, the tensors are every file's, each name in exactly one file.
class GgufModelFiles {
 public:
  // `path` is a .gguf file (the first of a split set) or a directory holding exactly one model:
  // one .gguf file, or the first file of one split set. Throws naming the file and key.
  static std::unique_ptr<GgufModelFiles> open(const std::filesystem::path& path);
  // The file `path` resolves to (for a directory, the model file found in it); throws when none.
  static std::filesystem::path resolve(const std::filesystem::path& path);
  // Whether `path` names a GGUF model: a .gguf file, or a directory with a .gguf file and no
  // config.json (a safetensors checkpoint's marker).
  static bool looks_like_gguf(const std::filesystem::path& path);

  const GgufFile& first() const { return *files_.front(); }  // the metadata
  const std::vector<std::unique_ptr<GgufFile>>& files() const { return files_; }
  // A copied tensor (make_resident) is found with `data` pointing at its copy.
  const GgufTensor* find(std::string_view name) const;
  const GgufFile& file_of(std::string_view name) const;  // throws when no file holds it
  std::vector<std::string> names() const;                // sorted
  uint64_t total_file_bytes() const;

  // Copies the named tensors out of their files into one ResidentArena (memory advised for
  // transparent huge pages), in file order, on several threads; find() returns the copies from
  // then on. Once per model; unknown names throw. progress(done, total) in bytes. Returns the
  // bytes copied.
  uint64_t make_resident(const std::vector<std::string>& names,
                         const std::function<void(uint64_t, uint64_t)>& progress = {});
  // Two tensors of one type and shape that make_resident copies into one allocation with their
  // rows alternating: row i of `first` becomes row 2 i of the copy, row i of `second` row 2 i + 1
  // (a row: ne0 values, for a stacked expert tensor every expert's rows in turn). A gate and an
  // up projection are then read as one interleaved w13 matrix, one stream instead of two.
  struct RowPair {
    std::string first, second;
  };
  // make_resident that also copies `row_pairs` interleaved; a pair's tensors named in `names` too
  // are still copied once, in the pair. Throws naming both tensors when a pair's types or shapes
  // differ, or a tensor is in two pairs.
  uint64_t make_resident(const std::vector<std::string>& names, const std::vector<RowPair>& row_pairs,
                         const std::function<void(uint64_t, uint64_t)>& progress = {});
  // Where make_resident put tensor `name` when it was one of a RowPair: the interleaved copy, the
  // length of one row, whether `name` holds the odd rows, and the other tensor. find() goes on
  // returning the file's view of such a tensor: its rows are not contiguous in the copy.
  struct InterleavedRows {
    const uint8_t* data = nullptr;
    uint64_t row_bytes = 0;
    bool odd = false;
    std::string partner;
  };
  std::optional<InterleavedRows> interleaved_rows(std::string_view name) const;
  // The copies, as one range (empty before make_resident): what decode streams.
  std::span<const uint8_t> resident_memory() const;
  uint64_t resident_huge_page_bytes() const { return arena_ ? arena_->huge_page_bytes() : 0; }

 private:
  std::vector<std::unique_ptr<GgufFile>> files_;
  std::unique_ptr<ResidentArena> arena_;
  std::map<std::string, GgufTensor, std::less<>> resident_;  // name -> the tensor with data in arena_
  std::map<std::string, InterleavedRows, std::less<>> interleaved_;
  std::map<std::string, std::pair<size_t, size_t>, std::less<>> tensors_;  // name -> (file, tensor)
};

}  // namespace inkling
