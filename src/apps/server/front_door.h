// What an API front door is: it parses its request body into the internal Request and writes
// that request's events back in its own wire format, as one JSON body or as an event stream.
// One file per API (openai_chat.cpp, openai_completions.cpp, anthropic_messages.cpp,
// openai_responses.cpp); server.cpp owns HTTP and knows none of their shapes.
#pragma once

#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "apps/server/http_util.h"
#include "runtime/serve/request.h"
#include "runtime/tokenizer/tokenizer.h"

namespace inkling::server {

using serve::Event;
using serve::FinishReason;

// The model's answer so far, in the order it was written: reasoning, text and tool-call blocks.
struct Block {
  enum class Kind { Reasoning, Text, ToolCall };
  Kind kind = Kind::Text;
  std::string text;  // ToolCall: the arguments JSON
  std::string id, name;
  int stream_index = -1;  // its index in a BlockStream (blocks withdrawn earlier keep theirs)
};

struct Turn {
  std::vector<Block> blocks;
  std::vector<serve::TokenLogprob> logprobs;
  bool finished = false;
  FinishReason finish_reason = FinishReason::Stop;
  std::string stop_sequence, error;
  serve::Usage usage;

  void add(const Event& event);
  std::string text() const;       // all text blocks
  std::string reasoning() const;  // all reasoning blocks
  std::vector<const Block*> tool_calls() const;
};

// Feeds events to a Turn and reports where blocks open, grow and close, which is how the
// Anthropic and Responses streams are shaped.
class BlockStream {
 public:
  virtual ~BlockStream() = default;
  // Returns the stream text (SSE) these events produce.
  std::string push(const Event& event);
  const Turn& turn() const { return turn_; }

 protected:
  virtual std::string open(const Block& block, int index) = 0;
  virtual std::string delta(const Block& block, int index, const std::string& text) = 0;
  virtual std::string close(const Block& block, int index) = 0;
  virtual std::string finish(const Turn& turn) = 0;  // after the last block closed

 private:
  Turn turn_;
  bool open_ = false;
  int index_ = -1, next_index_ = 0;  // stream index of the open block, of the next one
};

// The Responses API's stored responses: each one's conversation (without its instructions, which
// a follow-up does not inherit) and its answer, so a request naming it as previous_response_id
// continues that conversation. In memory, the most recent `capacity` kept.
class ResponseStore {
 public:
  explicit ResponseStore(size_t capacity = 1000) : capacity_(capacity) {}
  void put(const std::string& id, std::vector<serve::Message> conversation);
  std::optional<std::vector<serve::Message>> get(const std::string& id) const;
  size_t capacity() const { return capacity_; }

 private:
  size_t capacity_;
  mutable std::mutex mutex_;
  std::deque<std::pair<std::string, std::vector<serve::Message>>> entries_;  // oldest first
};

// Server-wide facts a front door reads.
struct DoorContext {
  const Tokenizer* tokenizer = nullptr;
  std::string model_name;
  SamplingParams default_sampling;  // the checkpoint's generation_config.json
  int64_t context = 0;
  bool allow_scripts = false;
  ResponseStore* responses = nullptr;  // the Responses API's stored responses
};

class Responder {
 public:
  virtual ~Responder() = default;
  // The prompt's length, known once it is encoded (before stream_begin).
  virtual void set_prompt_tokens(int64_t) {}
  // SSE text sent before any event (may be empty).
  virtual std::string stream_begin() { return {}; }
  // SSE text for one event; the Finish event ends the stream.
  virtual std::string stream_event(const Event& event) = 0;
  // The non-streaming body, once the turn finished without error.
  virtual json complete(const Turn& turn) = 0;
};

struct Prepared {
  serve::Request request;
  std::unique_ptr<Responder> responder;
  bool stream = false;
};

// Each throws ApiError for a request its API would refuse.
Prepared prepare_chat_completion(const json& body, const DoorContext& context);
Prepared prepare_completion(const json& body, const DoorContext& context);
Prepared prepare_message(const json& body, const DoorContext& context);
Prepared prepare_response(const json& body, const DoorContext& context);
// Anthropic count_tokens: the request as /v1/messages would read it (no max_tokens needed).
serve::Request parse_message_request(const json& body, const DoorContext& context, bool for_count);

// The OpenAI error body {"error": {...}} and the Anthropic one {"type": "error", "error": {...}}.
json openai_error(const ApiError& error);
json anthropic_error(const ApiError& error);

// Shared readers of sampling fields (temperature, top_p, top_k, min_p, penalties, seed), the
// reasoning effort (a 400 listing the valid values), and the test-only script.
void read_sampling(const json& body, const DoorContext& context, serve::Request& request);
nlohmann::ordered_json read_effort(const json& value, const char* param);
// Chat Completions' `response_format` ({"type": "text" | "json_object" | "json_schema", "json_schema":
// {"schema": ...}}) and `grammar` (GBNF text) into r.grammar; an unsupported schema feature is a
// 400 naming it.
void read_response_format(const json& body, serve::Request& r);
// Responses' `text.format` ({"type": "json_schema", "schema": ...} or json_object / text).
void read_text_format(const json& format, serve::Request& r);
void read_test_script(const json& body, const DoorContext& context, serve::Request& request);
// "inkling_test_stop_loop": true makes the inference loop die on admission (--test-scripts only).
void read_test_stop_loop(const json& body, const DoorContext& context, serve::Request& request);
// max_tokens under its API's name(s) (at least 1), n (1 only) and stop (at most 16 strings).
void read_common_limits(const json& body, serve::Request& request, const char* max_key_a, const char* max_key_b);
// tool_choice "auto" | "none" | "required" (the OpenAI string forms); anything else is a 400.
serve::ToolChoice tool_choice_mode(const std::string& value);
// A named tool_choice must name a declared tool; only that tool is then declared to the model.
void check_tool_choice(serve::Request& request, const char* param);

// A server-sent event: "event: NAME\n" when named, then "data: JSON\n\n".
std::string sse(const json& data, const std::string& event_name = {});

}  // namespace inkling::server
