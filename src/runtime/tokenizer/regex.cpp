#define PCRE2_CODE_UNIT_WIDTH 8
#include "runtime/tokenizer/regex.h"

#include <pcre2.h>

#include "tensor/error.h"

namespace inkling::tok_detail {

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

struct MatchData {
  pcre2_match_data* data;
  explicit MatchData(pcre2_code* code) : data(pcre2_match_data_create_from_pattern(code, nullptr)) {}
  ~MatchData() { pcre2_match_data_free(data); }
};

}  // namespace

Regex::Regex(const std::string& pattern) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    throw Error("tokenizer: cannot compile pre-tokenizer regex '" + pattern + "' at offset " +
                std::to_string(error_offset) + ": " + pcre2_message(error_code));
  }
  code_ = code;
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  auto* code = static_cast<pcre2_code*>(code_);
  const MatchData match(code);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  size_t last_end = static_cast<size_t>(-1);
  while (start <= text.size()) {
    // The text was validated once up front; skip PCRE2's per-call UTF check.
    const int rc = jit_ ? pcre2_jit_match(code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, match.data, nullptr)
                        : pcre2_match(code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, match.data, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0) throw Error("tokenizer: regex match failed: " + pcre2_message(rc));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.data);
    const size_t b = ovector[0], e = ovector[1];
    if (b == e) {
      // Empty match: keep it unless it touches the previous match, then step one character.
      if (b != last_end) out.emplace_back(b, e);
      size_t next = b + 1;
      while (next < text.size() && (static_cast<unsigned char>(text[next]) & 0xC0) == 0x80) ++next;
      start = next;
    } else {
      out.emplace_back(b, e);
      start = e;
    }
    last_end = e;
  }
}

}  // namespace inkling::tok_detail
