// tool_choice "required" / a named function, enforced over the Inkling call format without a
// grammar: the model may reason first; where its answer would begin, the call's header
// `<|message_model|>NAME<|content_invoke_tool_json|>` is written for it and the model writes the
// JSON. The name is walked token by token over the declared names: the model's own token when it
// continues one of them, else the continuation it rates highest. The forcer does not constrain
// the JSON itself: once the header is written, the engine constrains it with the tool's grammar
// (Request::tool_call_grammars, through ResponseConstraint::in_block).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/serve/request.h"
#include "runtime/tokenizer/tokenizer.h"

namespace inkling::serve {

class ToolCallForcer {
 public:
  ToolCallForcer(const Tokenizer& tokenizer, const Request& request);
  // Whether the request asks for a forced call at all.
  bool active() const { return phase_ != Phase::Done; }
  // The token to emit, given the one sampling (or a script) proposes and the logits it came from.
  // `consumed` says whether the proposal was used up (emitted, or replaced in place as when the
  // end of the turn becomes the end of the reasoning block) rather than deferred by an inserted
  // token: a scripted output advances only then.
  int32_t choose(int32_t candidate, std::span<const float> logits, bool& consumed);
  // Once the call's header is written: the tool it names.
  const std::string& chosen() const { return chosen_; }

 private:
  enum class Phase { Start, Reasoning, Header, Name, Invoke, Done };
  int32_t next_token(int32_t candidate, std::span<const float> logits, bool& consumed);
  int32_t name_token(int32_t candidate, std::span<const float> logits);

  std::vector<std::vector<int32_t>> name_tokens_;  // of each allowed tool
  std::vector<std::string> names_;                  // the same tools' names
  std::string chosen_;
  std::vector<size_t> live_;                        // tools whose name agrees with the tokens so far
  size_t written_ = 0;                              // name tokens written
  Phase phase_ = Phase::Done;
};

}  // namespace inkling::serve
