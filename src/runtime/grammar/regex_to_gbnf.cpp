// A JSON Schema `pattern` as GBNF over the JSON-escaped form of the string. The regex is read
// as ECMA-262 (what JSON Schema specifies); where Python's `re` (which validators use) means
// more, for \D \W \S, the grammar allows a subset so every output validates under both.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "runtime/grammar/json_schema.h"
#include "common/utf8.h"
#include "tensor/error.h"

namespace inkling::grammar {

namespace {

using CodeRanges = std::vector<std::pair<uint32_t, uint32_t>>;

constexpr int kMaxRegexNesting = 64;

CodeRanges merge(CodeRanges ranges) {
  std::sort(ranges.begin(), ranges.end());
  CodeRanges out;
  for (auto r : ranges) {
    if (!out.empty() && r.first <= out.back().second + 1)
      out.back().second = std::max(out.back().second, r.second);
    else
      out.push_back(r);
  }
  return out;
}

CodeRanges complement(const CodeRanges& ranges) {
  CodeRanges merged = merge(ranges), out;
  uint32_t next = 0;
  for (auto [lo, hi] : merged) {
    if (lo > next) out.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= 0x10FFFF) out.push_back({next, 0x10FFFF});
  return out;
}

// Printable ASCII less `ranges`: the complement classes \D \W \S, kept to ASCII because
// Python's are Unicode-aware (\D excludes every decimal digit of every script).
CodeRanges ascii_complement(const CodeRanges& ranges) {
  CodeRanges out;
  for (auto [lo, hi] : complement(ranges)) {
    uint32_t a = std::max<uint32_t>(lo, 0x20), b = std::min<uint32_t>(hi, 0x7E);
    if (a <= b) out.push_back({a, b});
  }
  return out;
}


// The characters of `ranges` as they may appear inside a JSON string: raw where JSON allows it,
// escaped for '"', '\\' and control characters.
std::string json_chars(const CodeRanges& input) {
  CodeRanges ranges = merge(input);
  std::vector<std::string> alternatives;
  std::string raw;
  auto contains = [&](uint32_t cp) {
    return std::any_of(ranges.begin(), ranges.end(), [&](auto r) { return r.first <= cp && cp <= r.second; });
  };
  for (auto [lo, hi] : ranges) {
    // Raw characters: not controls, not '"' or '\\'.
    uint32_t a = std::max<uint32_t>(lo, 0x20);
    while (a <= hi) {
      uint32_t b = hi;
      if (a <= '"' && '"' <= b) b = std::min(b, uint32_t('"') - 1);
      if (a <= '\\' && '\\' <= b) b = std::min(b, uint32_t('\\') - 1);
      if (a == '"' || a == '\\') {
        ++a;
        continue;
      }
      append_class_char(raw, a);
      if (b > a) {
        raw += '-';
        append_class_char(raw, b);
      }
      a = b + 1;
    }
  }
  if (!raw.empty()) alternatives.push_back("[" + raw + "]");
  if (contains('"')) alternatives.push_back("\"\\\\\\\"\"");
  if (contains('\\')) alternatives.push_back("\"\\\\\\\\\"");
  static constexpr std::pair<uint32_t, char> kShortEscapes[] = {{'\n', 'n'}, {'\t', 't'}, {'\r', 'r'}, {'\b', 'b'}, {'\f', 'f'}};
  for (uint32_t cp = 0; cp < 0x20; ++cp) {
    if (!contains(cp)) continue;
    char buf[32];
    auto short_escape = std::find_if(std::begin(kShortEscapes), std::end(kShortEscapes), [&](auto e) { return e.first == cp; });
    if (short_escape != std::end(kShortEscapes))
      std::snprintf(buf, sizeof buf, "\"\\\\%c\"", short_escape->second);
    else
      std::snprintf(buf, sizeof buf, "\"\\\\u00%02x\"", cp);
    alternatives.push_back(buf);
  }
  if (alternatives.empty()) {  // matches nothing
    std::string everything = "[^\\x00-";
    append_class_char(everything, 0x10FFFF);
    return everything + "]";
  }
  if (alternatives.size() == 1) return alternatives[0];
  std::string out = "(";
  for (size_t i = 0; i < alternatives.size(); ++i) out += (i ? " | " : "") + alternatives[i];
  return out + ")";
}

class RegexTranslator {
 public:
  explicit RegexTranslator(std::string_view pattern) : p_(pattern) {}

  std::string translate() {
    bool anchored_start = false, anchored_end = false;
    if (!p_.empty() && p_[0] == '^') {
      anchored_start = true;
      pos_ = 1;
    }
    std::string_view body = p_;
    if (body.size() > pos_ && body.back() == '$' && !escaped_at(body.size() - 1)) {
      anchored_end = true;
      end_ = body.size() - 1;
    } else {
      end_ = body.size();
    }
    std::string expr = alternation(0);
    if (pos_ != end_) fail("unexpected ')'");
    // JSON Schema patterns are not anchored: what lies outside the anchors is any text.
    const std::string any = json_chars({{0, 0x10FFFF}}) + "*";
    std::string out;
    if (!anchored_start) out += any + " ";
    out += expr;
    if (!anchored_end) out += " " + any;
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error("JSON Schema: pattern \"" + std::string(p_) + "\": " + what + " (at offset " + std::to_string(pos_) + ")");
  }

  bool escaped_at(size_t i) const {
    size_t slashes = 0;
    while (i > slashes && p_[i - 1 - slashes] == '\\') ++slashes;
    return slashes % 2 == 1;
  }

  bool at_end() const { return pos_ >= end_; }
  char peek() const { return at_end() ? '\0' : p_[pos_]; }

  std::string alternation(int depth) {
    if (depth > kMaxRegexNesting) fail("groups nested too deep");
    std::vector<std::string> alternatives{sequence(depth)};
    while (peek() == '|') {
      ++pos_;
      alternatives.push_back(sequence(depth));
    }
    if (alternatives.size() == 1) return alternatives[0];
    std::string out = "(";
    for (size_t i = 0; i < alternatives.size(); ++i) out += (i ? " | " : "") + alternatives[i];
    return out + ")";
  }

  std::string sequence(int depth) {
    std::string out;
    while (!at_end() && peek() != '|' && peek() != ')') {
      std::string atom = this->atom(depth);
      std::string quantifier = this->quantifier();
      if (!out.empty()) out += " ";
      out += quantifier.empty() ? atom : "(" + atom + ")" + quantifier;
    }
    return out.empty() ? "\"\"" : out;
  }

  std::string quantifier() {
    std::string q;
    char c = peek();
    if (c == '*' || c == '+' || c == '?') {
      q = std::string(1, c);
      ++pos_;
    } else if (c == '{') {
      size_t close = p_.find('}', pos_);
      if (close == std::string_view::npos || close > end_) return "";
      std::string_view inner = p_.substr(pos_ + 1, close - pos_ - 1);
      bool valid = !inner.empty() && std::all_of(inner.begin(), inner.end(), [](char k) { return (k >= '0' && k <= '9') || k == ','; }) &&
                   std::count(inner.begin(), inner.end(), ',') <= 1 && inner[0] != ',';
      if (!valid) return "";  // a literal '{', as Python reads it
      q.assign(1, '{');
      q.append(inner);
      q += '}';
      pos_ = close + 1;
    } else {
      return "";
    }
    if (peek() == '?') ++pos_;  // lazy: the same language
    if (peek() == '+') fail("possessive quantifiers are not supported");
    return q;
  }

  std::string atom(int depth) {
    char c = peek();
    if (c == '(') {
      ++pos_;
      if (peek() == '?') {
        ++pos_;
        char kind = peek();
        if (kind == ':') {
          ++pos_;
        } else if (kind == '<' && pos_ + 1 < end_ && p_[pos_ + 1] != '=' && p_[pos_ + 1] != '!') {
          size_t close = p_.find('>', pos_);
          if (close == std::string_view::npos) fail("unterminated group name");
          pos_ = close + 1;
        } else if (kind == 'P' && pos_ + 1 < end_ && p_[pos_ + 1] == '<') {
          size_t close = p_.find('>', pos_);
          if (close == std::string_view::npos) fail("unterminated group name");
          pos_ = close + 1;
        } else {
          fail("lookaround and inline flags are not supported");
        }
      }
      std::string inner = alternation(depth + 1);
      if (peek() != ')') fail("missing ')'");
      ++pos_;
      return "(" + inner + ")";
    }
    if (c == '[') return json_chars(char_class());
    if (c == '.') {
      ++pos_;
      return json_chars(complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}));
    }
    if (c == '^' || c == '$') fail("anchors are supported only at the start and end");
    if (c == '*' || c == '+' || c == '?') fail("nothing to repeat");
    if (c == '\\') return json_chars(escape(false));
    uint32_t cp = next_code_point();
    return json_chars(single(cp));
  }

  static CodeRanges single(uint32_t cp) { return {{cp, cp}}; }

  uint32_t next_code_point() {
    unsigned char c = uint8_t(p_[pos_]);
    int length = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (length == 0 || pos_ + size_t(length) > end_) fail("invalid UTF-8");
    uint32_t cp = length == 1 ? c : length == 2 ? (c & 0x1F) : length == 3 ? (c & 0x0F) : (c & 0x07);
    for (int i = 1; i < length; ++i) cp = (cp << 6) | (uint8_t(p_[pos_ + size_t(i)]) & 0x3F);
    pos_ += size_t(length);
    return cp;
  }

  uint32_t hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      char k = peek();
      int d = (k >= '0' && k <= '9') ? k - '0' : (k >= 'a' && k <= 'f') ? k - 'a' + 10 : (k >= 'A' && k <= 'F') ? k - 'A' + 10 : -1;
      if (d < 0) fail("bad hex escape");
      v = v * 16 + uint32_t(d);
      ++pos_;
    }
    return v;
  }

  // After a backslash: the characters the escape stands for.
  CodeRanges escape(bool in_class) {
    ++pos_;
    if (at_end()) fail("pattern ends in a backslash");
    char e = p_[pos_++];
    static const CodeRanges kDigit{{'0', '9'}};
    static const CodeRanges kWord{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    static const CodeRanges kSpace{{'\t', '\r'}, {' ', ' '}};
    switch (e) {
      case 'd': return kDigit;
      case 'w': return kWord;
      case 's': return kSpace;
      case 'D': return ascii_complement(kDigit);
      case 'W': return ascii_complement(kWord);
      case 'S': return ascii_complement(kSpace);
      case 'n': return single('\n');
      case 't': return single('\t');
      case 'r': return single('\r');
      case 'f': return single('\f');
      case 'v': return single('\v');
      case '0': return single(0);
      case 'x': return single(hex(2));
      case 'u': return single(hex(4));
      case 'b':
        if (in_class) return single('\b');
        fail("word boundaries are not supported");
      case 'B': fail("word boundaries are not supported");
      case 'p': case 'P': fail("Unicode property escapes are not supported");
      default:
        if (e >= '1' && e <= '9') fail("backreferences are not supported");
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) fail(std::string("unknown escape \\") + e);
        --pos_;
        return single(next_code_point());
    }
  }

  CodeRanges char_class() {
    ++pos_;  // '['
    bool negated = false;
    if (peek() == '^') {
      negated = true;
      ++pos_;
    }
    CodeRanges ranges;
    bool first = true;
    while (!at_end() && (peek() != ']' || first)) {
      first = false;
      CodeRanges lo_set = peek() == '\\' ? escape(true) : single(next_code_point());
      if (peek() == '-' && pos_ + 1 < end_ && p_[pos_ + 1] != ']' && lo_set.size() == 1 && lo_set[0].first == lo_set[0].second) {
        ++pos_;
        CodeRanges hi_set = peek() == '\\' ? escape(true) : single(next_code_point());
        if (hi_set.size() != 1 || hi_set[0].first != hi_set[0].second) fail("a class range ends in a class");
        if (hi_set[0].first < lo_set[0].first) fail("a class range is reversed");
        ranges.push_back({lo_set[0].first, hi_set[0].first});
      } else {
        ranges.insert(ranges.end(), lo_set.begin(), lo_set.end());
      }
    }
    if (peek() != ']') fail("unterminated character class");
    ++pos_;
    return negated ? complement(ranges) : merge(ranges);
  }

  std::string_view p_;
  size_t pos_ = 0, end_ = 0;
};

}  // namespace

namespace {

bool is_hex_digit(uint32_t cp) { return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'f') || (cp >= 'A' && cp <= 'F'); }

// Whether `out` ends with a \xHH escape, which a following hex digit must not touch.
bool ends_with_hex_escape(const std::string& out) {
  const size_t n = out.size();
  if (n < 4 || out[n - 3] != 'x' || !is_hex_digit(uint8_t(out[n - 2])) || !is_hex_digit(uint8_t(out[n - 1])))
    return false;
  size_t backslashes = 0;  // an even run before the x is escaped backslashes and a plain x
  while (backslashes < n - 3 && out[n - 4 - backslashes] == '\\') ++backslashes;
  return backslashes % 2 == 1;
}

void append_hex_escape(std::string& out, uint32_t cp) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02X", cp);
  out += buf;
}

}  // namespace

void append_class_char(std::string& out, uint32_t cp) {
  const bool alnum = (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
  if (alnum && !(is_hex_digit(cp) && ends_with_hex_escape(out))) {
    out += char(cp);
  } else if (cp < 0xA0) {
    append_hex_escape(out, cp);
  } else if (cp >= 0xD800 && cp <= 0xDFFF) {  // no UTF-8 form
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\u%04X", cp);
    out += buf;
  } else {
    append_utf8(out, cp);
  }
}

void append_literal_byte(std::string& out, unsigned char c) {
  if (c == '"' || c == '\\') {
    out += '\\';
    out += char(c);
  } else if (c < 0x20 || c == 0x7F || (is_hex_digit(c) && ends_with_hex_escape(out))) {
    append_hex_escape(out, c);
  } else {
    out += char(c);
  }
}

std::string regex_to_gbnf_body(std::string_view pattern) { return RegexTranslator(pattern).translate(); }

}  // namespace inkling::grammar
