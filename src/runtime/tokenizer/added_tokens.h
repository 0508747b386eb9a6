// Added tokens (special or not) are cut out of the text before pre-tokenization,
// leftmost-longest, with HF's lstrip / rstrip / single_word rules.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace inkling::tok_detail {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

// A segment of the input: either plain text (id < 0) or one added token.
struct Segment {
  std::string_view text;
  int32_t id;
};

class AddedTokenMatcher {
 public:
  // Later tokens with the same content replace earlier ones.
  void build(const std::vector<AddedToken>& tokens);

  // Cuts `text` into segments (in order, covering it). Special tokens are only
  // recognized when parse_special is true.
  void split(std::string_view text, bool parse_special, std::vector<Segment>& out) const;

  bool empty() const { return patterns_.empty(); }

 private:
  struct Node {
    int32_t children_begin = 0;  // index into edges_
    int32_t children_count = 0;
    int32_t pattern = -1;        // token ending here
  };
  struct Edge {
    unsigned char byte;
    int32_t node;
  };
  struct Trie {
    std::vector<Node> nodes;
    std::vector<Edge> edges;
    bool first_byte[256] = {};
    void build(const std::vector<std::string>& words);
    // Longest pattern matching at text[pos]; returns its index and sets length, or -1.
    int32_t longest(std::string_view text, size_t pos, size_t& length) const;
  };

  void split_pass(std::string_view text, const Trie& trie, const std::vector<int32_t>& ids, bool parse_special,
                  std::vector<Segment>& out) const;

  std::vector<AddedToken> patterns_;
  Trie raw_trie_, normalized_trie_;
  std::vector<int32_t> raw_ids_, normalized_ids_;  // trie pattern -> index in patterns_
};

}  // namespace inkling::tok_detail
