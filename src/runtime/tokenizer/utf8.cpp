#include "runtime/tokenizer/utf8.h"

namespace inkling::tok_detail {

Utf8Step utf8_step(const unsigned char* p, size_t available) {
  const unsigned char b0 = p[0];
  if (b0 < 0x80) return {Utf8Step::kValid, 1};
  size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;   // overlong
    if (b0 == 0xED) hi = 0x9F;   // surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;   // overlong
    if (b0 == 0xF4) hi = 0x8F;   // above U+10FFFF
  } else {
    return {Utf8Step::kInvalid, 1};
  }
  for (size_t i = 1; i < need; ++i) {
    if (i >= available) return {Utf8Step::kTruncated, i};
    const unsigned char b = p[i];
    const bool ok = i == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) return {Utf8Step::kInvalid, i};
  }
  return {Utf8Step::kValid, need};
}

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
