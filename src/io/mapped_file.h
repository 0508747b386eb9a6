// The bytes of one file as a read-only region that owns itself: a private mmap of the whole
// file, or (tests, fuzzing) an in-memory buffer it holds. The file readers (safetensors, GGUF)
// keep one and view into it; moving it keeps every view valid, and it unmaps exactly once.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace inkling {

class MappedFile {
 public:
  // Maps all of `path` (an empty file maps to no bytes). Throws inkling::Error starting with
  // `label` when it cannot be opened, is not a regular file, or cannot be mapped.
  static MappedFile map(const std::filesystem::path& path, const std::string& label);
  // Holds `bytes` (a moved vector keeps its buffer, so views into it survive moves).
  static MappedFile hold(std::vector<uint8_t> bytes);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  // Whether the bytes are the file's mapping (pread and madvise apply), not a held buffer.
  bool is_mapped() const { return is_mapped_; }

 private:
  void release() noexcept;

  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  bool is_mapped_ = false;
  std::vector<uint8_t> held_;
};

// Reads `total` bytes of `path` from file offset `start` with preadv, into the buffers that
// `pieces_for(done, pieces)` appends for the bytes from `done` on: a copy lands in place (rows
// scattered to their strides) with no bounce buffer, and no page of the file's mapping is touched.
// Throws inkling::Error starting with `what` ("file: tensor \"x\"") when it cannot be read.
void read_file_range(const std::filesystem::path& path, uint64_t start, uint64_t total,
                     const std::function<void(uint64_t done, std::vector<iovec>& pieces)>& pieces_for,
                     const std::string& what);

}  // namespace inkling
