// The one internal request form every API front door maps into (OpenAI chat completions,
// completions and responses; Anthropic messages), and the events a running request produces.
// Knows nothing of HTTP or of any wire format.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/generate/sampler.h"
#include "runtime/grammar/grammar.h"

namespace inkling::serve {

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // a JSON object as text
};

// Members carry {} so designated initializers may name only some (GCC 12's -Wextra warns otherwise).
struct Message {
  std::string role{};                     // system | developer | user | assistant | tool
  std::vector<std::string> text_parts{};  // each part is its own block in the prompt
  std::string reasoning{};                // assistant: the reasoning it wrote
  std::vector<ToolCall> tool_calls{};     // assistant
  std::string tool_call_id{};             // tool: the call this result answers
  std::string name{};                     // tool: the function that produced it
};

struct ToolSpec {
  std::string name;
  std::string description;
  nlohmann::ordered_json parameters = nlohmann::ordered_json::object();  // JSON Schema
};

enum class ToolChoice { Auto, None, Required, Function };

struct Request {
  // Chat: messages through the chat template. Raw (completions): `raw_prompt` tokenized as is,
  // or `raw_prompt_tokens`, ids the client tokenized itself, used as they are.
  std::vector<Message> messages;
  std::optional<std::string> raw_prompt;
  std::optional<std::vector<int32_t>> raw_prompt_tokens;
  bool is_raw() const { return raw_prompt || raw_prompt_tokens; }
  std::vector<ToolSpec> tools;
  ToolChoice tool_choice = ToolChoice::Auto;
  std::string tool_choice_name;  // ToolChoice::Function
  bool parallel_tool_calls = true;

  SamplingParams sampling;
  bool seed_given = false;  // else a fresh seed per request
  int64_t max_tokens = 0;   // 0: until the context is full
  std::vector<std::string> stop;
  bool ignore_eos = false;   // benchmarks: run to max_tokens even past the end of the turn
  bool cache_prompt = true;  // may start from a kept state or snapshot whose tokens begin this prompt
  nlohmann::ordered_json reasoning_effort;  // null: the template's default
  int64_t reasoning_budget_tokens = -1;     // Anthropic thinking.budget_tokens; -1: from the effort (reasoning_budget.h)
  int top_logprobs = -1;                    // -1: no logprobs; 0..20: logprobs with that many alternatives
  // response_format / grammar: the answer must derive from this grammar (compiled by the front
  // door); `grammar_key` (its GBNF text) lets requests with the same grammar share mask caches.
  std::shared_ptr<const grammar::Grammar> grammar;
  std::string grammar_key;
  // tool_choice required / named: per tool name, the grammar of its call object
  // {"name": NAME, "args": <the tool's parameters>} and its key.
  std::map<std::string, std::pair<std::shared_ptr<const grammar::Grammar>, std::string>> tool_call_grammars;

  // Test mode only (`inkling serve --test-scripts`): the text, special-token strings included,
  // whose tokens replace sampling one by one; sampling resumes after the last one.
  std::string scripted_output;
  // Test-only (with allow_scripts): the inference loop throws when it admits this request, so a
  // test can see what clients and /health get once the loop has died.
  bool test_stop_loop = false;
};

struct TokenLogprob {
  std::string token;  // the token's text (UTF-8 bytes as decoded, may be a partial character)
  float logprob = 0.0f;
  std::vector<std::pair<std::string, float>> top;  // most likely alternatives, best first
};

enum class FinishReason { Stop, Length, ToolCalls, StopSequence, Cancelled, Error };
const char* finish_reason_name(FinishReason reason);

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;  // of prompt_tokens, those a kept state already held (not recomputed)
  int64_t completion_tokens = 0;
  int64_t reasoning_tokens = 0;
  double prompt_seconds = 0.0;      // queue exit to the first generated token
  double generation_seconds = 0.0;  // first to last generated token
  double queue_seconds = 0.0;       // submit to start of prefill
};

struct Event {
  enum class Kind {
    Reasoning,          // text: a reasoning delta
    Content,            // text: an answer delta (completions: the raw text)
    ToolCallStart,      // tool_index, tool_id, tool_name
    ToolCallArguments,  // tool_index, text: the next fragment of the arguments
    ToolCallEnd,        // tool_index, tool_id, tool_name, text: the whole arguments object
    Warning,            // text: something the log should show (a malformed tool call came back as content);
                        // tool_index / tool_id: the streamed call it withdraws, when one had started
    Finish,             // finish_reason, stop_sequence, usage; always the last event
  };
  Kind kind = Kind::Content;
  std::string text;
  int tool_index = -1;
  std::string tool_id, tool_name;
  std::vector<TokenLogprob> logprobs;  // Content: the tokens this delta came from (when requested)
  FinishReason finish_reason = FinishReason::Stop;
  std::string stop_sequence;  // FinishReason::StopSequence: the string that matched
  std::string error;          // FinishReason::Error: what went wrong
  Usage usage;
};

}  // namespace inkling::serve
