// A context-free grammar over bytes: the form every constraint (GBNF text, JSON Schema, free
// JSON) is lowered to before matching. Terminals are sets of bytes, so a character class over
// code points becomes alternatives of UTF-8 byte sequences and a token that splits a character
// needs no special case in the matcher.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace inkling::grammar {

class ByteSet {
 public:
  void add(uint8_t b) { words_[b >> 6] |= uint64_t(1) << (b & 63); }
  void add_range(uint8_t lo, uint8_t hi) {
    for (unsigned b = lo; b <= hi; ++b) add(uint8_t(b));
  }
  bool contains(uint8_t b) const { return (words_[b >> 6] >> (b & 63)) & 1; }
  bool empty() const { return (words_[0] | words_[1] | words_[2] | words_[3]) == 0; }
  void merge(const ByteSet& other) {
    for (size_t i = 0; i < 4; ++i) words_[i] |= other.words_[i];
  }
  bool operator==(const ByteSet&) const = default;

 private:
  std::array<uint64_t, 4> words_{};
};

enum class ElementKind : uint8_t { kBytes, kRule, kEnd };

struct Element {
  ElementKind kind;
  uint32_t value;  // kBytes: index into byte_sets; kRule: rule id; kEnd: unused
};

// Alternatives are laid out back to back in `elements`, each closed by a kEnd, so a parse
// position is one index and "the rest of this alternative" is everything up to the next kEnd.
struct Grammar {
  std::vector<Element> elements;
  std::vector<ByteSet> byte_sets;
  std::vector<std::vector<uint32_t>> rule_alternatives;  // per rule: index of each alternative's first element
  std::vector<std::string> rule_names;
  uint32_t root = 0;

  size_t rule_count() const { return rule_alternatives.size(); }
};

// Sizes past which a grammar is refused: grammars come from untrusted requests.
inline constexpr size_t kMaxGrammarElements = 1u << 21;
inline constexpr size_t kMaxGrammarRules = 1u << 18;
inline constexpr uint32_t kMaxRepetition = 10000;

// Builds a Grammar rule by rule; finish() checks it (every referenced rule defined, the root
// has a finite derivation, no left recursion) and drops alternatives that can never finish.
class GrammarBuilder {
 public:
  // Declares (or finds) a rule by name; its alternatives may be added later.
  uint32_t rule(std::string_view name);
  // A fresh helper rule named after `base` (base-1, base-2, ...).
  uint32_t helper_rule(std::string_view base);
  bool is_defined(uint32_t rule) const { return defined_[rule]; }

  // Alternatives are built one at a time: begin, append elements, end.
  void begin_alternative(uint32_t rule);
  void append_bytes(const ByteSet& set);
  void append_byte(uint8_t b);
  void append_rule(uint32_t rule);
  void end_alternative();

  Grammar finish(std::string_view root_name);

 private:
  Grammar grammar_;
  std::vector<std::vector<Element>> pending_;  // alternatives under construction, per nesting
  std::vector<uint32_t> pending_rule_;
  std::vector<std::vector<std::vector<Element>>> alternatives_;  // per rule, before layout
  std::vector<bool> defined_;
  size_t element_count_ = 0;
};

// Parses llama.cpp's GBNF notation (docs/grammar.md lists the subset); throws inkling::Error
// with the line and column of the problem.
Grammar parse_gbnf(std::string_view text, std::string_view root_name = "root");

// Appends the UTF-8 byte sequences of the code points in [lo, hi] (surrogates left out) as
// per-byte ranges: the class [lo-hi] as alternatives of byte-set sequences.
void utf8_range_sequences(uint32_t lo, uint32_t hi,
                          std::vector<std::vector<std::pair<uint8_t, uint8_t>>>& out);

}  // namespace inkling::grammar
