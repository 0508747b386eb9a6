// safetensors files: strict, zero-copy reading (mmap) and streaming writing.
//
// Reading validates as strictly as the reference `safetensors` library: header length
// (8-byte little-endian prefix, at most 100 MB, inside the file), header is a JSON object,
// every entry has dtype/shape/data_offsets, dtype is supported, shape dims are non-negative,
// numel x dtype size == byte span (overflow-safe), offsets lie inside the data section, and the
// entries cover the data section exactly (no holes, no overlaps). Every violation throws
// inkling::Error naming the file and the tensor.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
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
#include "tensor/tensor_view.h"

namespace inkling {

constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

struct TensorEntry {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets relative to the start of the data section
  uint64_t end = 0;
};

// One mmap'd .safetensors file. Movable, not copyable; views stay valid while it lives.
class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::filesystem::path& path);
  // Parses an in-memory image (used by tests and fuzzing); `label` names it in errors.
  static SafetensorsFile from_bytes(std::vector<uint8_t> bytes, std::string label);

  SafetensorsFile(SafetensorsFile&&) noexcept = default;  // the views move with the mapping
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept = default;

  const std::filesystem::path& path() const { return path_; }
  const std::vector<TensorEntry>& entries() const { return entries_; }  // in file order
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool contains(std::string_view name) const;
  // Throws naming the file when missing.
  TensorView get(std::string_view name) const;
  std::optional<TensorView> find(std::string_view name) const;
  uint64_t file_bytes() const { return bytes_.size(); }
  // Copies bytes [begin, begin + count) of tensor `name` to `out`. A mapped file is read with
  // pread, not through the mapping, so its pages never count toward this process's RSS.
  void read_tensor(std::string_view name, uint64_t begin, uint64_t count, uint8_t* out) const;
  // Copies `rows` rows of `row_bytes` from row `first_row` of tensor `name` (its bytes taken as
  // rows of that length) to out + i * out_stride: a copy that interleaves two tensors' rows.
  // Read like read_tensor (pread, not the mapping).
  void read_tensor_rows(std::string_view name, uint64_t first_row, uint64_t rows, uint64_t row_bytes, uint8_t* out,
                        uint64_t out_stride) const;
  // Asks the kernel to bring tensor `name`'s file pages into the page cache in the background
  // (MADV_WILLNEED): they are not mapped, so they count toward no process's RSS until touched.
  // Advisory: false when the file is not mapped or the kernel declined.
  bool read_ahead(std::string_view name) const;

 private:
  SafetensorsFile() = default;
  void parse(std::string label);

  std::filesystem::path path_;
  MappedFile bytes_;
  uint64_t data_offset_ = 0;  // where the data section starts
  std::vector<TensorEntry> entries_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

// A checkpoint directory: either one model.safetensors or shards listed by
// model.safetensors.index.json ("weight_map": tensor -> shard file). Errors for an index that
// names a missing shard, a tensor missing from its shard, or a shard tensor absent from the index.
class TensorStore {
 public:
  static TensorStore open_dir(const std::filesystem::path& dir);

  std::vector<std::string> names() const;  // sorted
  bool contains(std::string_view name) const;
  TensorView get(std::string_view name) const;  // throws naming the tensor and directory
  std::optional<TensorView> find(std::string_view name) const;
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  uint64_t total_file_bytes() const;

  // Copies the named tensors out of their files into one ResidentArena (resident_memory.h:
  // anonymous memory advised for transparent huge pages), in file order; get() and find() then
  // return the copies. `progress(done_bytes, total_bytes)` runs after each piece. Once per store
  // (a later call may only name tensors already resident); unknown names throw. Returns the bytes
  // copied.
  uint64_t make_resident(const std::vector<std::string>& names,
                         const std::function<void(uint64_t, uint64_t)>& progress = {});
  // Two tensors of one dtype and shape that make_resident copies into one allocation with their
  // rows (the last dimension) alternating: row i of `first` becomes row 2 i of the copy, row i of
  // `second` row 2 i + 1. A decode kernel then reads a gate and an up projection stored apart as
  // the one interleaved matrix the original layouts' w13 is, in one stream instead of two.
  struct RowPair {
    std::string first, second;
  };
  // make_resident that also copies `row_pairs` interleaved. A pair's tensors need not be in
  // `names`; named there too, they are still copied once, in the pair. Throws naming the tensors
  // when a pair's dtypes or shapes differ.
  uint64_t make_resident(const std::vector<std::string>& names, const std::vector<RowPair>& row_pairs,
                         const std::function<void(uint64_t, uint64_t)>& progress = {});
  // Where make_resident put tensor `name` when it was one of a RowPair: the interleaved copy,
  // the length of one row, whether `name` holds the odd rows, and the other tensor. get() and
  // find() go on returning the file's view of such a tensor: its rows are not contiguous in the copy.
  struct InterleavedRows {
    const uint8_t* data = nullptr;
    uint64_t row_bytes = 0;
    bool odd = false;
    std::string partner;
  };
  std::optional<InterleavedRows> interleaved_rows(std::string_view name) const;
  uint64_t resident_bytes() const;
  // The copies make_resident made, as one range (empty before): what decode streams.
  std::span<const uint8_t> resident_memory() const;
  // True when make_resident copied tensor `name` (get() and find() return the copy).
  bool is_resident(std::string_view name) const { return resident_.find(name) != resident_.end(); }
  // SafetensorsFile::read_ahead for a tensor still read through its file's mapping; false for
  // one copied by make_resident (it is in memory already). Unknown names throw.
  bool read_ahead(std::string_view name) const;
  // Of those, the bytes the kernel backs with huge pages right now.
  uint64_t resident_huge_page_bytes() const;

 private:
  std::filesystem::path dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t, std::less<>> tensor_file_;  // name -> index into files_
  std::unique_ptr<ResidentArena> arena_;
  std::map<std::string, const uint8_t*, std::less<>> resident_;  // name -> its copy in arena_
  std::map<std::string, InterleavedRows, std::less<>> interleaved_;  // RowPair members -> their copy
};

// ---- writing ----

struct TensorSpec {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  size_t nbytes() const;
};

// Fills the bytes of one tensor; called once per spec, in order.
using TensorFiller = std::function<void(const TensorSpec& spec, std::span<uint8_t> out)>;

// Writes one file with tensors in the given order and an optional __metadata__ map.
void write_safetensors(const std::filesystem::path& path, const std::vector<TensorSpec>& specs,
                       const TensorFiller& fill,
                       const std::map<std::string, std::string>& metadata = {});

// Writes model-0000k-of-0000n.safetensors shards of at most `max_shard_bytes` (a tensor never
// spans shards) plus model.safetensors.index.json. `progress(done_bytes, total_bytes)` is
// called after each tensor when given.
void write_sharded(const std::filesystem::path& dir, const std::vector<TensorSpec>& specs,
                   const TensorFiller& fill, uint64_t max_shard_bytes,
                   const std::function<void(uint64_t, uint64_t)>& progress = {},
                   const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

}  // namespace inkling
