// Turns the ids one request generates into its events: reasoning, answer text and tool calls
// split on token ids (OutputParser), stop strings applied to the answer with a partial match
// held back, tool calls numbered and named, logprobs attached to the text they produced.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/chat/output_parser.h"
#include "runtime/serve/request.h"
#include "runtime/tokenizer/tokenizer.h"

namespace inkling::serve {

// Holds back the end of a text stream while it could still become a stop string.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  // Appends `text`; returns what can be shown now. After a match, returns the text before it
  // and matched() names the stop string; later pushes return nothing.
  std::string push(const std::string& text);
  // The held tail (no stop string can match any more).
  std::string flush();
  const std::string* matched() const { return matched_ ? &stops_[matched_index_] : nullptr; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool matched_ = false;
  size_t matched_index_ = 0;
};

class TurnOutput {
 public:
  // `call_id_prefix` makes tool-call ids unique across requests ("call_<prefix>_<n>").
  TurnOutput(const Tokenizer& tokenizer, const Request& request, std::string call_id_prefix);

  // One generated id, with the logits that chose it when logprobs are on (else empty).
  void push(int32_t id, std::span<const float> logits, std::vector<Event>& out);
  // Generation ended: flushes held text and an unfinished block.
  void finish(std::vector<Event>& out);

  // Whether generation should end here: a stop string matched, or a tool call ended while
  // parallel_tool_calls is false.
  bool should_stop() const { return stop_matcher_.matched() != nullptr || stop_after_call_; }
  const std::string* matched_stop() const { return stop_matcher_.matched(); }
  int tool_calls() const { return completed_calls_; }
  int64_t reasoning_tokens() const { return reasoning_tokens_; }
  bool in_reasoning() const { return !raw_ && parser_.in_reasoning(); }

 private:
  void handle(std::vector<ChatEvent>& events, std::vector<Event>& out);
  void content(std::string text, std::vector<Event>& out);  // through the stop strings
  void emit_content(std::string shown, std::vector<Event>& out);
  void logprob_of(int32_t id, std::span<const float> logits);
  std::string token_string(int32_t id) const;

  const Tokenizer* tokenizer_;
  const Request* request_;
  std::string call_id_prefix_;
  bool raw_;  // completions: no parser, the decoded text is the output
  OutputParser parser_;
  IncrementalDecoder decoder_;
  StopMatcher stop_matcher_;
  std::vector<TokenLogprob> pending_logprobs_;
  int tool_calls_ = 0;       // calls started (their stream index)
  int completed_calls_ = 0;  // calls that parsed
  bool call_open_ = false;
  bool stop_after_call_ = false;
  int64_t reasoning_tokens_ = 0;
  std::string current_call_id_;
};

}  // namespace inkling::serve
