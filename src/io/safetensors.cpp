// Strict safetensors reading: mmap + header validation (see safetensors.h for the rules).
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <limits>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

namespace inkling {
namespace {

using nlohmann::json;

std::string in_quotes(std::string_view text) {
  std::string out = "\"";
  out += text;
  out += '"';
  return out;
}

[[noreturn]] void fail_file(const std::string& label, const std::string& what) {
  throw Error(label + ": " + what);
}

[[noreturn]] void fail_tensor(const std::string& label, std::string_view tensor,
                              const std::string& what) {
  throw Error(label + ": tensor " + in_quotes(tensor) + ": " + what);
}

std::string offsets_to_string(uint64_t begin, uint64_t end) {
  std::string out = "[";  // appended, not "[" + std::string: GCC 12 warns -Wrestrict there (PR 105329)
  return out.append(std::to_string(begin)).append(", ").append(std::to_string(end)).append("]");
}

// A JSON integer >= 0 that fits `limit`, or nullopt (floats, negatives, bools, too large).
std::optional<uint64_t> non_negative_integer(const json& value, uint64_t limit) {
  if (value.is_number_unsigned()) {
    uint64_t number = value.get<uint64_t>();
    if (number <= limit) return number;
    return std::nullopt;
  }
  if (value.is_number_integer()) {  // signed storage: nlohmann uses it for negatives only
    int64_t number = value.get<int64_t>();
    if (number >= 0 && uint64_t(number) <= limit) return uint64_t(number);
  }
  return std::nullopt;
}

// Parses the header text, rejecting duplicate keys in the top-level object (nlohmann would keep
// the last one silently; two readers could then disagree about which entry is meant).
json parse_header_json(const std::string& label, const char* begin, const char* end) {
  struct KeyCheck : nlohmann::json_sax<json> {
    int depth = 0;
    std::set<std::string> seen;  // keys of the top-level object
    std::string duplicate;
    bool null() override { return true; }
    bool boolean(bool) override { return true; }
    bool number_integer(number_integer_t) override { return true; }
    bool number_unsigned(number_unsigned_t) override { return true; }
    bool number_float(number_float_t, const string_t&) override { return true; }
    bool string(string_t&) override { return true; }
    bool binary(binary_t&) override { return true; }
    bool start_object(std::size_t) override {
      ++depth;
      return true;
    }
    bool key(string_t& key) override {
      if (depth == 1 && !seen.insert(key).second) {
        duplicate = key;
        return false;
      }
      return true;
    }
    bool end_object() override {
      --depth;
      return true;
    }
    bool start_array(std::size_t) override {
      ++depth;
      return true;
    }
    bool end_array() override {
      --depth;
      return true;
    }
    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
      return false;
    }
  };

  json header;
  try {
    header = json::parse(begin, end);
  } catch (const json::exception& error) {
    // error.what() reads "[json.exception.parse_error.101] parse error at line 1, column 5: ...".
    std::string detail = error.what();
    size_t at = detail.find("] ");
    if (at != std::string::npos) detail = detail.substr(at + 2);
    fail_file(label, "header is not valid JSON: " + detail);
  }
  if (!header.is_object()) {
    fail_file(label, std::string("header is not a JSON object (it is a JSON ") + header.type_name() +
                         ")");
  }
  KeyCheck check;
  json::sax_parse(begin, end, &check);
  if (!check.duplicate.empty()) {
    if (check.duplicate == "__metadata__")
      fail_file(label, "header lists \"__metadata__\" more than once");
    fail_tensor(label, check.duplicate, "appears more than once in the header");
  }
  return header;
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  SafetensorsFile file;
  file.path_ = path;
  file.bytes_ = MappedFile::map(path, path.string());
  file.parse(path.string());
  return file;
}

SafetensorsFile SafetensorsFile::from_bytes(std::vector<uint8_t> bytes, std::string label) {
  SafetensorsFile file;
  file.path_ = label;
  file.bytes_ = MappedFile::hold(std::move(bytes));
  file.parse(std::move(label));
  return file;
}

void SafetensorsFile::parse(std::string label) {
  const uint64_t size = bytes_.size();
  const uint8_t* base = bytes_.data();
  if (size < 8) {
    fail_file(label, "file is " + std::to_string(size) +
                         " bytes, too short for the 8-byte safetensors header length");
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | base[i];  // little-endian
  if (header_len > kMaxSafetensorsHeaderBytes) {
    fail_file(label, "header length " + std::to_string(header_len) + " exceeds the " +
                         std::to_string(kMaxSafetensorsHeaderBytes) + "-byte limit");
  }
  if (header_len > size - 8) {
    fail_file(label, "header length " + std::to_string(header_len) +
                         " runs past the end of the file (" + std::to_string(size) +
                         " bytes; the file may be truncated)");
  }
  const char* text = reinterpret_cast<const char*>(base + 8);
  json header = parse_header_json(label, text, text + header_len);

  const uint64_t data_len = size - 8 - header_len;
  std::vector<TensorEntry> entries;
  std::map<std::string, std::string> metadata;
  entries.reserve(header.size());
  for (auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) {
        fail_file(label, std::string("\"__metadata__\" must be an object of string -> string, not a ") +
                             value.type_name());
      }
      for (auto& [key, item] : value.items()) {
        if (!item.is_string()) {
          fail_file(label, "\"__metadata__\" must be an object of string -> string, but key " +
                               in_quotes(key) + " holds a " + item.type_name());
        }
        metadata.emplace(key, item.get<std::string>());
      }
      continue;
    }
    if (!value.is_object()) {
      fail_tensor(label, name, std::string("entry is not a JSON object (it is a ") +
                                   value.type_name() + ")");
    }
    for (const char* field : {"dtype", "shape", "data_offsets"}) {
      if (!value.contains(field)) fail_tensor(label, name, std::string("missing \"") + field + "\"");
    }
    TensorEntry entry;
    entry.name = name;

    const json& dtype = value["dtype"];
    if (!dtype.is_string()) {
      fail_tensor(label, name, std::string("\"dtype\" must be a string, not a ") + dtype.type_name());
    }
    const std::string dtype_text = dtype.get<std::string>();
    std::optional<DType> parsed_dtype = parse_dtype(dtype_text);
    if (!parsed_dtype) {
      fail_tensor(label, name,
                  "unsupported dtype " + in_quotes(dtype_text) +
                      " (supported: F32, F16, BF16, U8, I8, I16, U16, I32, U32, I64, F8_E4M3)");
    }
    entry.dtype = *parsed_dtype;

    const json& shape = value["shape"];
    if (!shape.is_array()) {
      fail_tensor(label, name, std::string("\"shape\" must be a list of non-negative integers, not a ") +
                                   shape.type_name());
    }
    for (const json& dim : shape) {
      std::optional<uint64_t> parsed =
          non_negative_integer(dim, uint64_t(std::numeric_limits<int64_t>::max()));
      if (!parsed) {
        fail_tensor(label, name,
                    "\"shape\" must be a list of non-negative integers, got " + shape.dump());
      }
      entry.shape.push_back(int64_t(*parsed));
    }

    const json& offsets = value["data_offsets"];
    std::optional<uint64_t> begin, end;
    if (offsets.is_array() && offsets.size() == 2) {
      begin = non_negative_integer(offsets[0], std::numeric_limits<uint64_t>::max());
      end = non_negative_integer(offsets[1], std::numeric_limits<uint64_t>::max());
    }
    if (!begin || !end) {
      fail_tensor(label, name,
                  "\"data_offsets\" must be two non-negative integers [begin, end], got " +
                      offsets.dump());
    }
    entry.begin = *begin;
    entry.end = *end;
    if (entry.begin > entry.end) {
      fail_tensor(label, name, "data_offsets " + offsets_to_string(entry.begin, entry.end) +
                                   " have begin > end");
    }

    const std::string described = "shape " + shape_to_string(entry.shape) + " x " +
                                  std::string(dtype_name(entry.dtype));
    // Like the reference: numel = product of the dims in order, then x dtype size, each step
    // checked. The element count must also fit int64 (TensorView::numel() is int64).
    int64_t numel = 1;
    for (int64_t dim : entry.shape) {
      if (__builtin_mul_overflow(numel, dim, &numel)) {
        fail_tensor(label, name, described + " overflows: its element count does not fit in 64 bits");
      }
    }
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(uint64_t(numel), uint64_t(dtype_size(entry.dtype)), &nbytes)) {
      fail_tensor(label, name, described + " overflows: its byte size does not fit in 64 bits");
    }
    if (nbytes != entry.end - entry.begin) {
      fail_tensor(label, name, described + " needs " + std::to_string(nbytes) +
                                   " bytes but data_offsets span " +
                                   std::to_string(entry.end - entry.begin));
    }
    if (entry.end > data_len) {
      fail_tensor(label, name, "data_offsets " + offsets_to_string(entry.begin, entry.end) +
                                   " run past the end of the data section (" +
                                   std::to_string(data_len) + " bytes; the file may be truncated)");
    }
    entries.push_back(std::move(entry));
  }

  // The entries must tile [0, data_len) exactly, like the reference library requires.
  std::stable_sort(entries.begin(), entries.end(), [](const TensorEntry& a, const TensorEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  const TensorEntry* previous = nullptr;
  for (const TensorEntry& entry : entries) {
    if (entry.begin < covered) {
      fail_tensor(label, entry.name,
                  "data_offsets " + offsets_to_string(entry.begin, entry.end) + " overlap tensor " +
                      in_quotes(previous->name) + " " +
                      offsets_to_string(previous->begin, previous->end));
    }
    if (entry.begin > covered) {
      fail_tensor(label, entry.name,
                  "data_offsets " + offsets_to_string(entry.begin, entry.end) +
                      " leave a hole: bytes [" + std::to_string(covered) + ", " +
                      std::to_string(entry.begin) + ") of the data section belong to no tensor");
    }
    covered = entry.end;
    previous = &entry;
  }
  if (covered != data_len) {
    std::string hole = "bytes [" + std::to_string(covered) + ", " + std::to_string(data_len) +
                       ") at the end of the data section belong to no tensor";
    if (previous) fail_tensor(label, previous->name, hole + " (this is the last tensor)");
    fail_file(label, hole + " (the header lists no tensors)");
  }

  std::map<std::string, size_t, std::less<>> index;
  for (size_t i = 0; i < entries.size(); ++i) index.emplace(entries[i].name, i);

  data_offset_ = 8 + header_len;
  entries_ = std::move(entries);
  index_ = std::move(index);
  metadata_ = std::move(metadata);
}

bool SafetensorsFile::contains(std::string_view name) const { return index_.find(name) != index_.end(); }

std::optional<TensorView> SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  if (it == index_.end()) return std::nullopt;
  const TensorEntry& entry = entries_[it->second];
  TensorView view;
  view.dtype = entry.dtype;
  view.shape = entry.shape;
  view.data = bytes_.data() + data_offset_ + entry.begin;
  view.nbytes = size_t(entry.end - entry.begin);
  return view;
}

void SafetensorsFile::read_tensor(std::string_view name, uint64_t begin, uint64_t count, uint8_t* out) const {
  const TensorView view = get(name);
  if (begin > view.nbytes || count > view.nbytes - begin) {
    fail_tensor(path_.string(), std::string(name), "read of bytes [" + std::to_string(begin) + ", +" +
                                                       std::to_string(count) + ") past its " +
                                                       std::to_string(view.nbytes) + " bytes");
  }
  if (!bytes_.is_mapped()) {
    if (count) std::memcpy(out, view.data + begin, count);
    return;
  }
  read_file_range(
      path_, uint64_t(view.data - bytes_.data()) + begin, count,
      [&](uint64_t done, std::vector<iovec>& pieces) { pieces.push_back({out + done, size_t(count - done)}); },
      path_.string() + ": tensor " + in_quotes(name));
}

void SafetensorsFile::read_tensor_rows(std::string_view name, uint64_t first_row, uint64_t rows, uint64_t row_bytes,
                                       uint8_t* out, uint64_t out_stride) const {
  const TensorView view = get(name);
  if (row_bytes == 0 || view.nbytes % row_bytes != 0)
    fail_tensor(path_.string(), std::string(name), "rows of " + std::to_string(row_bytes) + " bytes do not divide its " +
                                                       std::to_string(view.nbytes) + " bytes");
  if (first_row > view.nbytes / row_bytes || rows > view.nbytes / row_bytes - first_row) {
    fail_tensor(path_.string(), std::string(name), "read of rows [" + std::to_string(first_row) + ", +" +
                                                       std::to_string(rows) + ") of " + std::to_string(row_bytes) +
                                                       " bytes past its " + std::to_string(view.nbytes) + " bytes");
  }
  if (!bytes_.is_mapped()) {
    for (uint64_t r = 0; r < rows; ++r)
      std::memcpy(out + r * out_stride, view.data + (first_row + r) * row_bytes, row_bytes);
    return;
  }
  // Each preadv scatters up to IOV_MAX rows straight into place: no bounce buffer.
  read_file_range(path_, uint64_t(view.data - bytes_.data()) + first_row * row_bytes, rows * row_bytes,
             [&](uint64_t done, std::vector<iovec>& pieces) {
               // From byte `done` of the rows: the rest of its row, then whole rows.
               const uint64_t row = done / row_bytes, into = done % row_bytes;
               for (uint64_t r = row; r < rows && pieces.size() < uint64_t(IOV_MAX); ++r) {
                 const uint64_t skip = r == row ? into : 0;
                 pieces.push_back({out + r * out_stride + skip, size_t(row_bytes - skip)});
               }
             },
             path_.string() + ": tensor " + in_quotes(name));
}

bool SafetensorsFile::read_ahead(std::string_view name) const {
  const TensorView view = get(name);
  if (!bytes_.is_mapped() || view.nbytes == 0) return false;
  const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t first = uintptr_t(view.data) / page * page;
  const uintptr_t last = uintptr_t(view.data) + view.nbytes;
  // Linux reads at most one readahead window per call (max of read_ahead_kb and the device's
  // largest request; often 128 KiB): one call for the whole tensor read only its first window.
  // The calls queue the reads and return (0.17 s for 823 MB from a cold virtual disk here, all
  // of it cached 0.35 s after the first).
  constexpr uintptr_t kPiece = uintptr_t(128) << 10;
  for (uintptr_t at = first; at < last; at += kPiece)
    if (::madvise(reinterpret_cast<void*>(at), std::min(kPiece, last - at), MADV_WILLNEED) != 0) return false;
  return true;
}

TensorView SafetensorsFile::get(std::string_view name) const {
  std::optional<TensorView> view = find(name);
  if (!view) fail_file(path_.string(), "no tensor " + in_quotes(name) + " in this file");
  return *view;
}

}  // namespace inkling
