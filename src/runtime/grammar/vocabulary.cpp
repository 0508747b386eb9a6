#include "runtime/grammar/vocabulary.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <numeric>

#include "runtime/tokenizer/tokenizer.h"
#include "tensor/error.h"

namespace inkling::grammar {

size_t TokenMask::count() const {
  size_t n = 0;
  for (uint64_t w : words_) n += size_t(std::popcount(w));
  return n;
}

std::vector<int32_t> TokenMask::ids() const {
  std::vector<int32_t> out;
  for (size_t w = 0; w < words_.size(); ++w)
    for (uint64_t bits = words_[w]; bits; bits &= bits - 1) out.push_back(int32_t(w * 64 + size_t(std::countr_zero(bits))));
  return out;
}

void mask_logits(const TokenMask& mask, std::span<float> logits) {
  const float kNegativeInfinity = -std::numeric_limits<float>::infinity();
  const auto& words = mask.words();
  const size_t n = logits.size();
  for (size_t w = 0; w * 64 < n; ++w) {
    const uint64_t bits = w < words.size() ? words[w] : 0;
    if (bits == ~uint64_t(0) && (w + 1) * 64 <= n) continue;
    for (size_t b = 0; b < 64 && w * 64 + b < n; ++b)
      if (!((bits >> b) & 1)) logits[w * 64 + b] = kNegativeInfinity;
  }
}

TokenVocabulary::TokenVocabulary(const std::vector<std::string>& token_bytes, const std::vector<bool>& excluded,
                                 std::vector<int32_t> end_tokens, int32_t mask_size)
    : mask_size_(mask_size), end_tokens_(std::move(end_tokens)), token_bytes_(token_bytes) {
  if (mask_size_ < int32_t(token_bytes.size())) throw Error("grammar: mask narrower than the vocabulary");
  for (int32_t id : end_tokens_)
    if (id < 0 || id >= mask_size_) throw Error("grammar: end token " + std::to_string(id) + " outside the mask");
  in_trie_.assign(token_bytes.size(), false);
  std::vector<int32_t> ids;
  for (size_t id = 0; id < token_bytes.size(); ++id) {
    if (token_bytes[id].empty() || (id < excluded.size() && excluded[id])) continue;
    in_trie_[id] = true;
    ids.push_back(int32_t(id));
    if (token_bytes[id].size() == 1 && byte_tokens_[uint8_t(token_bytes[id][0])] < 0)
      byte_tokens_[uint8_t(token_bytes[id][0])] = int32_t(id);
  }
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return token_bytes[size_t(a)] < token_bytes[size_t(b)] || (token_bytes[size_t(a)] == token_bytes[size_t(b)] && a < b);
  });
  // Preorder construction from the sorted strings: the path of open nodes is popped back to the
  // common prefix with the next string, closing the subtrees it leaves.
  node_byte_.push_back(0);
  node_depth_.push_back(0);
  subtree_end_.push_back(0);
  std::vector<uint32_t> node_tokens_count(1, 0);
  std::vector<uint32_t> path{0};
  std::string_view previous;
  for (int32_t id : ids) {
    std::string_view bytes = token_bytes[size_t(id)];
    size_t common = 0;
    while (common < previous.size() && common < bytes.size() && previous[common] == bytes[common]) ++common;
    while (path.size() > common + 1) {
      subtree_end_[path.back()] = uint32_t(node_byte_.size());
      path.pop_back();
    }
    for (size_t d = common; d < bytes.size(); ++d) {
      path.push_back(uint32_t(node_byte_.size()));
      node_byte_.push_back(uint8_t(bytes[d]));
      node_depth_.push_back(uint32_t(d + 1));
      subtree_end_.push_back(0);
      node_tokens_count.push_back(0);
    }
    max_depth_ = std::max<uint32_t>(max_depth_, uint32_t(bytes.size()));
    ++node_tokens_count[path.back()];
    sorted_tokens_.push_back(id);
    previous = bytes;
  }
  while (!path.empty()) {
    subtree_end_[path.back()] = uint32_t(node_byte_.size());
    path.pop_back();
  }
  // Tokens are in sorted order, which is preorder of their nodes: prefix sums give the ranges.
  token_begin_.assign(node_byte_.size() + 1, 0);
  for (size_t i = 0; i < node_byte_.size(); ++i) token_begin_[i + 1] = token_begin_[i] + node_tokens_count[i];
}

std::shared_ptr<const TokenVocabulary> TokenVocabulary::from_tokenizer(const Tokenizer& tokenizer, int32_t mask_size,
                                                                       std::vector<int32_t> end_tokens) {
  const int32_t n = tokenizer.vocab_size();
  std::vector<std::string> bytes(static_cast<size_t>(n));
  std::vector<bool> excluded(static_cast<size_t>(n), false);
  for (int32_t id = 0; id < n; ++id) {
    if (tokenizer.is_special(id)) {
      excluded[size_t(id)] = true;
      continue;
    }
    try {
      bytes[size_t(id)] = std::string(tokenizer.token_bytes(id));
    } catch (const Error&) {
      excluded[size_t(id)] = true;  // a hole in the id space
    }
  }
  if (end_tokens.empty()) {
    auto eos = tokenizer.eos_id();
    if (!eos) throw Error("grammar: the tokenizer names no EOS token; give the end tokens");
    end_tokens.push_back(*eos);
  }
  return std::make_shared<TokenVocabulary>(bytes, excluded, std::move(end_tokens), std::max(mask_size, n));
}

}  // namespace inkling::grammar
