// A compiled PCRE2 pattern in UTF + UCP mode (JIT when available).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace inkling::tok_detail {

class Regex {
 public:
  // Throws inkling::Error naming the pattern and PCRE2's message on a bad pattern.
  explicit Regex(const std::string& pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // All non-overlapping matches [begin, end) in text (valid UTF-8), leftmost first.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;

 private:
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
};

}  // namespace inkling::tok_detail
