// Strict GGUF reading: mmap + header validation (see gguf.h for the rules).
#include "io/gguf.h"

#include <sys/uio.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>
#include <utility>

#include "tensor/tensor_view.h"

namespace inkling {
namespace {

namespace fs = std::filesystem;

std::string in_quotes(std::string_view text) {
  std::string out = "\"";
  out += text;
  out += '"';
  return out;
}

// Bytes of one scalar of `type`; 0 for String and Array.
uint64_t scalar_bytes(GgufValueType type) {
  switch (type) {
    case GgufValueType::U8:
    case GgufValueType::I8:
    case GgufValueType::Bool: return 1;
    case GgufValueType::U16:
    case GgufValueType::I16: return 2;
    case GgufValueType::U32:
    case GgufValueType::I32:
    case GgufValueType::F32: return 4;
    case GgufValueType::U64:
    case GgufValueType::I64:
    case GgufValueType::F64: return 8;
    case GgufValueType::String:
    case GgufValueType::Array: return 0;
  }
  return 0;
}

bool known_value_type(uint32_t code) { return code <= uint32_t(GgufValueType::F64); }

constexpr uint64_t kReserveBound = 1 << 16;

template <class T>
T load(const uint8_t* at) {
  T value;
  std::memcpy(&value, at, sizeof(T));  // GGUF is little-endian, as is every host we build for
  return value;
}

bool is_integer_type(GgufValueType type) {
  switch (type) {
    case GgufValueType::U8:
    case GgufValueType::I8:
    case GgufValueType::U16:
    case GgufValueType::I16:
    case GgufValueType::U32:
    case GgufValueType::I32:
    case GgufValueType::U64:
    case GgufValueType::I64: return true;
    default: return false;
  }
}

// An integer element at `at` of integer type `type`, widened: signed types into `as_signed`,
// unsigned into `as_unsigned`; `negative` says which one holds it.
struct Integer {
  bool negative = false;
  int64_t as_signed = 0;
  uint64_t as_unsigned = 0;
};
Integer load_integer(GgufValueType type, const uint8_t* at) {
  Integer out;
  int64_t signed_value = 0;
  switch (type) {
    case GgufValueType::U8: out.as_unsigned = load<uint8_t>(at); return out;
    case GgufValueType::U16: out.as_unsigned = load<uint16_t>(at); return out;
    case GgufValueType::U32: out.as_unsigned = load<uint32_t>(at); return out;
    case GgufValueType::U64: out.as_unsigned = load<uint64_t>(at); return out;
    case GgufValueType::I8: signed_value = load<int8_t>(at); break;
    case GgufValueType::I16: signed_value = load<int16_t>(at); break;
    case GgufValueType::I32: signed_value = load<int32_t>(at); break;
    case GgufValueType::I64: signed_value = load<int64_t>(at); break;
    default: break;
  }
  out.negative = signed_value < 0;
  out.as_signed = signed_value;
  out.as_unsigned = out.negative ? 0 : uint64_t(signed_value);
  return out;
}

// Reads the header front to back; every read checks the bytes are there first.
class Cursor {
 public:
  Cursor(const GgufFile& file, const uint8_t* base, uint64_t size) : file_(file), base_(base), size_(size) {}

  uint64_t position() const { return at_; }
  uint64_t remaining() const { return size_ - at_; }
  // `what` says what was being read, for the error when the file ends first.
  const uint8_t* take(uint64_t bytes, const std::string& what) {
    if (bytes > remaining())
      throw Error(file_.label() + ": " + what + " needs " + std::to_string(bytes) + " bytes at offset " +
                  std::to_string(at_) + " but the file has " + std::to_string(remaining()) +
                  " left (truncated, or a length that lies)");
    const uint8_t* out = base_ + at_;
    at_ += bytes;
    return out;
  }
  uint32_t u32(const std::string& what) { return load<uint32_t>(take(4, what)); }
  uint64_t u64(const std::string& what) { return load<uint64_t>(take(8, what)); }
  std::string_view string(const std::string& what) {
    const uint64_t length = u64(what + " (its length)");
    if (length > remaining())
      throw Error(file_.label() + ": " + what + " claims " + std::to_string(length) + " bytes at offset " +
                  std::to_string(at_) + " but the file has " + std::to_string(remaining()) +
                  " left (truncated, or a length that lies)");
    return {reinterpret_cast<const char*>(take(length, what)), size_t(length)};
  }

 private:
  const GgufFile& file_;
  const uint8_t* base_;
  uint64_t size_;
  uint64_t at_ = 0;
};

std::string value_type_text(uint32_t code) {
  if (known_value_type(code)) return std::string(gguf_value_type_name(GgufValueType(code)));
  return "unknown type " + std::to_string(code);
}

}  // namespace

std::string_view gguf_value_type_name(GgufValueType type) {
  switch (type) {
    case GgufValueType::U8: return "uint8";
    case GgufValueType::I8: return "int8";
    case GgufValueType::U16: return "uint16";
    case GgufValueType::I16: return "int16";
    case GgufValueType::U32: return "uint32";
    case GgufValueType::I32: return "int32";
    case GgufValueType::F32: return "float32";
    case GgufValueType::Bool: return "bool";
    case GgufValueType::String: return "string";
    case GgufValueType::Array: return "array";
    case GgufValueType::U64: return "uint64";
    case GgufValueType::I64: return "int64";
    case GgufValueType::F64: return "float64";
  }
  return "?";
}

bool GgufValue::is_integer() const { return is_integer_type(type); }
bool GgufValue::is_number() const {
  return is_integer() || type == GgufValueType::F32 || type == GgufValueType::F64;
}

int64_t GgufTensor::elements() const {
  int64_t count = 1;
  for (int64_t dim : dims) count *= dim;  // checked not to overflow when the file was parsed
  return count;
}

// ---- GgufFile ----

GgufFile GgufFile::open(const fs::path& path) {
  GgufFile file;
  file.path_ = path;
  file.label_ = path.string();
  file.bytes_ = MappedFile::map(path, file.label_);
  file.parse();
  return file;
}

GgufFile GgufFile::from_bytes(std::vector<uint8_t> bytes, std::string label) {
  GgufFile file;
  file.path_ = label;
  file.label_ = std::move(label);
  file.bytes_ = MappedFile::hold(std::move(bytes));
  file.parse();
  return file;
}

void GgufFile::fail_key(std::string_view key, const std::string& what) const {
  throw Error(label_ + ": key " + in_quotes(key) + ": " + what);
}

void GgufFile::fail_tensor(std::string_view name, const std::string& what) const {
  throw Error(label_ + ": tensor " + in_quotes(name) + ": " + what);
}

void GgufFile::read_tensor(const GgufTensor& tensor, uint64_t begin, uint64_t count, uint8_t* out) const {
  if (begin > tensor.nbytes || count > tensor.nbytes - begin)
    fail_tensor(tensor.name, "read of bytes [" + std::to_string(begin) + ", +" + std::to_string(count) + ") past its " +
                                 std::to_string(tensor.nbytes) + " bytes");
  const uint64_t at = uint64_t(tensor.data - bytes_.data()) + begin;
  if (!bytes_.is_mapped()) {
    if (count) std::memcpy(out, bytes_.data() + at, count);
    return;
  }
  read_file_range(
      path_, at, count, [&](uint64_t done, std::vector<iovec>& pieces) { pieces.push_back({out + done, size_t(count - done)}); },
      label_ + ": tensor " + in_quotes(tensor.name));
}

void GgufFile::read_tensor_rows(const GgufTensor& tensor, uint64_t first_row, uint64_t rows, uint64_t row_bytes,
                                uint8_t* out, uint64_t out_stride) const {
  if (row_bytes == 0 || tensor.nbytes % row_bytes != 0)
    fail_tensor(tensor.name, "rows of " + std::to_string(row_bytes) + " bytes do not divide its " +
                                 std::to_string(tensor.nbytes) + " bytes");
  const uint64_t total_rows = tensor.nbytes / row_bytes;
  if (first_row > total_rows || rows > total_rows - first_row)
    fail_tensor(tensor.name, "read of rows [" + std::to_string(first_row) + ", +" + std::to_string(rows) + ") of " +
                                 std::to_string(row_bytes) + " bytes past its " + std::to_string(tensor.nbytes) +
                                 " bytes");
  const uint64_t at = uint64_t(tensor.data - bytes_.data()) + first_row * row_bytes;
  if (!bytes_.is_mapped()) {
    for (uint64_t r = 0; r < rows; ++r) std::memcpy(out + r * out_stride, bytes_.data() + at + r * row_bytes, row_bytes);
    return;
  }
  // Each preadv scatters up to IOV_MAX rows straight into place: no bounce buffer.
  read_file_range(
      path_, at, rows * row_bytes,
      [&](uint64_t done, std::vector<iovec>& pieces) {
        // From byte `done` of the rows: the rest of its row, then whole rows.
        const uint64_t row = done / row_bytes, into = done % row_bytes;
        for (uint64_t r = row; r < rows && pieces.size() < uint64_t(IOV_MAX); ++r) {
          const uint64_t skip = r == row ? into : 0;
          pieces.push_back({out + r * out_stride + skip, size_t(row_bytes - skip)});
        }
      },
      label_ + ": tensor " + in_quotes(tensor.name));
}

void GgufFile::parse() {
  Cursor in(*this, bytes_.data(), bytes_.size());
  const uint8_t* magic = in.take(4, "the GGUF magic");
  if (std::memcmp(magic, "GGUF", 4) != 0) {
    std::string seen;
    for (int i = 0; i < 4; ++i) seen += (magic[i] >= 0x20 && magic[i] < 0x7f) ? char(magic[i]) : '?';
    throw Error(label_ + ": not a GGUF file (it starts with \"" + seen + "\", not \"GGUF\")");
  }
  version_ = in.u32("the GGUF version");
  if (version_ == 1) throw Error(label_ + ": GGUF version 1 is not supported (versions 2 and 3 are; convert it again)");
  if (version_ != 2 && version_ != 3) {
    // A big-endian file reads as a version with its low half zero (3 becomes 0x03000000).
    const bool swapped = (version_ & 0xffffu) == 0;
    throw Error(label_ + ": GGUF version " + std::to_string(version_) + " is not supported (versions 2 and 3 are" +
                (swapped ? "; this looks like a big-endian file, which is not supported)" : ")"));
  }
  const uint64_t tensor_count = in.u64("the tensor count");
  const uint64_t kv_count = in.u64("the key/value count");
  // Every key/value takes at least 13 bytes (key length, a 1-byte key, type, a 1-byte value) and
  // every tensor info 24 (name length, dimension count, type, offset): counts beyond what the
  // file can hold are lies, refused before anything is allocated for them.
  if (kv_count > in.remaining() / 13)
    throw Error(label_ + ": key/value count " + std::to_string(kv_count) + " cannot fit in the " +
                std::to_string(in.remaining()) + " bytes after the header");
  if (tensor_count > in.remaining() / 24)
    throw Error(label_ + ": tensor count " + std::to_string(tensor_count) + " cannot fit in the " +
                std::to_string(in.remaining()) + " bytes after the header");

  // Reserved up to a bound: a count the file could hold may still be far beyond what it does.
  keys_.reserve(size_t(std::min<uint64_t>(kv_count, kReserveBound)));
  for (uint64_t i = 0; i < kv_count; ++i) {
    const std::string where = "key " + std::to_string(i) + " of " + std::to_string(kv_count);
    const std::string_view key_view = in.string(where);
    if (key_view.empty()) throw Error(label_ + ": " + where + " is an empty string");
    std::string key(key_view);
    if (values_.count(key)) fail_key(key, "appears more than once");
    const std::string quoted = "key " + in_quotes(key);
    const uint32_t type_code = in.u32(quoted + " (its type)");
    if (!known_value_type(type_code)) fail_key(key, "has unknown value type " + std::to_string(type_code));
    GgufValue value;
    value.type = GgufValueType(type_code);
    if (value.type == GgufValueType::String) {
      value.text = in.string(quoted);
      value.data = reinterpret_cast<const uint8_t*>(value.text.data());
    } else if (value.type == GgufValueType::Array) {
      const uint32_t element_code = in.u32(quoted + " (its element type)");
      if (!known_value_type(element_code))
        fail_key(key, "is an array of unknown value type " + std::to_string(element_code));
      value.element_type = GgufValueType(element_code);
      if (value.element_type == GgufValueType::Array) fail_key(key, "is an array of arrays, which is not supported");
      value.count = in.u64(quoted + " (its element count)");
      if (value.count > kGgufMaxArrayElements)
        fail_key(key, "claims " + std::to_string(value.count) + " elements (at most " +
                          std::to_string(kGgufMaxArrayElements) + ")");
      if (value.element_type == GgufValueType::String) {
        if (value.count > in.remaining() / 8)
          fail_key(key, "claims " + std::to_string(value.count) + " strings but only " +
                            std::to_string(in.remaining()) + " bytes are left in the file");
        value.strings.reserve(size_t(std::min<uint64_t>(value.count, kReserveBound)));
        for (uint64_t e = 0; e < value.count; ++e)
          value.strings.push_back(in.string(quoted + " element " + std::to_string(e)));
      } else {
        const uint64_t element = scalar_bytes(value.element_type);
        if (value.count > in.remaining() / element)
          fail_key(key, "claims " + std::to_string(value.count) + " " +
                            std::string(gguf_value_type_name(value.element_type)) + " elements but only " +
                            std::to_string(in.remaining()) + " bytes are left in the file");
        value.data = in.take(value.count * element, quoted);
        if (value.element_type == GgufValueType::Bool)
          for (uint64_t e = 0; e < value.count; ++e)
            if (value.data[e] > 1)
              fail_key(key, "element " + std::to_string(e) + " is bool " + std::to_string(value.data[e]) +
                                " (a bool is 0 or 1)");
      }
    } else {
      value.data = in.take(scalar_bytes(value.type), quoted);
      if (value.type == GgufValueType::Bool && value.data[0] > 1)
        fail_key(key, "is bool " + std::to_string(value.data[0]) + " (a bool is 0 or 1)");
    }
    keys_.push_back(key);
    values_.emplace(std::move(key), std::move(value));
  }

  if (const GgufValue* alignment = find("general.alignment")) {
    if (alignment->type != GgufValueType::U32)
      fail_key("general.alignment", "must be a uint32, not a " +
                                        value_type_text(uint32_t(alignment->type)));
    alignment_ = load<uint32_t>(alignment->data);
    if (alignment_ == 0 || (alignment_ & (alignment_ - 1)) != 0)
      fail_key("general.alignment", std::to_string(alignment_) + " is not a power of two");
  }

  tensors_.reserve(size_t(std::min<uint64_t>(tensor_count, kReserveBound)));
  for (uint64_t i = 0; i < tensor_count; ++i) {
    const std::string where = "tensor info " + std::to_string(i) + " of " + std::to_string(tensor_count);
    const std::string_view name_view = in.string(where + " (its name)");
    if (name_view.empty()) throw Error(label_ + ": " + where + " has an empty name");
    GgufTensor tensor;
    tensor.name = std::string(name_view);
    const std::string& name = tensor.name;
    if (name.size() > kGgufMaxTensorName)
      fail_tensor(name, "name is " + std::to_string(name.size()) + " bytes (ggml allows at most " +
                            std::to_string(kGgufMaxTensorName) + ")");
    if (tensor_index_.count(name)) fail_tensor(name, "appears more than once");
    const std::string quoted = "tensor " + in_quotes(name);
    const uint32_t n_dims = in.u32(quoted + " (its dimension count)");
    if (n_dims > kGgufMaxDims)
      fail_tensor(name, "has " + std::to_string(n_dims) + " dimensions (at most " + std::to_string(kGgufMaxDims) + ")");
    int64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim = in.u64(quoted + " (dimension " + std::to_string(d) + ")");
      if (dim > uint64_t(std::numeric_limits<int64_t>::max()))
        fail_tensor(name, "dimension " + std::to_string(d) + " is " + std::to_string(dim) + ", beyond int64");
      tensor.dims.push_back(int64_t(dim));
      if (__builtin_mul_overflow(elements, int64_t(dim), &elements))
        fail_tensor(name, "element count overflows 64 bits");
    }
    const uint32_t type_code = in.u32(quoted + " (its type)");
    std::optional<GgmlType> type = ggml_type_from_code(type_code);
    if (!type) fail_tensor(name, "has unknown ggml type " + std::to_string(type_code));
    tensor.type = *type;
    const GgmlTypeInfo& info = ggml_type_info(tensor.type);
    const int64_t row = tensor.row_length();
    if (row % info.block_elements != 0)
      fail_tensor(name, "rows of " + std::to_string(row) + " elements are not a whole number of " +
                            std::string(info.name) + " blocks (" + std::to_string(info.block_elements) + " elements)");
    // elements / block * block bytes, each step checked.
    std::optional<uint64_t> bytes = ggml_row_bytes(tensor.type, elements);
    if (!bytes) fail_tensor(name, "byte size overflows 64 bits");
    tensor.nbytes = *bytes;
    tensor.offset = in.u64(quoted + " (its offset)");
    tensor_index_.emplace(name, tensors_.size());
    tensors_.push_back(std::move(tensor));
  }

  // The data section starts at the next multiple of the alignment; ggml's writer puts the
  // tensors there in order, each padded to the alignment.
  uint64_t data_offset = in.position();
  if (!tensors_.empty()) {
    const uint64_t padding = (alignment_ - data_offset % alignment_) % alignment_;
    if (padding > in.remaining())
      throw Error(label_ + ": the data section would start at offset " + std::to_string(data_offset + padding) +
                  ", past the end of the file (" + std::to_string(bytes_.size()) + " bytes)");
    data_offset += padding;
  }
  data_offset_ = data_offset;
  const uint64_t data_bytes = bytes_.size() - data_offset;
  uint64_t expected = 0;
  for (GgufTensor& tensor : tensors_) {
    if (tensor.offset != expected) {
      const std::string why = tensor.offset % alignment_ != 0
                                  ? " (not a multiple of the alignment " + std::to_string(alignment_) + ")"
                                  : tensor.offset < expected ? " (it overlaps the tensor before it)"
                                                             : " (a gap after the tensor before it)";
      fail_tensor(tensor.name, "offset " + std::to_string(tensor.offset) + " is not where it belongs, " +
                                   std::to_string(expected) + why);
    }
    if (tensor.nbytes > data_bytes || tensor.offset > data_bytes - tensor.nbytes)
      fail_tensor(tensor.name, "bytes [" + std::to_string(tensor.offset) + ", +" + std::to_string(tensor.nbytes) +
                                   ") run past the end of the data section (" + std::to_string(data_bytes) +
                                   " bytes; the file may be truncated)");
    tensor.data = bytes_.data() + data_offset + tensor.offset;
    // The next tensor starts at this one's end rounded up to the alignment.
    const uint64_t end = tensor.offset + tensor.nbytes;
    const uint64_t rounded = end + (alignment_ - end % alignment_) % alignment_;
    if (rounded < end) fail_tensor(tensor.name, "padded end overflows 64 bits");
    expected = rounded;
  }
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = values_.find(key);
  return it == values_.end() ? nullptr : &it->second;
}

const GgufTensor* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufValue& GgufFile::require(std::string_view key) const {
  const GgufValue* value = find(key);
  if (!value) fail_key(key, "is missing");
  return *value;
}

namespace {

std::string type_of(const GgufValue& value) {
  if (value.type == GgufValueType::Array)
    return "array of " + std::string(gguf_value_type_name(value.element_type));
  return std::string(gguf_value_type_name(value.type));
}

}  // namespace

std::string_view GgufFile::string(std::string_view key) const {
  const GgufValue& value = require(key);
  if (value.type != GgufValueType::String) fail_key(key, "must be a string, not a " + type_of(value));
  return value.text;
}

uint64_t GgufFile::unsigned_integer(std::string_view key) const {
  const GgufValue& value = require(key);
  if (!value.is_integer()) fail_key(key, "must be an integer, not a " + type_of(value));
  const Integer number = load_integer(value.type, value.data);
  if (number.negative) fail_key(key, "is " + std::to_string(number.as_signed) + "; it must not be negative");
  return number.as_unsigned;
}

int64_t GgufFile::signed_integer(std::string_view key) const {
  const GgufValue& value = require(key);
  if (!value.is_integer()) fail_key(key, "must be an integer, not a " + type_of(value));
  const Integer number = load_integer(value.type, value.data);
  if (number.negative) return number.as_signed;
  if (number.as_unsigned > uint64_t(std::numeric_limits<int64_t>::max()))
    fail_key(key, "is " + std::to_string(number.as_unsigned) + ", beyond int64");
  return int64_t(number.as_unsigned);
}

double GgufFile::number(std::string_view key) const {
  const GgufValue& value = require(key);
  if (value.type == GgufValueType::F32) return load<float>(value.data);
  if (value.type == GgufValueType::F64) return load<double>(value.data);
  if (!value.is_integer()) fail_key(key, "must be a number, not a " + type_of(value));
  const Integer number = load_integer(value.type, value.data);
  return number.negative ? double(number.as_signed) : double(number.as_unsigned);
}

bool GgufFile::boolean(std::string_view key) const {
  const GgufValue& value = require(key);
  if (value.type != GgufValueType::Bool) fail_key(key, "must be a bool, not a " + type_of(value));
  return value.data[0] != 0;
}

std::vector<int64_t> GgufFile::integer_array(std::string_view key) const {
  const GgufValue& value = require(key);
  if (value.type != GgufValueType::Array ||
      (!is_integer_type(value.element_type) && value.element_type != GgufValueType::Bool))
    fail_key(key, "must be an array of integers or bools, not a " + type_of(value));
  const uint64_t element = scalar_bytes(value.element_type);
  std::vector<int64_t> out;
  out.reserve(size_t(value.count));
  for (uint64_t e = 0; e < value.count; ++e) {
    const uint8_t* at = value.data + e * element;
    if (value.element_type == GgufValueType::Bool) {
      out.push_back(at[0]);
      continue;
    }
    const Integer number = load_integer(value.element_type, at);
    if (!number.negative && number.as_unsigned > uint64_t(std::numeric_limits<int64_t>::max()))
      fail_key(key, "element " + std::to_string(e) + " is " + std::to_string(number.as_unsigned) + ", beyond int64");
    out.push_back(number.negative ? number.as_signed : int64_t(number.as_unsigned));
  }
  return out;
}

std::vector<float> GgufFile::float_array(std::string_view key) const {
  const GgufValue& value = require(key);
  if (value.type != GgufValueType::Array ||
      (value.element_type != GgufValueType::F32 && value.element_type != GgufValueType::F64))
    fail_key(key, "must be an array of float32 or float64, not a " + type_of(value));
  std::vector<float> out;
  out.reserve(size_t(value.count));
  for (uint64_t e = 0; e < value.count; ++e)
    out.push_back(value.element_type == GgufValueType::F32 ? load<float>(value.data + 4 * e)
                                                           : float(load<double>(value.data + 8 * e)));
  return out;
}

const std::vector<std::string_view>& GgufFile::string_array(std::string_view key) const {
  const GgufValue& value = require(key);
  if (value.type != GgufValueType::Array || value.element_type != GgufValueType::String)
    fail_key(key, "must be an array of strings, not a " + type_of(value));
  return value.strings;
}

// ---- GgufModelFiles ----

namespace {

bool is_regular(const fs::path& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

// "NAME-00001-of-00003.gguf" -> (NAME, 1, 3); nullopt for another name.
struct SplitName {
  std::string prefix;
  uint64_t number = 0, count = 0;
};
std::optional<SplitName> parse_split_name(const std::string& filename) {
  static constexpr std::string_view kSuffix = ".gguf";
  // -NNNNN-of-NNNNN.gguf is 20 characters; llama.cpp writes five digits, so that is what we read.
  constexpr size_t kTail = 1 + 5 + 4 + 5 + kSuffix.size();
  if (filename.size() <= kTail) return std::nullopt;
  const std::string tail = filename.substr(filename.size() - kTail);
  auto digits = [&](size_t from) -> std::optional<uint64_t> {
    uint64_t value = 0;
    for (size_t i = from; i < from + 5; ++i) {
      if (tail[i] < '0' || tail[i] > '9') return std::nullopt;
      value = value * 10 + uint64_t(tail[i] - '0');
    }
    return value;
  };
  if (tail[0] != '-' || tail.compare(6, 4, "-of-") != 0 || tail.compare(15, kSuffix.size(), kSuffix) != 0)
    return std::nullopt;
  auto number = digits(1), count = digits(10);
  if (!number || !count) return std::nullopt;
  return SplitName{filename.substr(0, filename.size() - kTail), *number, *count};
}

std::string split_file_name(const std::string& prefix, uint64_t number, uint64_t count) {
  char tail[64];
  std::snprintf(tail, sizeof tail, "-%05llu-of-%05llu.gguf", static_cast<unsigned long long>(number),
                static_cast<unsigned long long>(count));
  return prefix + tail;
}

std::vector<fs::path> gguf_files_in(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec))
    if (entry.path().extension() == ".gguf" && is_regular(entry.path())) out.push_back(entry.path());
  if (ec) throw Error(dir.string() + ": cannot list directory: " + ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

bool GgufModelFiles::looks_like_gguf(const fs::path& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    if (fs::exists(path / "config.json", ec)) return false;
    return !gguf_files_in(path).empty();
  }
  return path.extension() == ".gguf";
}

fs::path GgufModelFiles::resolve(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return path;
  std::vector<fs::path> models;  // single files and first splits
  for (const fs::path& file : gguf_files_in(path)) {
    std::optional<SplitName> split = parse_split_name(file.filename().string());
    if (!split || split->number == 1) models.push_back(file);
  }
  if (models.empty()) throw Error(path.string() + ": no .gguf model file (nor the first file of a split set) here");
  if (models.size() > 1) {
    std::string list;
    for (const fs::path& model : models) list += (list.empty() ? "" : ", ") + model.filename().string();
    throw Error(path.string() + ": holds more than one GGUF model (" + list + "); name the file to use");
  }
  return models.front();
}

std::unique_ptr<GgufModelFiles> GgufModelFiles::open(const fs::path& path) {
  const fs::path first_path = resolve(path);
  auto model = std::make_unique<GgufModelFiles>();
  model->files_.push_back(std::make_unique<GgufFile>(GgufFile::open(first_path)));
  const GgufFile& first = *model->files_.front();
  uint64_t count = 1;
  if (first.find("split.count")) {
    count = first.unsigned_integer("split.count");
    if (count == 0) first.fail_key("split.count", "is 0");
    const uint64_t number = first.unsigned_integer("split.no");
    if (number != 0)
      first.fail_key("split.no", "is " + std::to_string(number) + ": this is not the first file of its split set (open " +
                                     "the one numbered 00001)");
  }
  if (count > 1) {
    std::optional<SplitName> split = parse_split_name(first_path.filename().string());
    if (!split || split->number != 1 || split->count != count)
      first.fail_key("split.count", "is " + std::to_string(count) + " but the file name is not " +
                                        split_file_name("NAME", 1, count) + ", so the other files cannot be found");
    for (uint64_t i = 1; i < count; ++i) {
      const fs::path part = first_path.parent_path() / split_file_name(split->prefix, i + 1, count);
      if (!is_regular(part))
        throw Error(first_path.string() + ": split file " + std::to_string(i + 1) + " of " + std::to_string(count) +
                    " is missing: " + part.string());
      auto file = std::make_unique<GgufFile>(GgufFile::open(part));
      const uint64_t its_count = file->unsigned_integer("split.count"), its_number = file->unsigned_integer("split.no");
      if (its_count != count)
        file->fail_key("split.count", "is " + std::to_string(its_count) + " but the first file says " + std::to_string(count));
      if (its_number != i)
        file->fail_key("split.no", "is " + std::to_string(its_number) + " but the file name says " + std::to_string(i));
      model->files_.push_back(std::move(file));
    }
  }
  for (size_t f = 0; f < model->files_.size(); ++f) {
    const GgufFile& file = *model->files_[f];
    for (size_t t = 0; t < file.tensors().size(); ++t) {
      const std::string& name = file.tensors()[t].name;
      auto [it, inserted] = model->tensors_.emplace(name, std::make_pair(f, t));
      if (!inserted)
        file.fail_tensor(name, "is also in " + model->files_[it->second.first]->label() +
                                   " (a tensor must live in exactly one file of a split set)");
    }
  }
  if (count > 1) {
    const uint64_t declared = first.unsigned_integer("split.tensors.count");
    if (declared != model->tensors_.size())
      first.fail_key("split.tensors.count", "is " + std::to_string(declared) + " but the " + std::to_string(count) +
                                                " files hold " + std::to_string(model->tensors_.size()) + " tensors");
  }
  return model;
}

const GgufTensor* GgufModelFiles::find(std::string_view name) const {
  if (auto copy = resident_.find(name); copy != resident_.end()) return &copy->second;
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return nullptr;
  return &files_[it->second.first]->tensors()[it->second.second];
}

const GgufFile& GgufModelFiles::file_of(std::string_view name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw Error(first().label() + ": no tensor " + in_quotes(name) + " in this model");
  return *files_[it->second.first];
}

std::vector<std::string> GgufModelFiles::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, where] : tensors_) out.push_back(name);
  return out;
}

uint64_t GgufModelFiles::total_file_bytes() const {
  uint64_t total = 0;
  for (const auto& file : files_) total += file->file_bytes();
  return total;
}

uint64_t GgufModelFiles::make_resident(const std::vector<std::string>& names,
                                      const std::function<void(uint64_t, uint64_t)>& progress) {
  return make_resident(names, {}, progress);
}

uint64_t GgufModelFiles::make_resident(const std::vector<std::string>& names, const std::vector<RowPair>& row_pairs,
                                      const std::function<void(uint64_t, uint64_t)>& progress) {
  if (arena_) throw Error(first().label() + ": make_resident: the tensors were already copied once");
  struct Pending {
    const GgufFile* file;
    const GgufTensor* tensor;
    uint64_t bytes;  // of the copy (both tensors, for a pair)
    uint8_t* copy = nullptr;
    // A RowPair: `tensor` is its first tensor, `second` the other; rows are row_bytes long.
    const GgufFile* second_file = nullptr;
    const GgufTensor* second = nullptr;
    uint64_t row_bytes = 0;
  };
  std::vector<Pending> pending;
  std::set<std::string_view> seen;
  uint64_t total = 0, capacity = 0;
  auto require = [&](const std::string& name) {
    const GgufTensor* tensor = find(name);
    if (!tensor) throw Error(first().label() + ": make_resident: no tensor " + in_quotes(name) + " in this model");
    return tensor;
  };
  auto add = [&](Pending item) {
    total += item.bytes;
    capacity += (item.bytes + 63) / 64 * 64;  // ResidentArena aligns every copy to 64 bytes
    pending.push_back(item);
  };
  for (const RowPair& pair : row_pairs) {
    if (pair.first == pair.second)
      throw Error(first().label() + ": make_resident: tensor " + in_quotes(pair.first) +
                  " cannot be interleaved with itself");
    for (const std::string* name : {&pair.first, &pair.second})
      if (!seen.insert(*name).second)
        throw Error(first().label() + ": make_resident: tensor " + in_quotes(*name) + " is in more than one copy");
    const GgufTensor *a = require(pair.first), *b = require(pair.second);
    if (a->type != b->type || a->shape() != b->shape() || a->nbytes == 0)
      throw Error(first().label() + ": make_resident: cannot interleave the rows of " + in_quotes(a->name) + " (" +
                  shape_to_string(a->shape()) + " " + std::string(ggml_type_name(a->type)) + ") and " +
                  in_quotes(b->name) + " (" + shape_to_string(b->shape()) + " " + std::string(ggml_type_name(b->type)) +
                  "): they need one type and one non-empty shape");
    const uint64_t row_bytes = ggml_row_bytes(a->type, a->row_length()).value();  // whole blocks: checked on open
    add({&file_of(a->name), a, 2 * a->nbytes, nullptr, &file_of(b->name), b, row_bytes});
  }
  for (const std::string& name : names) {
    if (!seen.insert(name).second) continue;
    const GgufTensor* tensor = require(name);
    add({&file_of(name), tensor, tensor->nbytes});
  }
  if (pending.empty()) return 0;
  // In file order, so the reads stream through each file once.
  std::sort(pending.begin(), pending.end(), [](const Pending& a, const Pending& b) {
    return a.file != b.file ? a.file->path() < b.file->path() : a.tensor->offset < b.tensor->offset;
  });
  auto arena = std::make_unique<ResidentArena>(capacity);
  struct Piece {
    const Pending* item;
    uint64_t begin, count;  // bytes of the tensor; for a pair, of each of its two tensors (whole rows)
  };
  std::vector<Piece> pieces;
  for (Pending& item : pending) {
    item.copy = arena->allocate(item.bytes);
    const uint64_t bytes = item.row_bytes ? item.bytes / 2 : item.bytes;
    const uint64_t step = item.row_bytes ? std::max<uint64_t>(1, kResidentCopyPieceBytes / 2 / item.row_bytes) * item.row_bytes
                                         : kResidentCopyPieceBytes;
    for (uint64_t begin = 0; begin < bytes; begin += step) pieces.push_back({&item, begin, std::min(step, bytes - begin)});
  }
  const uint64_t done = copy_pieces_in_parallel(
      pieces.size(), total,
      [&](size_t index) {
        const Piece& piece = pieces[index];
        const Pending& item = *piece.item;
        if (!item.row_bytes) {
          item.file->read_tensor(*item.tensor, piece.begin, piece.count, item.copy + piece.begin);
          return piece.count;
        }
        const uint64_t row = piece.begin / item.row_bytes, rows = piece.count / item.row_bytes;
        uint8_t* out = item.copy + 2 * piece.begin;
        item.file->read_tensor_rows(*item.tensor, row, rows, item.row_bytes, out, 2 * item.row_bytes);
        item.second_file->read_tensor_rows(*item.second, row, rows, item.row_bytes, out + item.row_bytes,
                                           2 * item.row_bytes);
        return 2 * piece.count;
      },
      progress);
  for (const Pending& item : pending) {
    if (item.row_bytes) {
      interleaved_.emplace(item.tensor->name, InterleavedRows{item.copy, item.row_bytes, false, item.second->name});
      interleaved_.emplace(item.second->name, InterleavedRows{item.copy, item.row_bytes, true, item.tensor->name});
      continue;
    }
    GgufTensor copy = *item.tensor;
    copy.data = item.copy;
    resident_.emplace(copy.name, std::move(copy));
  }
  arena_ = std::move(arena);
  return done;
}

std::optional<GgufModelFiles::InterleavedRows> GgufModelFiles::interleaved_rows(std::string_view name) const {
  auto it = interleaved_.find(name);
  if (it == interleaved_.end()) return std::nullopt;
  return it->second;
}

std::span<const uint8_t> GgufModelFiles::resident_memory() const {
  if (!arena_) return {};
  return {arena_->data(), size_t(arena_->used())};
}

}  // namespace inkling
