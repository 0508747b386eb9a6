#include "io/resident_memory.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <exception>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "tensor/error.h"

namespace inkling {
namespace {

constexpr uint64_t kHugePage = uint64_t(2) << 20;

uint64_t round_up(uint64_t value, uint64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

}  // namespace

HugePageMode transparent_huge_page_mode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string text;
  if (!in || !std::getline(in, text)) return HugePageMode::Unknown;
  if (text.find("[always]") != std::string::npos) return HugePageMode::Always;
  if (text.find("[madvise]") != std::string::npos) return HugePageMode::Madvise;
  if (text.find("[never]") != std::string::npos) return HugePageMode::Never;
  return HugePageMode::Unknown;
}

const char* huge_page_mode_name(HugePageMode mode) {
  switch (mode) {
    case HugePageMode::Always: return "always";
    case HugePageMode::Madvise: return "madvise";
    case HugePageMode::Never: return "never";
    case HugePageMode::Unknown: return "unknown";
  }
  return "unknown";
}

bool huge_pages_available() {
  const HugePageMode mode = transparent_huge_page_mode();
  return mode == HugePageMode::Always || mode == HugePageMode::Madvise;
}

ResidentArena::ResidentArena(uint64_t capacity) : capacity_(round_up(capacity, 64)) {
  // One huge page of slack so the arena can start on a 2 MiB boundary: a huge page can only
  // back an aligned 2 MiB range.
  mapping_bytes_ = round_up(capacity_, kHugePage) + kHugePage;
  void* mapping = ::mmap(nullptr, mapping_bytes_, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mapping == MAP_FAILED) {
    throw Error("cannot reserve " + std::to_string(mapping_bytes_) +
                " bytes of address space for the weights: " + std::strerror(errno));
  }
  mapping_ = static_cast<uint8_t*>(mapping);
  base_ = reinterpret_cast<uint8_t*>(round_up(reinterpret_cast<uintptr_t>(mapping_), kHugePage));
  // Advice only: without it (or when the kernel refuses) the arena still works on 4 KiB pages.
  ::madvise(base_, round_up(capacity_, kHugePage), MADV_HUGEPAGE);
}

ResidentArena::~ResidentArena() {
  if (mapping_) ::munmap(mapping_, mapping_bytes_);
}

uint8_t* ResidentArena::allocate(uint64_t bytes) {
  const uint64_t size = round_up(bytes, 64);
  if (size > capacity_ - used_) {
    throw Error("weight arena full: " + std::to_string(bytes) + " more bytes requested, " +
                std::to_string(capacity_ - used_) + " left of " + std::to_string(capacity_));
  }
  uint8_t* out = base_ + used_;
  used_ += size;
  return out;
}

uint64_t ResidentArena::huge_page_bytes() const {
  std::ifstream in("/proc/self/smaps");
  if (!in) return 0;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(mapping_), end = begin + mapping_bytes_;
  std::string line;
  bool inside = false;
  uint64_t total_kb = 0;
  while (std::getline(in, line)) {
    uintptr_t vma_begin = 0, vma_end = 0;
    // A mapping's header line: "start-end perms offset dev inode path".
    if (std::sscanf(line.c_str(), "%" SCNxPTR "-%" SCNxPTR " ", &vma_begin, &vma_end) == 2 &&
        line.find(' ') > line.find('-')) {
      inside = vma_begin < end && vma_end > begin;  // the kernel may split the mapping
      continue;
    }
    uint64_t kb = 0;
    if (inside && std::sscanf(line.c_str(), "AnonHugePages: %" SCNu64 " kB", &kb) == 1) total_kb += kb;
  }
  // A huge page counts whole; the arena's last one is usually only partly used.
  return std::min<uint64_t>(total_kb * 1024, used_);
}

uint64_t copy_pieces_in_parallel(size_t pieces, uint64_t total, const std::function<uint64_t(size_t)>& copy_piece,
                                 const std::function<void(uint64_t, uint64_t)>& progress) {
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mutex;  // guards done, error and the progress callback
  uint64_t done = 0;
  std::exception_ptr error;
  auto worker = [&] {
    for (size_t i = next++; i < pieces && !failed; i = next++) {
      uint64_t copied = 0;
      try {
        copied = copy_piece(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!error) error = std::current_exception();
        failed = true;
        return;
      }
      std::lock_guard<std::mutex> lock(mutex);
      done += copied;
      if (progress) progress(done, total);
    }
  };
  const unsigned threads = std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
  std::vector<std::thread> helpers;
  for (unsigned t = 1; t < threads; ++t) helpers.emplace_back(worker);
  worker();
  for (std::thread& helper : helpers) helper.join();
  if (error) std::rethrow_exception(error);
  return done;
}

}  // namespace inkling
