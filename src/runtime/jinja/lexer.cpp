#include "runtime/jinja/lexer.h"

#include <cctype>

#include "runtime/jinja/value.h"
#include "tensor/error.h"

namespace inkling::jinja {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

class Lexer {
 public:
  Lexer(std::string src, const std::string& name, const LexOptions& o) : src_(std::move(src)), name_(name), opt_(o) {}

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      size_t tag = find_tag(pos_);
      if (tag == std::string::npos) {
        emit_data(src_.substr(pos_));
        pos_ = src_.size();
        break;
      }
      std::string text = src_.substr(pos_, tag - pos_);
      char kind = src_[tag + 1];
      char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (sign != '-' && sign != '+') sign = '\0';
      if (sign == '-') {
        size_t end = text.size();
        while (end > 0 && is_space(text[end - 1])) --end;
        text.resize(end);
      } else if (sign != '+' && opt_.lstrip_blocks && kind != '{') {
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if (l_pos > 0 || line_starting) {
          bool all_space = l_pos < text.size();
          for (size_t k = l_pos; k < text.size(); ++k)
            if (!is_space(text[k])) all_space = false;
          if (all_space) text.resize(l_pos);
        }
      }
      emit_data(text);
      line_ += count_newlines(pos_, tag);
      pos_ = tag + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        line_starting = lex_comment();
      } else if (kind == '%' && try_raw()) {
        line_starting = last_match_newline_;
      } else {
        line_starting = lex_tag(kind == '%');
      }
    }
    tokens_.push_back({TokenType::kEof, "", line_});
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void fail(const std::string& msg, int line) const {
    throw Error(source_location(name_, line) + ": template syntax error: " + msg);
  }

  int count_newlines(size_t from, size_t to) const {
    int n = 0;
    for (size_t k = from; k < to && k < src_.size(); ++k) n += src_[k] == '\n';
    return n;
  }

  size_t find_tag(size_t from) const {
    for (size_t k = from; k + 1 < src_.size(); ++k)
      if (src_[k] == '{' && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#')) return k;
    return std::string::npos;
  }

  void emit_data(const std::string& text) {
    if (!text.empty()) tokens_.push_back({TokenType::kData, text, line_});
  }

  // Consumes a tag end at pos_ if present: "+END", "-END\s*" or "END\n?" (block/comment only).
  bool match_end(std::string_view end, bool trims, bool& ends_newline) {
    if (src_.compare(pos_, 1, "+") == 0 && src_.compare(pos_ + 1, end.size(), end) == 0) {
      pos_ += 1 + end.size();
      ends_newline = false;
      return true;
    }
    if (src_.compare(pos_, 1, "-") == 0 && src_.compare(pos_ + 1, end.size(), end) == 0) {
      pos_ += 1 + end.size();
      size_t start = pos_;
      while (pos_ < src_.size() && is_space(src_[pos_])) ++pos_;
      line_ += count_newlines(start, pos_);
      ends_newline = pos_ > start ? src_[pos_ - 1] == '\n' : false;
      return true;
    }
    if (src_.compare(pos_, end.size(), end) == 0) {
      pos_ += end.size();
      ends_newline = false;
      if (trims && opt_.trim_blocks && pos_ < src_.size() && src_[pos_] == '\n') {
        ++pos_;
        ++line_;
        ends_newline = true;
      }
      return true;
    }
    return false;
  }

  bool lex_comment() {
    int start_line = line_;
    while (pos_ < src_.size()) {
      bool nl = false;
      if (match_end("#}", true, nl)) return nl;
      if (src_[pos_] == '\n') ++line_;
      ++pos_;
    }
    fail("Missing end of comment tag", start_line);
  }

  // `{% raw %}...{% endraw %}`: the body is data, verbatim.
  bool try_raw() {
    size_t p = pos_;
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (src_.compare(p, 3, "-%}") == 0) {
      p += 3;
      while (p < src_.size() && is_space(src_[p])) ++p;
    } else if (src_.compare(p, 2, "%}") == 0) {
      p += 2;
    } else {
      return false;
    }
    line_ += count_newlines(pos_, p);
    int start_line = line_;
    for (size_t k = p; k + 1 < src_.size(); ++k) {
      if (src_[k] != '{' || src_[k + 1] != '%') continue;
      size_t q = k + 2;
      char sign = q < src_.size() && (src_[q] == '-' || src_[q] == '+') ? src_[q] : '\0';
      if (sign) ++q;
      while (q < src_.size() && is_space(src_[q])) ++q;
      if (src_.compare(q, 6, "endraw") != 0) continue;
      q += 6;
      while (q < src_.size() && is_space(src_[q])) ++q;
      std::string text = src_.substr(p, k - p);
      if (sign == '-') {
        size_t end = text.size();
        while (end > 0 && is_space(text[end - 1])) --end;
        text.resize(end);
      } else if (sign != '+' && opt_.lstrip_blocks) {
        size_t l_pos = text.rfind('\n');
        if (l_pos != std::string::npos) {
          bool all_space = l_pos + 1 < text.size();
          for (size_t m = l_pos + 1; m < text.size(); ++m)
            if (!is_space(text[m])) all_space = false;
          if (all_space) text.resize(l_pos + 1);
        }
      }
      emit_data(text);
      line_ += count_newlines(p, q);
      pos_ = q;
      if (!match_end("%}", true, last_match_newline_)) fail("Missing end of raw directive", start_line);
      return true;
    }
    fail("Missing end of raw directive", start_line);
  }

  // Expression tokens up to the tag end; returns whether the end consumed a newline.
  bool lex_tag(bool block) {
    tokens_.push_back({block ? TokenType::kBlockBegin : TokenType::kVarBegin, "", line_});
    int start_line = line_;
    std::string_view end = block ? "%}" : "}}";
    int depth = 0;
    while (true) {
      if (pos_ >= src_.size()) fail(block ? "unexpected end of template, expected '%}'" : "unexpected end of template, expected '}}'", start_line);
      bool nl = false;
      if (depth == 0 && match_end(end, block, nl)) {
        tokens_.push_back({block ? TokenType::kBlockEnd : TokenType::kVarEnd, "", line_});
        return nl;
      }
      char c = src_[pos_];
      if (is_space(c)) {
        if (c == '\n') ++line_;
        ++pos_;
        continue;
      }
      if (std::isdigit(static_cast<unsigned char>(c))) {
        lex_number();
        continue;
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t start = pos_;
        while (pos_ < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
        tokens_.push_back({TokenType::kName, src_.substr(start, pos_ - start), line_});
        continue;
      }
      if (c == '\'' || c == '"') {
        lex_string();
        continue;
      }
      static const char* kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "/", "*", "%", "~", "[", "]", "(", ")",
                                   "{", "}", "<", ">", "=", ".", ":", "|", ",", ";"};
      bool matched = false;
      for (const char* op : kOps) {
        size_t len = std::char_traits<char>::length(op);
        if (src_.compare(pos_, len, op) == 0) {
          std::string o(op);
          if (o == "(" || o == "[" || o == "{") ++depth;
          if (o == ")" || o == "]" || o == "}") {
            if (depth == 0) fail("unexpected '" + o + "'", line_);
            --depth;
          }
          tokens_.push_back({TokenType::kOp, o, line_});
          pos_ += len;
          matched = true;
          break;
        }
      }
      if (!matched) fail(std::string("unexpected char '") + c + "'", line_);
    }
  }

  void lex_number() {
    size_t start = pos_;
    auto digits = [&] {
      while (pos_ < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
    };
    digits();
    bool is_float = false;
    if (pos_ + 1 < src_.size() && src_[pos_] == '.' && std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
      is_float = true;
      ++pos_;
      digits();
    }
    if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t save = pos_++;
      if (pos_ < src_.size() && (src_[pos_] == '+' || src_[pos_] == '-')) ++pos_;
      if (pos_ < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos_]))) {
        digits();
        is_float = true;
      } else {
        pos_ = save;
      }
    }
    std::string text;
    for (size_t k = start; k < pos_; ++k)
      if (src_[k] != '_') text += src_[k];
    tokens_.push_back({is_float ? TokenType::kFloat : TokenType::kInt, text, line_});
  }

  void lex_string() {
    char quote = src_[pos_];
    int start_line = line_;
    std::string out;
    ++pos_;
    while (true) {
      if (pos_ >= src_.size()) fail("unterminated string literal", start_line);
      char c = src_[pos_];
      if (c == quote) {
        ++pos_;
        break;
      }
      if (c == '\n') ++line_;
      if (c != '\\') {
        out += c;
        ++pos_;
        continue;
      }
      if (pos_ + 1 >= src_.size()) fail("unterminated string literal", start_line);
      char e = src_[pos_ + 1];
      pos_ += 2;
      auto hex = [&](int n) {
        uint32_t cp = 0;
        for (int k = 0; k < n; ++k) {
          if (pos_ >= src_.size() || !std::isxdigit(static_cast<unsigned char>(src_[pos_])))
            fail("truncated \\x/\\u escape in string literal", line_);
          char h = static_cast<char>(std::tolower(static_cast<unsigned char>(src_[pos_++])));
          cp = cp * 16 + static_cast<uint32_t>(h <= '9' ? h - '0' : h - 'a' + 10);
        }
        return cp;
      };
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case 'a': out += '\a'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case '\n': ++line_; break;  // line continuation
        case 'x': out += utf8_encode(hex(2)); break;
        case 'u': out += utf8_encode(hex(4)); break;
        case 'U': out += utf8_encode(hex(8)); break;
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && pos_ < src_.size() && src_[pos_] >= '0' && src_[pos_] <= '7'; ++k)
              cp = cp * 8 + static_cast<uint32_t>(src_[pos_++] - '0');
            out += utf8_encode(cp);
          } else {
            out += '\\';  // Python keeps unknown escapes verbatim
            out += e;
          }
      }
    }
    tokens_.push_back({TokenType::kString, out, start_line});
  }

  std::string src_;
  std::string name_;
  LexOptions opt_;
  size_t pos_ = 0;
  int line_ = 1;
  bool last_match_newline_ = false;
  std::vector<Token> tokens_;
};

// Jinja2 normalizes \r\n and \r to \n and drops one trailing newline.
std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t k = 0; k < source.size(); ++k) {
    if (source[k] == '\r') {
      out += '\n';
      if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
    } else {
      out += source[k];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

std::string source_location(const std::string& name, int line) {
  bool embedded = !name.empty() && name.back() == ']';
  return name + (embedded ? " line " : ":") + std::to_string(line);
}

std::vector<Token> tokenize(std::string_view source, const std::string& name, const LexOptions& options) {
  return Lexer(normalize_newlines(source), name, options).run();
}

}  // namespace inkling::jinja
