// Software prefetch of a byte range, for streams whose next addresses are known but which the
// hardware prefetchers do not follow in time: the start of the next matrix a decode thread reads,
// strided KV cache rows, whole rows of 4-bit scales.
#pragma once

#include <cstdint>

namespace inkling::kernels {

// Prefetches (into L1, as prefetcht0) every cache line that [start, start + bytes) touches.
inline void prefetch_lines(const void* start, int64_t bytes) {
  const uintptr_t first = reinterpret_cast<uintptr_t>(start) & ~uintptr_t(63);
  const uintptr_t end = reinterpret_cast<uintptr_t>(start) + uintptr_t(bytes);
  for (uintptr_t line = first; line < end; line += 64) __builtin_prefetch(reinterpret_cast<const void*>(line), 0, 3);
}

}  // namespace inkling::kernels
