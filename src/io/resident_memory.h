// Anonymous memory for weights copied out of their files, advised for transparent huge pages.
//
// Decode reads every active weight once per token. Read through the file mapping, that is one
// 4 KiB page (and one TLB miss) per 4 KiB of weights; in a virtual machine each miss walks two
// sets of page tables. Copied into memory backed by 2 MiB pages, the same bytes stream 13-20%
// faster on the KVM guests this was measured on (docs/kernels.md, "Weight memory").
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace inkling {

// The kernel's transparent huge page mode for anonymous memory
// (/sys/kernel/mm/transparent_hugepage/enabled).
enum class HugePageMode { Always, Madvise, Never, Unknown };
HugePageMode transparent_huge_page_mode();
const char* huge_page_mode_name(HugePageMode mode);
// True when memory advised with MADV_HUGEPAGE can get huge pages (Always or Madvise).
bool huge_pages_available();

// A bump allocator over one anonymous mapping. The address space is reserved up front
// (MAP_NORESERVE); pages are committed as they are first written.
class ResidentArena {
 public:
  // Throws inkling::Error when the address space cannot be reserved.
  explicit ResidentArena(uint64_t capacity);
  ResidentArena(const ResidentArena&) = delete;
  ResidentArena& operator=(const ResidentArena&) = delete;
  ~ResidentArena();

  // 64-byte aligned; throws when the capacity would be exceeded.
  uint8_t* allocate(uint64_t bytes);
  uint64_t used() const { return used_; }
  // The start of the arena (2 MiB aligned); used() bytes from here hold the copies.
  const uint8_t* data() const { return base_; }
  // Bytes of the arena the kernel currently backs with huge pages (AnonHugePages of its mapping
  // in /proc/self/smaps, at most used()); 0 when that cannot be read.
  uint64_t huge_page_bytes() const;

 private:
  uint8_t* mapping_ = nullptr;
  uint64_t mapping_bytes_ = 0;
  uint8_t* base_ = nullptr;  // mapping_ rounded up to 2 MiB
  uint64_t capacity_ = 0;
  uint64_t used_ = 0;
};

// Runs copy_piece(0 .. pieces-1) on up to 8 threads and returns the bytes they copied (each call
// returns its own). Most of a copy into fresh anonymous memory goes into the kernel zeroing the
// new pages (under a hypervisor, into the host backing them), which one thread leaves idle on the
// other cores. progress(done, total) follows every piece, under a lock; the first exception stops
// the pieces not yet started and is rethrown once all threads have joined.
uint64_t copy_pieces_in_parallel(size_t pieces, uint64_t total, const std::function<uint64_t(size_t)>& copy_piece,
                                 const std::function<void(uint64_t, uint64_t)>& progress);

// Pieces of at most this many bytes keep every thread of copy_pieces_in_parallel busy to the end.
constexpr uint64_t kResidentCopyPieceBytes = uint64_t(64) << 20;

}  // namespace inkling
