#include "runtime/tokenizer/added_tokens.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "runtime/tokenizer/unicode_classes.h"
#include "runtime/tokenizer/utf8.h"

namespace inkling::tok_detail {

namespace {

uint32_t last_code_point(std::string_view text) {
  size_t start = text.size() - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  size_t len;
  return decode_utf8(reinterpret_cast<const unsigned char*>(text.data()) + start, len);
}

uint32_t first_code_point(std::string_view text) {
  size_t len;
  return decode_utf8(reinterpret_cast<const unsigned char*>(text.data()), len);
}

// Approximates the Unicode \w of Rust's regex crate (letters, marks, digits, '_').
bool is_word_char(uint32_t cp) {
  const uint8_t flags = class_table()(cp);
  const bool mark = (flags & kUpperish) && (flags & kLowerish);
  return cp == '_' || (flags & (kLetter | kNumber)) || mark;
}

bool is_space(uint32_t cp) { return class_table()(cp) & kSpace; }

// Start of the whitespace run that ends text.
size_t trailing_space_start(std::string_view text) {
  while (!text.empty()) {
    const uint32_t cp = last_code_point(text);
    if (!is_space(cp)) break;
    size_t start = text.size() - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    text = text.substr(0, start);
  }
  return text.size();
}

// Length of the whitespace run that starts text.
size_t leading_space_length(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t len;
    const uint32_t cp = decode_utf8(reinterpret_cast<const unsigned char*>(text.data()) + pos, len);
    if (!is_space(cp)) break;
    pos += len;
  }
  return pos;
}

}  // namespace

void AddedTokenMatcher::Trie::build(const std::vector<std::string>& words) {
  // Build with maps, then flatten into sorted edge arrays for lookup.
  struct BuildNode {
    std::map<unsigned char, int32_t> children;
    int32_t pattern = -1;
  };
  std::vector<BuildNode> build_nodes(1);
  for (size_t w = 0; w < words.size(); ++w) {
    int32_t node = 0;
    for (const char c : words[w]) {
      const auto byte = static_cast<unsigned char>(c);
      auto it = build_nodes[node].children.find(byte);
      if (it == build_nodes[node].children.end()) {
        build_nodes.emplace_back();
        it = build_nodes[node].children.emplace(byte, static_cast<int32_t>(build_nodes.size() - 1)).first;
      }
      node = it->second;
    }
    build_nodes[node].pattern = static_cast<int32_t>(w);
    if (!words[w].empty()) first_byte[static_cast<unsigned char>(words[w][0])] = true;
  }
  nodes.assign(build_nodes.size(), Node{});
  edges.clear();
  for (size_t i = 0; i < build_nodes.size(); ++i) {
    nodes[i].children_begin = static_cast<int32_t>(edges.size());
    nodes[i].children_count = static_cast<int32_t>(build_nodes[i].children.size());
    nodes[i].pattern = build_nodes[i].pattern;
    for (const auto& [byte, child] : build_nodes[i].children) edges.push_back({byte, child});
  }
}

int32_t AddedTokenMatcher::Trie::longest(std::string_view text, size_t pos, size_t& length) const {
  int32_t node = 0;
  int32_t best = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    const Node& n = nodes[node];
    const auto byte = static_cast<unsigned char>(text[i]);
    const Edge* begin = edges.data() + n.children_begin;
    const Edge* end = begin + n.children_count;
    const Edge* edge = std::lower_bound(begin, end, byte, [](const Edge& e, unsigned char b) { return e.byte < b; });
    if (edge == end || edge->byte != byte) break;
    node = edge->node;
    if (nodes[node].pattern >= 0) {
      best = nodes[node].pattern;
      length = i + 1 - pos;
    }
  }
  return best;
}

void AddedTokenMatcher::build(const std::vector<AddedToken>& tokens) {
  patterns_.clear();
  std::map<std::string, size_t> by_content;
  for (const AddedToken& token : tokens) {
    if (token.content.empty()) continue;
    auto [it, inserted] = by_content.emplace(token.content, patterns_.size());
    if (inserted) {
      patterns_.push_back(token);
    } else {
      patterns_[it->second] = token;
    }
  }
  std::vector<std::string> raw, normalized;
  raw_ids_.clear();
  normalized_ids_.clear();
  for (size_t i = 0; i < patterns_.size(); ++i) {
    auto& words = patterns_[i].normalized ? normalized : raw;
    auto& ids = patterns_[i].normalized ? normalized_ids_ : raw_ids_;
    words.push_back(patterns_[i].content);
    ids.push_back(static_cast<int32_t>(i));
  }
  raw_trie_ = Trie{};
  normalized_trie_ = Trie{};
  raw_trie_.build(raw);
  normalized_trie_.build(normalized);
}

void AddedTokenMatcher::split_pass(std::string_view text, const Trie& trie, const std::vector<int32_t>& ids,
                                   bool parse_special, std::vector<Segment>& out) const {
  size_t start_offset = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    if (!trie.first_byte[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    size_t length = 0;
    const int32_t pattern = trie.longest(text, pos, length);
    if (pattern < 0) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + length;
    pos = stop;  // matches never overlap, even discarded ones
    const AddedToken& token = patterns_[ids[pattern]];
    if (token.special && !parse_special) continue;
    if (token.single_word) {
      const bool word_before = start > 0 && is_word_char(last_code_point(text.substr(0, start)));
      const bool word_after = stop < text.size() && is_word_char(first_code_point(text.substr(stop)));
      if (word_before || word_after) continue;
    }
    if (token.lstrip) start = std::max(trailing_space_start(text.substr(0, start)), start_offset);
    if (token.rstrip) stop += leading_space_length(text.substr(stop));
    start = std::max(start, start_offset);
    if (stop <= start) continue;  // swallowed by the previous token's rstrip
    if (start_offset < start) out.push_back({text.substr(start_offset, start - start_offset), -1});
    out.push_back({text.substr(start, stop - start), token.id});
    start_offset = stop;
    pos = std::max(pos, stop);
  }
  if (start_offset < text.size()) out.push_back({text.substr(start_offset), -1});
}

void AddedTokenMatcher::split(std::string_view text, bool parse_special, std::vector<Segment>& out) const {
  if (patterns_.empty()) {
    if (!text.empty()) out.push_back({text, -1});
    return;
  }
  if (normalized_ids_.empty()) {
    split_pass(text, raw_trie_, raw_ids_, parse_special, out);
    return;
  }
  // Without a normalizer the normalized tokens match the same text, but only
  // inside what the non-normalized pass left over (HF's two-pass order).
  std::vector<Segment> first;
  split_pass(text, raw_trie_, raw_ids_, parse_special, first);
  for (const Segment& segment : first) {
    if (segment.id >= 0) {
      out.push_back(segment);
    } else {
      split_pass(segment.text, normalized_trie_, normalized_ids_, parse_special, out);
    }
  }
}

}  // namespace inkling::tok_detail
