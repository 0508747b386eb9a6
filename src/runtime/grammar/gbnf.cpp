// GBNF (llama.cpp's grammar notation) to the byte-level Grammar: parsed into a small tree per
// rule, then lowered with helper rules for groups, repetitions and multi-byte classes.
#include <algorithm>
#include <limits>
#include <map>
#include <memory>

#include "common/utf8.h"
#include "runtime/grammar/grammar.h"
#include "tensor/error.h"

namespace inkling::grammar {

namespace {

constexpr uint32_t kUnbounded = std::numeric_limits<uint32_t>::max();
constexpr int kMaxNesting = 256;

using CodeRanges = std::vector<std::pair<uint32_t, uint32_t>>;

struct Item;
using Sequence = std::vector<Item>;

struct Item {
  enum class Kind { kLiteral, kClass, kRef, kGroup } kind = Kind::kLiteral;
  std::string literal;  // UTF-8 bytes
  CodeRanges ranges;    // kClass, already negated and merged
  std::string name;     // kRef
  std::vector<Sequence> alternatives;  // kGroup
  uint32_t min = 1, max = 1;
};

struct RuleText {
  std::string name;
  std::vector<Sequence> alternatives;
};

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

CodeRanges normalize(CodeRanges ranges, bool negated) {
  std::sort(ranges.begin(), ranges.end());
  CodeRanges merged;
  for (auto [lo, hi] : ranges) {
    if (!merged.empty() && lo <= merged.back().second + 1)
      merged.back().second = std::max(merged.back().second, hi);
    else
      merged.push_back({lo, hi});
  }
  if (!negated) return merged;
  CodeRanges complement;
  uint32_t next = 0;
  for (auto [lo, hi] : merged) {
    if (lo > next) complement.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= 0x10FFFF) complement.push_back({next, 0x10FFFF});
  return complement;
}

class GbnfParser {
 public:
  explicit GbnfParser(std::string_view text) : text_(text) {}

  std::vector<RuleText> parse() {
    std::vector<RuleText> rules;
    skip_space(true);
    while (pos_ < text_.size()) {
      RuleText rule;
      rule.name = parse_name();
      skip_space(false);
      if (text_.substr(pos_, 3) != "::=") fail("expected '::=' after rule name '" + rule.name + "'");
      pos_ += 3;
      skip_space(true);
      rule.alternatives = parse_alternatives(0);
      for (const auto& other : rules)
        if (other.name == rule.name) fail("rule '" + rule.name + "' is defined twice");
      rules.push_back(std::move(rule));
      skip_space(true);
    }
    return rules;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    throw Error("grammar: " + what + " at line " + std::to_string(line) + ", column " + std::to_string(column));
  }

  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }

  // Skips blanks and comments; newlines too when `newlines` (inside parentheses, after '|'
  // or '::=').
  void skip_space(bool newlines) {
    while (!at_end()) {
      char c = text_[pos_];
      if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
        ++pos_;
      } else if (c == '#') {
        while (!at_end() && text_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  // At a newline outside parentheses: the rule goes on unless what follows is the next rule
  // ("name ::=") or the end of the text.
  bool rule_continues_after_newline() {
    size_t saved = pos_;
    skip_space(true);
    bool continues = !at_end();
    if (continues) {
      size_t p = pos_;
      while (p < text_.size() && is_name_char(text_[p])) ++p;
      if (p > pos_) {
        while (p < text_.size() && (text_[p] == ' ' || text_[p] == '\t')) ++p;
        if (text_.substr(p, 3) == "::=") continues = false;
      }
    }
    if (!continues) pos_ = saved;
    return continues;
  }

  std::string parse_name() {
    size_t start = pos_;
    while (!at_end() && is_name_char(text_[pos_])) ++pos_;
    if (pos_ == start) fail("expected a rule name");
    return std::string(text_.substr(start, pos_ - start));
  }

  std::vector<Sequence> parse_alternatives(int depth) {
    if (depth > kMaxNesting) fail("groups nested deeper than " + std::to_string(kMaxNesting));
    std::vector<Sequence> alternatives;
    alternatives.push_back(parse_sequence(depth));
    while (peek() == '|') {
      ++pos_;
      skip_space(true);
      alternatives.push_back(parse_sequence(depth));
    }
    return alternatives;
  }

  Sequence parse_sequence(int depth) {
    const bool nested = depth > 0;
    Sequence items;
    for (;;) {
      skip_space(nested);
      if (!nested && peek() == '\n') {
        if (!rule_continues_after_newline()) break;
        continue;
      }
      char c = peek();
      if (at_end() || c == '|' || c == ')') break;
      Item item;
      if (c == '"') {
        ++pos_;
        item.kind = Item::Kind::kLiteral;
        while (peek() != '"') {
          if (at_end() || peek() == '\n') fail("unterminated string literal");
          append_utf8(item.literal, parse_char());
        }
        ++pos_;
      } else if (c == '[') {
        ++pos_;
        item.kind = Item::Kind::kClass;
        bool negated = false;
        if (peek() == '^') {
          negated = true;
          ++pos_;
        }
        CodeRanges ranges;
        while (peek() != ']') {
          if (at_end() || peek() == '\n') fail("unterminated character class");
          uint32_t lo = parse_char();
          uint32_t hi = lo;
          if (peek() == '-' && pos_ + 1 < text_.size() && text_[pos_ + 1] != ']') {
            ++pos_;
            hi = parse_char();
            if (hi < lo) fail("character range is reversed");
          }
          ranges.push_back({lo, hi});
        }
        ++pos_;
        item.ranges = normalize(std::move(ranges), negated);
      } else if (c == '.') {
        ++pos_;
        item.kind = Item::Kind::kClass;
        item.ranges = {{0, 0x10FFFF}};
      } else if (c == '(') {
        ++pos_;
        // xgrammar's lookahead assertions, "(= ...)", only speed its matcher up: the language
        // is the same without them.
        bool lookahead = peek() == '=';
        if (lookahead) ++pos_;
        skip_space(true);
        item.kind = Item::Kind::kGroup;
        item.alternatives = parse_alternatives(depth + 1);
        if (peek() != ')') fail("expected ')'");
        ++pos_;
        if (lookahead) continue;
      } else if (is_name_char(c)) {
        item.kind = Item::Kind::kRef;
        item.name = parse_name();
      } else if (c == '<') {
        fail("token references (<[id]>) are not supported");
      } else {
        fail(std::string("unexpected character '") + c + "'");
      }
      skip_space(nested);
      parse_quantifier(item);
      items.push_back(std::move(item));
    }
    return items;
  }

  void parse_quantifier(Item& item) {
    char c = peek();
    if (c == '*') {
      item.min = 0, item.max = kUnbounded, ++pos_;
    } else if (c == '+') {
      item.min = 1, item.max = kUnbounded, ++pos_;
    } else if (c == '?') {
      item.min = 0, item.max = 1, ++pos_;
    } else if (c == '{') {
      ++pos_;
      skip_space(false);
      item.min = peek() == ',' ? 0 : parse_count();
      skip_space(false);
      if (peek() == ',') {
        ++pos_;
        skip_space(false);
        item.max = peek() == '}' ? kUnbounded : parse_count();
      } else {
        item.max = item.min;
      }
      skip_space(false);
      if (peek() != '}') fail("expected '}' after a repetition count");
      ++pos_;
      if (item.max < item.min) fail("repetition {m,n} with n < m");
    } else {
      return;
    }
    const bool nested_quantifier = peek() == '*' || peek() == '+' || peek() == '?';
    if (nested_quantifier) fail("two quantifiers in a row (use parentheses)");
  }

  uint32_t parse_count() {
    if (peek() < '0' || peek() > '9') fail("expected a repetition count");
    uint64_t value = 0;
    while (peek() >= '0' && peek() <= '9') {
      value = value * 10 + uint64_t(peek() - '0');
      if (value > kMaxRepetition) fail("repetition count above " + std::to_string(kMaxRepetition));
      ++pos_;
    }
    return uint32_t(value);
  }

  uint32_t parse_hex(int digits) {
    uint32_t value = 0;
    for (int i = 0; i < digits; ++i) {
      char c = peek();
      int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
      if (d < 0) fail("expected " + std::to_string(digits) + " hex digits");
      value = value * 16 + uint32_t(d);
      ++pos_;
    }
    if (value > 0x10FFFF) fail("code point above U+10FFFF");
    return value;
  }

  // One character of a literal or class: an escape or a UTF-8 encoded code point.
  uint32_t parse_char() {
    unsigned char c = uint8_t(peek());
    if (c == '\\') {
      ++pos_;
      char e = peek();
      ++pos_;
      switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '0': return 0;
        case 'x': return parse_hex(2);
        case 'u': return parse_hex(4);
        case 'U': return parse_hex(8);
        case '\\': case '"': case '[': case ']': case '-': case '^': case '/': case '\'':
          return uint32_t(e);
        default:
          --pos_;
          fail(std::string("unknown escape '\\") + e + "'");
      }
    }
    const auto* at = reinterpret_cast<const unsigned char*>(text_.data()) + pos_;
    if (valid_utf8_length(at, text_.size() - pos_) == 0) fail("invalid UTF-8");
    size_t length = 0;
    const uint32_t cp = decode_utf8(at, length);
    pos_ += length;
    return cp;
  }

  std::string_view text_;
  size_t pos_ = 0;
};

class Lowering {
 public:
  explicit Lowering(GrammarBuilder& builder) : builder_(builder) {}

  void define(const RuleText& rule) {
    uint32_t id = builder_.rule(rule.name);
    lower_alternatives(id, rule.alternatives);
  }

 private:
  void lower_alternatives(uint32_t rule, const std::vector<Sequence>& alternatives) {
    for (const Sequence& seq : alternatives) {
      builder_.begin_alternative(rule);
      for (const Item& item : seq) lower_item(item);
      builder_.end_alternative();
    }
  }

  // Appends the item once, as it stands (no repetition).
  void lower_once(const Item& item) {
    switch (item.kind) {
      case Item::Kind::kLiteral:
        for (char c : item.literal) builder_.append_byte(uint8_t(c));
        break;
      case Item::Kind::kClass:
        append_class(item.ranges);
        break;
      case Item::Kind::kRef:
        builder_.append_rule(builder_.rule(item.name));
        break;
      case Item::Kind::kGroup:
        if (item.alternatives.size() == 1) {
          for (const Item& inner : item.alternatives[0]) lower_item(inner);
        } else {
          uint32_t helper = builder_.helper_rule("group");
          lower_alternatives(helper, item.alternatives);
          builder_.append_rule(helper);
        }
        break;
    }
  }

  // A rule that derives the item once, for repetitions (a single element needs none).
  void append_unit(const Item& item, uint32_t& unit_rule, bool& have_rule) {
    if (!have_rule) {
      unit_rule = builder_.helper_rule("repeat");
      builder_.begin_alternative(unit_rule);
      lower_once(item);
      builder_.end_alternative();
      have_rule = true;
    }
    builder_.append_rule(unit_rule);
  }

  void lower_item(const Item& item) {
    if (item.min == 1 && item.max == 1) {
      lower_once(item);
      return;
    }
    uint32_t unit = 0;
    bool have_unit = false;
    auto emit_unit = [&] {
      const bool single_byte_element = (item.kind == Item::Kind::kLiteral && item.literal.size() == 1) ||
                                       item.kind == Item::Kind::kRef || is_single_byte_class(item);
      if (single_byte_element)
        lower_once(item);
      else
        append_unit(item, unit, have_unit);
    };
    for (uint32_t i = 0; i < item.min; ++i) emit_unit();
    if (item.max == kUnbounded) {
      // star ::= unit star | (empty): right recursion, so the matcher's stack stays flat.
      uint32_t star = builder_.helper_rule("star");
      builder_.begin_alternative(star);
      emit_unit();
      builder_.append_rule(star);
      builder_.end_alternative();
      builder_.begin_alternative(star);
      builder_.end_alternative();
      builder_.append_rule(star);
    } else if (item.max > item.min) {
      // Nested optionals, (unit (unit (unit)?)?)?, so each count has one derivation.
      uint32_t inner = 0;
      for (uint32_t k = 0; k < item.max - item.min; ++k) {
        uint32_t optional = builder_.helper_rule("optional");
        builder_.begin_alternative(optional);
        emit_unit();
        if (k > 0) builder_.append_rule(inner);
        builder_.end_alternative();
        builder_.begin_alternative(optional);
        builder_.end_alternative();
        inner = optional;
      }
      builder_.append_rule(inner);
    }
  }

  static bool is_single_byte_class(const Item& item) {
    return item.kind == Item::Kind::kClass && !item.ranges.empty() && item.ranges.back().second < 0x80;
  }

  void append_class(const CodeRanges& ranges) {
    if (ranges.empty() || ranges.back().second < 0x80) {
      ByteSet set;
      for (auto [lo, hi] : ranges) set.add_range(uint8_t(lo), uint8_t(hi));
      if (set.empty()) {
        // An empty class matches nothing: a rule without alternatives, which finish() prunes.
        builder_.append_rule(builder_.helper_rule("empty-class"));
        return;
      }
      builder_.append_bytes(set);
      return;
    }
    auto cached = class_rules_.find(ranges);
    if (cached != class_rules_.end()) {
      builder_.append_rule(cached->second);
      return;
    }
    std::vector<std::vector<std::pair<uint8_t, uint8_t>>> sequences;
    for (auto [lo, hi] : ranges) utf8_range_sequences(lo, hi, sequences);
    uint32_t helper = builder_.helper_rule("class");
    ByteSet single;
    for (const auto& seq : sequences)
      if (seq.size() == 1) single.add_range(seq[0].first, seq[0].second);
    if (!single.empty()) {
      builder_.begin_alternative(helper);
      builder_.append_bytes(single);
      builder_.end_alternative();
    }
    for (const auto& seq : sequences) {
      if (seq.size() == 1) continue;
      builder_.begin_alternative(helper);
      for (auto [lo, hi] : seq) {
        ByteSet set;
        set.add_range(lo, hi);
        builder_.append_bytes(set);
      }
      builder_.end_alternative();
    }
    class_rules_.emplace(ranges, helper);
    builder_.append_rule(helper);
  }

  GrammarBuilder& builder_;
  std::map<CodeRanges, uint32_t> class_rules_;
};

}  // namespace

Grammar parse_gbnf(std::string_view text, std::string_view root_name) {
  std::vector<RuleText> rules = GbnfParser(text).parse();
  if (rules.empty()) throw Error("grammar: no rules");
  GrammarBuilder builder;
  Lowering lowering(builder);
  for (const RuleText& rule : rules) lowering.define(rule);
  return builder.finish(root_name);
}

}  // namespace inkling::grammar
