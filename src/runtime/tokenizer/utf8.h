// UTF-8 helpers shared by encode (validation, code-point stepping) and decode
// (lossy repair with the same U+FFFD policy as Rust's from_utf8_lossy, which
// HF tokenizers applies in its ByteLevel decoder).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace inkling::tok_detail {

// Byte offset of the first invalid or truncated sequence, or text.size() if valid.
size_t first_invalid_utf8(std::string_view text);

// Decodes the code point at p (the text must be valid UTF-8) and sets len to its byte length.
inline uint32_t decode_utf8(const unsigned char* p, size_t& len) {
  const unsigned char b0 = p[0];
  if (b0 < 0x80) {
    len = 1;
    return b0;
  }
  if (b0 < 0xE0) {
    len = 2;
    return ((b0 & 0x1Fu) << 6) | (p[1] & 0x3Fu);
  }
  if (b0 < 0xF0) {
    len = 3;
    return ((b0 & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
  }
  len = 4;
  return ((b0 & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu);
}

void append_utf8(std::string& out, uint32_t cp);

// Result of examining the sequence that starts at some byte.
struct Utf8Step {
  enum Kind { kValid, kInvalid, kTruncated } kind;
  size_t len;  // kValid: sequence length; kInvalid: bytes one U+FFFD replaces; kTruncated: bytes present
};

Utf8Step utf8_step(const unsigned char* p, size_t available);

// Appends bytes to out, replacing each maximal invalid subpart with U+FFFD.
void append_utf8_lossy(std::string& out, std::string_view bytes);

}  // namespace inkling::tok_detail
