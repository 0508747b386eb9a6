#include "runtime/tokenizer/utf8.h"

namespace inkling::tok_detail {

size_t first_invalid_utf8(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    // ASCII runs dominate real text; skip them eight bytes at a time.
    while (i + 8 <= n) {
      uint64_t word;
      __builtin_memcpy(&word, p + i, 8);
      if (word & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    const Utf8Step step = utf8_step(p + i, n - i);
    if (step.kind != Utf8Step::kValid) return i;
    i += step.len;
  }
  return n;
}

void append_utf8_lossy(std::string& out, std::string_view bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  size_t i = 0;
  size_t run_start = 0;  // start of the pending valid run, appended in one go
  while (i < n) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    const Utf8Step step = utf8_step(p + i, n - i);
    if (step.kind == Utf8Step::kValid) {
      i += step.len;
      continue;
    }
    out.append(bytes.data() + run_start, i - run_start);
    out.append("\xEF\xBF\xBD");
    i += step.len;
    run_start = i;
  }
  out.append(bytes.data() + run_start, n - run_start);
}

}  // namespace inkling::tok_detail
