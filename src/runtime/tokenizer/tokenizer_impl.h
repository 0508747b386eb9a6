// What every tokenizer loader fills (tokenizer.json in tokenizer.cpp, GGUF metadata in
// gguf_tokenizer.cpp): the BPE model, the pre-tokenizer and the added tokens. Internal to the
// tokenizer module.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/tokenizer/added_tokens.h"
#include "runtime/tokenizer/bpe.h"
#include "runtime/tokenizer/pre_tokenizer.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tensor/error.h"

namespace inkling {

struct Tokenizer::Impl {
  tok_detail::BpeModel bpe;
  tok_detail::PreTokenizer pre_tokenizer;
  tok_detail::AddedTokenMatcher matcher;
  std::vector<tok_detail::AddedToken> added;
  std::vector<int32_t> added_index;  // id -> index in added, or -1
  std::vector<std::string> added_bytes;
  int32_t id_limit = 0;
  std::optional<int32_t> bos, eos;
  bool add_bos = false;

  const tok_detail::AddedToken* added_token(int32_t id) const {
    if (id < 0 || id >= static_cast<int32_t>(added_index.size()) || added_index[id] < 0) return nullptr;
    return &added[added_index[id]];
  }

  std::string_view bytes(int32_t id) const {
    if (id >= 0 && id < static_cast<int32_t>(added_index.size()) && added_index[id] >= 0)
      return added_bytes[added_index[id]];
    if (id < 0 || id >= bpe.id_limit() || bpe.token_text(id).empty())
      throw Error("tokenizer: unknown token id " + std::to_string(id));
    return bpe.token_bytes(id);
  }

  void finish_added() {
    // Added tokens follow the vocab; their ids index tables too, so they are bounded like it.
    const size_t ceiling = static_cast<size_t>(bpe.id_limit()) + added.size() + tok_detail::kIdHoleAllowance;
    for (const tok_detail::AddedToken& token : added)
      if (static_cast<size_t>(token.id) >= ceiling)
        throw Error("tokenizer: added token '" + token.content + "' has id " + std::to_string(token.id) +
                    ", out of range for a vocab of " + std::to_string(bpe.id_limit()) + " ids and " +
                    std::to_string(added.size()) + " added tokens");
    // Later definitions of an id (tokenizer_config.json) replace earlier ones.
    std::vector<tok_detail::AddedToken> unique;
    std::vector<int32_t> index_of;
    for (const tok_detail::AddedToken& token : added) {
      if (token.id >= static_cast<int32_t>(index_of.size())) index_of.resize(token.id + 1, -1);
      if (index_of[token.id] >= 0) {
        unique[index_of[token.id]] = token;
      } else {
        index_of[token.id] = static_cast<int32_t>(unique.size());
        unique.push_back(token);
      }
    }
    added = std::move(unique);
    id_limit = bpe.id_limit();
    for (const tok_detail::AddedToken& token : added) id_limit = std::max(id_limit, token.id + 1);
    added_index.assign(id_limit, -1);
    added_bytes.clear();
    for (size_t i = 0; i < added.size(); ++i) {
      added_index[added[i].id] = static_cast<int32_t>(i);
      // The ByteLevel decoder maps added tokens too; text outside its alphabet passes unchanged.
      const auto raw = tok_detail::byte_level_to_bytes(added[i].content);
      added_bytes.push_back(raw ? *raw : added[i].content);
    }
    matcher.build(added);
  }

  std::optional<int32_t> lookup(std::string_view token) const {
    for (const tok_detail::AddedToken& t : added)
      if (t.content == token) return t.id;
    return bpe.token_id(token);
  }
};

}  // namespace inkling
