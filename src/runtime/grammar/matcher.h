// Byte-level matching of a Grammar and the allowed-token mask per decoding step.
//
// The parser state is a set of stacks (llama.cpp's design: each stack is one way the input so
// far can be derived, its top a byte set to match next). Stacks are hash-consed nodes
// (position, parent), so equal stacks are one id, a state is a short sorted list of ids, and
// what follows a node after one byte is computed once and kept. Left recursion is refused when
// the grammar is built, so expanding a stack always ends; ambiguity only adds stacks.
//
// The mask walks the vocabulary's byte trie once per state, but the walk for a stack is cached
// under the stack cut to its top few frames: what lies below matters only to tokens that finish
// those frames mid-token, and those are resolved per step against the real stack (xgrammar's
// "context-independent tokens", arrived at by truncation).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/grammar/grammar.h"
#include "runtime/grammar/vocabulary.h"

namespace inkling::grammar {

class MatchEngine;

struct MatcherStats {
  size_t stack_nodes = 0;
  size_t cached_walks = 0;    // trie walks kept, one per truncated stack
  size_t walks = 0;           // full trie walks done (cache misses)
  size_t resolutions = 0;     // sub-walks that resolved tokens finishing a truncated stack
  size_t state_hits = 0;      // masks served whole from the state cache
};

class GrammarMatcher {
 public:
  // `vocabulary` may be null for byte-only use (accept_bytes, can_end).
  GrammarMatcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocabulary> vocabulary);

  // Copies are cheap (the state is a few ids) and share the engine's caches; a matcher and its
  // copies must stay on one thread.
  GrammarMatcher(const GrammarMatcher&) = default;
  GrammarMatcher& operator=(const GrammarMatcher&) = default;

  // Advances by a token; false (and no change) when the grammar does not allow it. An end token
  // is accepted where the grammar may end, and then nothing more is.
  bool accept_token(int32_t id);
  // Advances by raw bytes; false (and no change) when they leave the grammar.
  bool accept_bytes(std::string_view bytes);
  // Every token that keeps the output valid (end tokens where it may end); mask is resized to
  // the vocabulary's mask size.
  void allowed_tokens(TokenMask& mask);

  bool can_end() const;
  // The shortest bytes that take the current state to where the grammar may end (empty when it
  // may end now): a way to close the output when a length budget runs out.
  std::string shortest_completion() const;
  // The token to force next so the output ends within `remaining` tokens (the shortest
  // completion, a byte token at a time, then an end token), or -1 while there is room to choose.
  int32_t closing_token(int64_t remaining) const;
  // An end token was accepted.
  bool finished() const { return finished_; }
  // Undoes the last `tokens` accepted tokens (accept_bytes counts as one).
  void rollback(size_t tokens);
  size_t accepted_count() const { return history_.size() - 1; }
  void reset();

  MatcherStats stats() const;
  const TokenVocabulary* vocabulary() const { return vocabulary_.get(); }

 private:
  std::shared_ptr<MatchEngine> engine_;
  std::shared_ptr<const TokenVocabulary> vocabulary_;
  std::vector<uint32_t> state_;
  std::vector<std::vector<uint32_t>> history_;  // state before each accepted token, then now
  std::vector<bool> finished_history_;
  bool finished_ = false;
};

// Whether the grammar derives exactly `text`.
bool grammar_accepts(const std::shared_ptr<const Grammar>& grammar, std::string_view text);

}  // namespace inkling::grammar
