// response_format / grammar enforced over the Inkling turn: the model reasons freely (its budget
// is enforced beside this, by limit_reasoning in reasoning_budget.h), then the answer block's text follows the grammar and the turn ends right after it:
//   [<|content_thinking|> reasoning <|end_message|> <|message_model|>] <|content_text|> ANSWER
//   <|end_message|> <|content_model_end_sampling|>
// The grammar never sees the reasoning, so a schema cannot be broken by it, and it starts where
// the answer does (the mistake other servers made was constraining the whole turn).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/grammar/matcher.h"

namespace inkling::serve {

class ResponseConstraint {
 public:
  // `matcher`'s vocabulary ends the grammar with <|end_message|>.
  explicit ResponseConstraint(grammar::GrammarMatcher matcher);
  // A constraint already inside its block (a forced tool call's JSON, after its header).
  static ResponseConstraint in_block(grammar::GrammarMatcher matcher);

  // The tokens allowed next; false when every token is (inside the reasoning). With
  // `remaining` tokens left of max_tokens (negative: no limit), the answer is closed in time by
  // the grammar's shortest completion, one byte token at a time, so it parses even then.
  bool allowed(grammar::TokenMask& mask, int64_t remaining = -1);
  // Advances by the token emitted. A token it did not allow (a test script) ends the constraint.
  void accept(int32_t token);
  bool in_answer() const { return phase_ == Phase::Answer; }

 private:
  enum class Phase { Start, Reasoning, Header, Kind, Answer, End, Done };
  void only(grammar::TokenMask& mask, int32_t token) const;

  grammar::GrammarMatcher matcher_;
  std::vector<int32_t> byte_token_;  // the one-byte token of each byte value (-1: none)
  // Inside the reasoning: any text token, and <|end_message|> as the only special token, so the
  // block cannot turn into an answer the grammar never sees (<|content_text|> without a close).
  grammar::TokenMask reasoning_text_;
  Phase phase_ = Phase::Start;
};

}  // namespace inkling::serve
