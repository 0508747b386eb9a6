// One owner of a file's mapping (see mapped_file.h).
#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "tensor/error.h"

namespace inkling {

MappedFile MappedFile::map(const std::filesystem::path& path, const std::string& label) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(label + ": cannot open: " + std::strerror(errno));
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int saved = errno;
    ::close(fd);
    throw Error(label + ": cannot stat: " + std::strerror(saved));
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    throw Error(label + ": not a regular file");
  }
  MappedFile file;
  const uint64_t size = uint64_t(info.st_size);
  if (size > 0) {  // mmap refuses a length of 0
    void* mapping = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapping == MAP_FAILED) {
      const int saved = errno;
      ::close(fd);
      throw Error(label + ": cannot mmap " + std::to_string(size) + " bytes: " + std::strerror(saved));
    }
    file.data_ = static_cast<const uint8_t*>(mapping);
    file.size_ = size;
    file.is_mapped_ = true;
  }
  ::close(fd);  // the mapping keeps the file alive
  return file;
}

MappedFile MappedFile::hold(std::vector<uint8_t> bytes) {
  MappedFile file;
  file.held_ = std::move(bytes);
  file.data_ = file.held_.data();
  file.size_ = file.held_.size();
  return file;
}

MappedFile::MappedFile(MappedFile&& other) noexcept { *this = std::move(other); }

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this == &other) return *this;
  release();
  data_ = std::exchange(other.data_, nullptr);
  size_ = std::exchange(other.size_, 0);
  is_mapped_ = std::exchange(other.is_mapped_, false);
  held_ = std::move(other.held_);
  other.held_.clear();
  return *this;
}

MappedFile::~MappedFile() { release(); }

void MappedFile::release() noexcept {
  if (is_mapped_ && data_) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
  is_mapped_ = false;
  held_.clear();
}

void read_file_range(const std::filesystem::path& path, uint64_t start, uint64_t total,
                     const std::function<void(uint64_t done, std::vector<iovec>& pieces)>& pieces_for,
                     const std::string& what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(what + ": cannot open the file to read it: " + std::strerror(errno));
  std::vector<iovec> pieces;
  uint64_t done = 0;
  while (done < total) {
    pieces.clear();
    pieces_for(done, pieces);
    const ssize_t got = ::preadv(fd, pieces.data(), int(pieces.size()), off_t(start + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      const std::string why = got < 0 ? std::strerror(errno) : "the file ended early (truncated since it was opened?)";
      ::close(fd);
      throw Error(what + ": cannot read " + std::to_string(total) + " bytes at file offset " + std::to_string(start) +
                  ": " + why);
    }
    done += uint64_t(got);
  }
  ::close(fd);
}

}  // namespace inkling
