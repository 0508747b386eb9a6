#include "runtime/serve/response_constraint.h"

#include "runtime/chat/output_parser.h"

namespace inkling::serve {

namespace t = chat_tokens;

ResponseConstraint::ResponseConstraint(grammar::GrammarMatcher matcher)
    : matcher_(std::move(matcher)), byte_token_(256, -1), reasoning_text_(matcher_.vocabulary()->mask_size()) {
  const grammar::TokenVocabulary& vocab = *matcher_.vocabulary();
  for (int32_t id = 0; id < vocab.mask_size(); ++id) {
    if (!vocab.in_trie(id)) continue;
    reasoning_text_.allow(id);
    if (vocab.bytes(id).size() == 1) byte_token_[uint8_t(vocab.bytes(id)[0])] = id;
  }
  reasoning_text_.allow(t::kEndMessage);
}

ResponseConstraint ResponseConstraint::in_block(grammar::GrammarMatcher matcher) {
  ResponseConstraint constraint(std::move(matcher));
  constraint.phase_ = Phase::Answer;
  return constraint;
}

void ResponseConstraint::only(grammar::TokenMask& mask, int32_t token) const {
  mask = grammar::TokenMask(matcher_.vocabulary()->mask_size());
  mask.allow(token);
}

bool ResponseConstraint::allowed(grammar::TokenMask& mask, int64_t remaining) {
  switch (phase_) {
    case Phase::Start:
      // The reasoning budget may take <|content_thinking|> away again (at effort none).
      only(mask, t::kContentText);
      mask.allow(t::kContentThinking);
      return true;
    case Phase::Reasoning:
      mask = reasoning_text_;  // free text, until the model or its budget closes it
      return true;
    case Phase::Header: only(mask, t::kMessageModel); return true;
    case Phase::Kind: only(mask, t::kContentText); return true;
    case Phase::Answer: {
      if (remaining >= 0) {
        // The completion, then <|end_message|> and the end of the turn; a margin because the
        // model's next token can lengthen the completion (an opened string, a new object).
        constexpr int64_t kMargin = 8;
        const std::string rest = matcher_.shortest_completion();
        if (remaining <= int64_t(rest.size()) + 2 + kMargin) {
          if (rest.empty()) {
            if (matcher_.can_end()) {
              only(mask, t::kEndMessage);
              return true;
            }
          } else if (int32_t id = byte_token_[uint8_t(rest[0])]; id >= 0) {
            only(mask, id);
            return true;
          }
        }
      }
      matcher_.allowed_tokens(mask);
      return true;
    }
    case Phase::End: only(mask, t::kEndSampling); return true;
    case Phase::Done: return false;
  }
  return false;
}

void ResponseConstraint::accept(int32_t token) {
  switch (phase_) {
    case Phase::Start:
      phase_ = token == t::kContentThinking ? Phase::Reasoning : token == t::kContentText ? Phase::Answer : Phase::Done;
      break;
    case Phase::Reasoning:
      if (token == t::kEndMessage) phase_ = Phase::Header;
      break;
    case Phase::Header: phase_ = token == t::kMessageModel ? Phase::Kind : Phase::Done; break;
    case Phase::Kind: phase_ = token == t::kContentText ? Phase::Answer : Phase::Done; break;
    case Phase::Answer:
      if (!matcher_.accept_token(token)) phase_ = Phase::Done;
      else if (matcher_.finished()) phase_ = Phase::End;
      break;
    case Phase::End:
    case Phase::Done: phase_ = Phase::Done; break;
  }
}

}  // namespace inkling::serve
