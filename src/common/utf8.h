// UTF-8 encoding and decoding of single code points, shared by the tokenizer, the template engine
// and the grammar compiler. Header-only so that modules which link nothing else (jinja) can use it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace inkling {

// Bytes in the UTF-8 form of a code point at most U+10FFFF.
constexpr int utf8_length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

// Writes the UTF-8 form of cp (at most U+10FFFF) to out and returns its length.
inline int encode_utf8(uint32_t cp, unsigned char* out) {
  const int n = utf8_length(cp);
  if (n == 1) {
    out[0] = static_cast<unsigned char>(cp);
    return 1;
  }
  static constexpr unsigned char kLeadMarker[5] = {0, 0, 0xC0, 0xE0, 0xF0};
  for (int i = n - 1; i > 0; --i) {
    out[i] = static_cast<unsigned char>(0x80 | (cp & 0x3F));
    cp >>= 6;
  }
  out[0] = static_cast<unsigned char>(kLeadMarker[n] | cp);
  return n;
}

inline void append_utf8(std::string& out, uint32_t cp) {
  unsigned char bytes[4];
  out.append(reinterpret_cast<const char*>(bytes), static_cast<size_t>(encode_utf8(cp, bytes)));
}

// What the bytes at p, of which `available` exist, start (RFC 3629: no overlongs, surrogates or
// code points above U+10FFFF).
struct Utf8Step {
  enum Kind { kValid, kInvalid, kTruncated } kind;
  size_t len;  // kValid: sequence length; kInvalid: bytes one U+FFFD replaces; kTruncated: bytes present
};

inline Utf8Step utf8_step(const unsigned char* p, size_t available) {
  const unsigned char b0 = p[0];
  if (b0 < 0x80) return {Utf8Step::kValid, 1};
  size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // above U+10FFFF
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

// Length of the well-formed sequence at p, or 0 when the bytes there do not start one.
inline size_t valid_utf8_length(const unsigned char* p, size_t available) {
  const Utf8Step step = utf8_step(p, available);
  return step.kind == Utf8Step::kValid ? step.len : 0;
}

// Decodes the code point at p, which must start a well-formed sequence, and sets len to its length.
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

}  // namespace inkling
