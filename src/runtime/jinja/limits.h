// What one render may spend. A template arrives with a checkpoint from anywhere, and Jinja has
// no loops without bounds only because MAX_RANGE caps range(): nested loops, repetition and
// padding still reach any size. Each budget ends the render with an Error naming it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace inkling::jinja {

struct RenderLimits {
  size_t max_output_bytes = size_t{64} << 20;         // the rendered text
  uint64_t max_allocated_bytes = uint64_t{4} << 30;   // all strings and lists built, summed
  uint64_t max_steps = 10'000'000;  // statements run, expressions evaluated, loop iterations
};

// One string, or one list's items (sizeof(Value) each), may not exceed this: checked before the
// allocation, so "x" * 10**10 fails at once instead of asking for 10 GB.
inline constexpr size_t kMaxValueBytes = size_t{64} << 20;
// Lists, dicts and JSON documents nest at most this deep (Python's own limit is near 1000 frames).
inline constexpr int kMaxValueNesting = 512;

// Throws Error("<what> would build ... over the limit ...") when `bytes` exceeds kMaxValueBytes.
void check_value_bytes(uint64_t bytes, const char* what);
// The same for `count` copies of `unit` bytes, without overflowing the product.
void check_value_bytes(uint64_t count, uint64_t unit, const char* what);

std::string format_bytes(uint64_t bytes);

}  // namespace inkling::jinja
