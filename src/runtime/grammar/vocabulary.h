// The token strings of a vocabulary as a byte trie, built once per tokenizer and shared by
// every matcher: the allowed-token mask is one walk of this trie with the parser state.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace inkling {
class Tokenizer;
}

namespace inkling::grammar {

// One bit per token id.
class TokenMask {
 public:
  TokenMask() = default;
  explicit TokenMask(int32_t size) : size_(size), words_((size_t(size) + 63) / 64, 0) {}

  int32_t size() const { return size_; }
  bool allowed(int32_t id) const {
    return id >= 0 && id < size_ && ((words_[size_t(id) >> 6] >> (id & 63)) & 1);
  }
  void allow(int32_t id) { words_[size_t(id) >> 6] |= uint64_t(1) << (id & 63); }
  void clear() { std::fill(words_.begin(), words_.end(), 0); }
  size_t count() const;
  std::vector<int32_t> ids() const;
  std::vector<uint64_t>& words() { return words_; }
  const std::vector<uint64_t>& words() const { return words_; }

 private:
  int32_t size_ = 0;
  std::vector<uint64_t> words_;
};

// Sets the logit of every token the mask does not allow to -inf (ids past the mask too), so no
// sampler draws it.
void mask_logits(const TokenMask& mask, std::span<float> logits);

class TokenVocabulary {
 public:
  // `token_bytes[id]` is the id's decoded bytes; ids in `excluded` (special tokens) and empty
  // strings never enter the trie. `end_tokens` are allowed exactly where the grammar may end.
  // `mask_size` is the logits' width (a model's padded vocabulary may exceed the tokenizer's).
  TokenVocabulary(const std::vector<std::string>& token_bytes, const std::vector<bool>& excluded,
                  std::vector<int32_t> end_tokens, int32_t mask_size);

  // Every non-special token of the tokenizer; EOS (or `end_tokens` when given) ends.
  static std::shared_ptr<const TokenVocabulary> from_tokenizer(const Tokenizer& tokenizer, int32_t mask_size,
                                                               std::vector<int32_t> end_tokens = {});

  int32_t mask_size() const { return mask_size_; }
  const std::vector<int32_t>& end_tokens() const { return end_tokens_; }
  const std::string& bytes(int32_t id) const { return token_bytes_[size_t(id)]; }
  bool in_trie(int32_t id) const { return id >= 0 && size_t(id) < in_trie_.size() && in_trie_[size_t(id)]; }
  // The token of exactly this one byte (-1: none).
  int32_t byte_token(uint8_t b) const { return byte_tokens_[b]; }

  // Trie in preorder; node 0 is the empty prefix. The subtree of node i is [i, subtree_end[i]).
  size_t node_count() const { return node_byte_.size(); }
  uint8_t node_byte(size_t i) const { return node_byte_[i]; }
  uint32_t node_depth(size_t i) const { return node_depth_[i]; }
  uint32_t subtree_end(size_t i) const { return subtree_end_[i]; }
  // Tokens whose bytes end at node i: sorted_tokens_[token_begin_[i] .. token_begin_[i+1]).
  const int32_t* tokens_begin(size_t i) const { return sorted_tokens_.data() + token_begin_[i]; }
  const int32_t* tokens_end(size_t i) const { return sorted_tokens_.data() + token_begin_[i + 1]; }
  uint32_t max_depth() const { return max_depth_; }

 private:
  int32_t mask_size_;
  std::vector<int32_t> end_tokens_;
  std::vector<std::string> token_bytes_;
  std::vector<bool> in_trie_;
  std::vector<uint8_t> node_byte_;
  std::vector<uint32_t> node_depth_, subtree_end_, token_begin_;
  std::vector<int32_t> sorted_tokens_;
  uint32_t max_depth_ = 0;
  std::vector<int32_t> byte_tokens_ = std::vector<int32_t>(256, -1);
};

}  // namespace inkling::grammar
