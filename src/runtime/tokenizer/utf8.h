// UTF-8 helpers shared by encode (validation, code-point stepping) and decode
// (lossy repair with the same U+FFFD policy as Rust's from_utf8_lossy, which
// HF tokenizers applies in its ByteLevel decoder).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/utf8.h"  // utf8_step, decode_utf8, append_utf8

namespace inkling::tok_detail {

// Byte offset of the first invalid or truncated sequence, or text.size() if valid.
size_t first_invalid_utf8(std::string_view text);

using ::inkling::Utf8Step;
using ::inkling::utf8_step;

// Appends bytes to out, replacing each maximal invalid subpart with U+FFFD.
void append_utf8_lossy(std::string& out, std::string_view bytes);

}  // namespace inkling::tok_detail
