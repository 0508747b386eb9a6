#include "runtime/tokenizer/o200k_scanner.h"

#include <cstdint>

#include "runtime/tokenizer/unicode_classes.h"
#include "runtime/tokenizer/utf8.h"

namespace inkling::tok_detail {

const std::string_view kO200kPattern =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

namespace {

constexpr size_t kNone = static_cast<size_t>(-1);

class Scanner {
 public:
  explicit Scanner(std::string_view text)
      : p_(reinterpret_cast<const unsigned char*>(text.data())), n_(text.size()), table_(class_table()) {}

  size_t size() const { return n_; }

  // End of the match starting at i (i < n); the alternatives in the regex's order.
  size_t match(size_t i) const {
    size_t end = letters(i, /*lower_required=*/true);
    if (end != kNone) return end;
    end = letters(i, /*lower_required=*/false);
    if (end != kNone) return end;
    const Char c = at(i);
    if (c.flags & kNumber) {  // \p{N}{1,3}
      end = i + c.len;
      for (int k = 1; k < 3 && end < n_; ++k) {
        const Char d = at(end);
        if (!(d.flags & kNumber)) break;
        end += d.len;
      }
      return end;
    }
    end = punctuation(i);
    if (end != kNone) return end;
    if (c.flags & kSpace) return spaces(i);
    return i + c.len;  // unreachable with a complete class table; never stall
  }

 private:
  struct Char {
    uint32_t cp;
    uint8_t flags;
    uint8_t len;
  };

  Char at(size_t i) const {
    if (p_[i] < 0x80) return {p_[i], table_(p_[i]), 1};
    size_t len;
    const uint32_t cp = decode_utf8(p_ + i, len);
    return {cp, table_(cp), static_cast<uint8_t>(len)};
  }

  // [^\r\n\p{L}\p{N}]
  static bool is_prefix(const Char& c) { return c.cp != '\r' && c.cp != '\n' && !(c.flags & (kLetter | kNumber)); }
  // [^\s\p{L}\p{N}]
  static bool is_symbol(const Char& c) { return !(c.flags & (kSpace | kLetter | kNumber)); }

  size_t letters(size_t i, bool lower_required) const {
    const Char c = at(i);
    if (is_prefix(c)) {
      const size_t end = lower_required ? upper_star_lower_plus(i + c.len) : upper_plus_lower_star(i + c.len);
      if (end != kNone) return end;
    }
    return lower_required ? upper_star_lower_plus(i) : upper_plus_lower_star(i);
  }

  // [Upperish]*[Lowerish]+ then the optional contraction; greedy with backtracking:
  // the Lowerish run starts at the last position of the Upperish run (or just past it)
  // that is Lowerish.
  size_t upper_star_lower_plus(size_t j) const {
    size_t pos = j;
    size_t last_lower = kNone;
    while (pos < n_) {
      const Char c = at(pos);
      if (!(c.flags & kUpperish)) break;
      if (c.flags & kLowerish) last_lower = pos;
      pos += c.len;
    }
    size_t lower_start;
    if (pos < n_ && (at(pos).flags & kLowerish)) {
      lower_start = pos;
    } else if (last_lower != kNone) {
      lower_start = last_lower;
    } else {
      return kNone;
    }
    return contraction(lower_run(lower_start));
  }

  // [Upperish]+[Lowerish]* then the optional contraction.
  size_t upper_plus_lower_star(size_t j) const {
    size_t pos = j;
    while (pos < n_) {
      const Char c = at(pos);
      if (!(c.flags & kUpperish)) break;
      pos += c.len;
    }
    if (pos == j) return kNone;
    return contraction(lower_run(pos));
  }

  size_t lower_run(size_t pos) const {
    while (pos < n_) {
      const Char c = at(pos);
      if (!(c.flags & kLowerish)) break;
      pos += c.len;
    }
    return pos;
  }

  // (?i:'s|'t|'re|'ve|'m|'ll|'d)?
  size_t contraction(size_t pos) const {
    if (pos + 1 >= n_ || p_[pos] != '\'') return pos;
    const Char first = at(pos + 1);
    const char a = contraction_letter(first.cp);
    const size_t after_first = pos + 1 + first.len;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return after_first;
    if (a != 'r' && a != 'v' && a != 'l') return pos;
    if (after_first >= n_) return pos;
    const Char second = at(after_first);
    const char b = contraction_letter(second.cp);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return after_first + second.len;
    return pos;
  }

  //  ?[^\s\p{L}\p{N}]+[\r\n/]*
  size_t punctuation(size_t i) const {
    size_t pos = i;
    if (p_[i] == ' ' && i + 1 < n_ && is_symbol(at(i + 1))) {
      pos = i + 1;
    } else if (!is_symbol(at(i))) {
      return kNone;
    }
    while (pos < n_) {
      const Char c = at(pos);
      if (!is_symbol(c)) break;
      pos += c.len;
    }
    while (pos < n_ && (p_[pos] == '\r' || p_[pos] == '\n' || p_[pos] == '/')) ++pos;
    return pos;
  }

  // \s*[\r\n]+ | \s+(?!\S) | \s+   starting on a space character
  size_t spaces(size_t i) const {
    size_t pos = i;
    size_t after_last_newline = kNone;
    size_t last_start = i;
    size_t count = 0;
    while (pos < n_) {
      const Char c = at(pos);
      if (!(c.flags & kSpace)) break;
      last_start = pos;
      pos += c.len;
      ++count;
      if (c.cp == '\r' || c.cp == '\n') after_last_newline = pos;
    }
    if (after_last_newline != kNone) return after_last_newline;
    if (pos == n_ || count == 1) return pos;
    return last_start;  // leave the last space to prefix the following word
  }

  const unsigned char* p_;
  size_t n_;
  const ClassTable& table_;
};

}  // namespace

void o200k_split(std::string_view text, std::vector<std::string_view>& out) {
  const Scanner scanner(text);
  size_t i = 0;
  while (i < scanner.size()) {
    const size_t end = scanner.match(i);
    out.emplace_back(text.data() + i, end - i);
    i = end;
  }
}

}  // namespace inkling::tok_detail
