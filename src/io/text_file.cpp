#include "io/text_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tensor/error.h"

namespace inkling {
namespace {

std::string kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

std::string mib(size_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

}  // namespace

std::string read_text_file(const std::filesystem::path& path, size_t max_bytes, std::string_view what_given) {
  const std::string name = path.string();
  const std::string what = what_given.empty() ? "a " + path.filename().string() : std::string(what_given);
  // O_NONBLOCK: opening a FIFO must not wait for a writer before fstat can refuse it.
  int fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw Error(name + ": cannot open " + what + " (" + std::strerror(errno) + ")");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st{};
  if (::fstat(fd, &st) != 0) throw Error(name + ": cannot stat (" + std::strerror(errno) + ")");
  if (!S_ISREG(st.st_mode))
    throw Error(name + ": is " + kind_of(st.st_mode) + ", not a regular file (expected " + what + ")");
  if (static_cast<uint64_t>(st.st_size) > max_bytes)
    throw Error(name + ": is " + std::to_string(st.st_size) + " bytes, over the limit of " + mib(max_bytes) + " for " +
                what);
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::read(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(name + ": read failed (" + std::strerror(errno) + ")");
    if (n == 0) break;  // the file shrank while we read it
    done += static_cast<size_t>(n);
  }
  text.resize(done);
  return text;
}

}  // namespace inkling
