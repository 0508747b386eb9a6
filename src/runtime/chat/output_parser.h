// Splits a model's generated ids into reasoning, answer text and tool calls. Works on
// ids for the structural markers, so a marker can never be split across text pieces,
// and no <|...|> special token ever reaches visible text.
//
// After the generation prompt `<|message_model|>` the model writes blocks:
//   <|content_thinking|> reasoning <|end_message|>
//   <|message_model|><|content_text|> answer <|end_message|>
//   <|message_model|>NAME<|content_invoke_tool_json|>{"name":...,"args":{...}}<|end_message|>
// and ends the turn with <|content_model_end_sampling|> (200006). <|end_message|> (200010)
// only closes a block.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/tokenizer/tokenizer.h"

namespace inkling {

namespace chat_tokens {
constexpr int32_t kMessageUser = 200000;
constexpr int32_t kMessageModel = 200001;
constexpr int32_t kMessageSystem = 200002;
constexpr int32_t kMessageTool = 200003;
constexpr int32_t kContentText = 200004;
constexpr int32_t kEndSampling = 200006;
constexpr int32_t kContentThinking = 200008;
constexpr int32_t kEndMessage = 200010;
constexpr int32_t kContentXml = 200024;
constexpr int32_t kInvokeToolJson = 200049;
constexpr int32_t kFirstSpecial = 199998;
constexpr int32_t kLastSpecial = 200057;
}  // namespace chat_tokens

struct ChatEvent {
  // With streamed tool calls a call is ToolCallStart, ToolCallDelta..., then ToolCall (or Error
  // when the finished call does not parse); without, only ToolCall / Error.
  enum class Kind { Reasoning, Content, ToolCall, Error, End, ToolCallStart, ToolCallDelta };
  Kind kind = Kind::Content;
  std::string text;       // Reasoning / Content: the delta; Error: what went wrong; End: "stop" or "incomplete"
  std::string name;       // ToolCall / ToolCallStart: the function name
  std::string arguments;  // ToolCall: the arguments object as JSON; ToolCallDelta: the next fragment of it;
                          // Error: the raw call text
};

struct OutputParserOptions {
  // Emit a call's arguments as they are generated (ToolCallStart / ToolCallDelta), as servers
  // stream them. The final ToolCall's arguments are then the model's own text of the "args"
  // object, so the deltas concatenate to exactly that; without streaming they are re-serialized
  // compactly.
  bool stream_tool_calls = false;
};

class OutputParser {
 public:
  explicit OutputParser(const Tokenizer& tokenizer, OutputParserOptions options = {});

  // Feeds one generated id; returns the events it completes. After the end token
  // (200006) further ids are ignored.
  std::vector<ChatEvent> push(int32_t id);
  // Generation stopped without the end token (max tokens): flushes held text and an
  // unterminated tool call, then End "incomplete". Returns nothing after End.
  std::vector<ChatEvent> finish();
  bool done() const { return done_; }
  // Whether the last id pushed left the parser inside a reasoning block.
  bool in_reasoning() const { return mode_ == Mode::Reasoning; }
  bool in_tool_call() const { return mode_ == Mode::ToolArgs; }

  // Everything so far as an assistant message: {"role", "content", ["reasoning_content"], ["tool_calls"]}
  // (tool_calls in the OpenAI shape, arguments as a JSON string).
  nlohmann::ordered_json message() const;
  const std::string& content() const { return content_; }
  const std::string& reasoning() const { return reasoning_; }

 private:
  enum class Mode { Header, Reasoning, Content, ToolArgs, Other };
  void emit_text(Mode mode, std::string text, std::vector<ChatEvent>& out);
  void close_block(std::vector<ChatEvent>& out);
  void finish_tool_call(std::vector<ChatEvent>& out);
  void flush_decoder(std::vector<ChatEvent>& out);
  // Streaming: scans the call text added since the last scan and emits the arguments so far.
  void stream_tool_args(std::vector<ChatEvent>& out);

  // Where the top-level "args" object lies in tool_args_, found by a structural scan (strings,
  // escapes and nesting; full validation happens when the call ends).
  struct CallScan {
    size_t scanned = 0;
    int depth = 0;
    bool in_string = false, escape = false;
    bool expect_key = false, capture = false, capturing_key = false;
    std::string buffer, last_key, json_name;
    size_t args_begin = std::string::npos, args_end = std::string::npos;
    size_t streamed = 0;  // bytes of the args object already emitted
    bool started = false;
  };

  OutputParserOptions options_;
  CallScan scan_;
  const Tokenizer* tokenizer_;
  IncrementalDecoder decoder_;
  Mode mode_ = Mode::Header;
  std::string header_;  // text after a role token, before its content kind (a tool name)
  std::string tool_name_;
  std::string tool_args_;
  std::string content_, reasoning_;
  nlohmann::ordered_json tool_calls_ = nlohmann::ordered_json::array();
  bool done_ = false;
};

}  // namespace inkling
