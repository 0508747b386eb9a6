#include "runtime/tokenizer/json_scan.h"

#include <cstring>

#include "runtime/tokenizer/utf8.h"
#include "tensor/error.h"

namespace inkling::tok_detail {

namespace {

class Cursor {
 public:
  explicit Cursor(std::string_view text) : s_(text) {}

  size_t pos() const { return pos_; }
  bool at_end() { return skip_ws(), pos_ >= s_.size(); }

  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\t')) ++pos_;
  }

  bool consume(char c) {
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  char peek() {
    skip_ws();
    return pos_ < s_.size() ? s_[pos_] : '\0';
  }

  // Decodes a string at the cursor into out (a view into the text when it has no escapes).
  bool string(std::string_view& out, std::string& scratch) {
    if (!consume('"')) return false;
    const size_t start = pos_;
    const char* hit = static_cast<const char*>(std::memchr(s_.data() + pos_, '"', s_.size() - pos_));
    const bool escaped =
        hit != nullptr && std::memchr(s_.data() + pos_, '\\', static_cast<size_t>(hit - (s_.data() + pos_))) != nullptr;
    if (hit != nullptr && !escaped) {
      pos_ = static_cast<size_t>(hit - s_.data()) + 1;
      out = s_.substr(start, pos_ - 1 - start);
      return true;
    }
    scratch.clear();
    while (pos_ < s_.size()) {
      const char c = s_[pos_++];
      if (c == '"') {
        out = scratch;
        return true;
      }
      if (c != '\\') {
        scratch.push_back(c);
        continue;
      }
      if (pos_ >= s_.size()) return false;
      const char e = s_[pos_++];
      switch (e) {
        case '"': scratch.push_back('"'); break;
        case '\\': scratch.push_back('\\'); break;
        case '/': scratch.push_back('/'); break;
        case 'b': scratch.push_back('\b'); break;
        case 'f': scratch.push_back('\f'); break;
        case 'n': scratch.push_back('\n'); break;
        case 'r': scratch.push_back('\r'); break;
        case 't': scratch.push_back('\t'); break;
        case 'u': {
          uint32_t cp;
          if (!hex4(cp)) return false;
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t low;
            if (pos_ + 1 >= s_.size() || s_[pos_] != '\\' || s_[pos_ + 1] != 'u') return false;
            pos_ += 2;
            if (!hex4(low) || low < 0xDC00 || low > 0xDFFF) return false;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return false;
          }
          append_utf8(scratch, cp);
          break;
        }
        default: return false;
      }
    }
    return false;
  }

  bool integer(long long& value) {
    skip_ws();
    const size_t start = pos_;
    bool negative = false;
    if (pos_ < s_.size() && s_[pos_] == '-') {
      negative = true;
      ++pos_;
    }
    value = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      value = value * 10 + (s_[pos_++] - '0');
      if (value > (1ll << 40)) return false;
    }
    if (pos_ == start + (negative ? 1 : 0)) return false;
    if (pos_ < s_.size() && (s_[pos_] == '.' || s_[pos_] == 'e' || s_[pos_] == 'E')) return false;
    if (negative) value = -value;
    return true;
  }

  // Skips any value (used for the members we do not stream).
  bool skip_value() {
    const char c = peek();
    if (c == '"') {
      std::string_view ignored;
      return string(ignored, scratch_);
    }
    if (c == '{' || c == '[') {
      const char close = c == '{' ? '}' : ']';
      ++pos_;
      if (consume(close)) return true;
      for (;;) {
        if (c == '{') {
          std::string_view key;
          if (!string(key, scratch_) || !consume(':')) return false;
        }
        if (!skip_value()) return false;
        if (consume(',')) continue;
        return consume(close);
      }
    }
    // number, true, false, null
    const size_t start = pos_;
    while (pos_ < s_.size() && std::strchr(",}] \n\r\t", s_[pos_]) == nullptr) ++pos_;
    return pos_ > start;
  }

 private:
  bool hex4(uint32_t& cp) {
    if (pos_ + 4 > s_.size()) return false;
    cp = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = s_[pos_++];
      cp <<= 4;
      if (h >= '0' && h <= '9') cp |= h - '0';
      else if (h >= 'a' && h <= 'f') cp |= h - 'a' + 10;
      else if (h >= 'A' && h <= 'F') cp |= h - 'A' + 10;
      else return false;
    }
    return true;
  }

  std::string_view s_;
  size_t pos_ = 0;
  std::string scratch_;
};

}  // namespace

std::optional<ModelTables> find_model_tables(std::string_view text) {
  Cursor cursor(text);
  std::string scratch;
  if (!cursor.consume('{')) return std::nullopt;
  std::optional<ModelTables> found;
  while (!cursor.consume('}')) {
    std::string_view key;
    if (!cursor.string(key, scratch) || !cursor.consume(':')) return std::nullopt;
    if (key == "model" && cursor.peek() == '{') {
      cursor.consume('{');
      ModelTables tables;
      bool have_vocab = false, have_merges = false;
      while (!cursor.consume('}')) {
        std::string_view model_key;
        std::string model_key_copy;
        if (!cursor.string(model_key, scratch) || !cursor.consume(':')) return std::nullopt;
        model_key_copy = model_key;
        cursor.skip_ws();
        const size_t begin = cursor.pos();
        if (!cursor.skip_value()) return std::nullopt;
        if (model_key_copy == "vocab") {
          tables.vocab = {begin, cursor.pos()};
          have_vocab = true;
        } else if (model_key_copy == "merges") {
          tables.merges = {begin, cursor.pos()};
          have_merges = true;
        }
        cursor.consume(',');
      }
      if (have_vocab && have_merges) found = tables;
    } else if (!cursor.skip_value()) {
      return std::nullopt;
    }
    cursor.consume(',');
  }
  return found;
}

void scan_vocab(std::string_view object, const std::function<void(std::string_view, long long)>& entry) {
  Cursor cursor(object);
  std::string scratch;
  if (!cursor.consume('{')) throw Error("tokenizer.json: model.vocab is not an object");
  if (cursor.consume('}')) return;
  for (;;) {
    std::string_view key;
    long long id;
    if (!cursor.string(key, scratch) || !cursor.consume(':') || !cursor.integer(id))
      throw Error("tokenizer.json: malformed model.vocab entry at byte " + std::to_string(cursor.pos()) +
                  " of the vocab (expected \"token\": integer id)");
    entry(key, id);
    if (cursor.consume(',')) continue;
    if (cursor.consume('}')) return;
    throw Error("tokenizer.json: malformed model.vocab (expected ',' or '}')");
  }
}

void scan_merges(std::string_view array,
                 const std::function<void(std::string_view, std::string_view, size_t)>& merge) {
  Cursor cursor(array);
  std::string scratch, left_copy;
  if (!cursor.consume('[')) throw Error("tokenizer.json: model.merges is not an array");
  if (cursor.consume(']')) return;
  for (size_t rank = 0;; ++rank) {
    std::string_view left, right;
    const std::string where = "tokenizer.json: merge #" + std::to_string(rank);
    if (cursor.peek() == '"') {
      std::string_view line;
      if (!cursor.string(line, scratch)) throw Error(where + " is not a valid JSON string");
      const size_t space = line.find(' ');
      if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos)
        throw Error(where + " '" + std::string(line) + "' is not two tokens separated by one space");
      left = line.substr(0, space);
      right = line.substr(space + 1);
      merge(left, right, rank);
    } else if (cursor.consume('[')) {
      std::string right_scratch;
      if (!cursor.string(left, scratch)) throw Error(where + " is neither \"a b\" nor [\"a\", \"b\"]");
      left_copy.assign(left);
      if (!cursor.consume(',') || !cursor.string(right, right_scratch) || !cursor.consume(']'))
        throw Error(where + " is neither \"a b\" nor [\"a\", \"b\"]");
      merge(left_copy, right, rank);
    } else {
      throw Error(where + " is neither \"a b\" nor [\"a\", \"b\"]");
    }
    if (cursor.consume(',')) continue;
    if (cursor.consume(']')) return;
    throw Error("tokenizer.json: malformed model.merges (expected ',' or ']')");
  }
}

}  // namespace inkling::tok_detail
