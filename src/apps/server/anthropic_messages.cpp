// POST /v1/messages and /v1/messages/count_tokens: the Anthropic Messages API.
//
// Thinking: `{"type": "disabled"}` renders effort none; `{"type": "enabled", "budget_tokens": B}`
// picks the effort from the budget: B < 2048 low, < 8192 medium, < 24576 high, else max; B itself
// bounds the reasoning (runtime/serve/reasoning_budget.h).
// Without `thinking`, the template's default effort applies.
#include "apps/server/front_door.h"

namespace inkling::server {

namespace {

using serve::Message;
using serve::Request;
using serve::ToolChoice;

std::string block_text(const json& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_null()) return {};
  if (!content.is_array()) throw bad_request(where + " must be a string or an array of blocks", "messages");
  std::string out;
  for (const json& block : content) {
    if (!block.is_object()) throw bad_request(where + ": blocks must be objects", "messages");
    std::string type = get_string(block, "type").value_or("");
    if (type == "text") out += get_string(block, "text").value_or("");
    else throw bad_request(where + ": block type \"" + type + "\" is not supported here", "messages");
  }
  return out;
}

// Anthropic keeps tool results inside user messages and tool uses inside assistant messages;
// the template wants tool messages and assistant tool_calls.
void read_message(const json& m, size_t index, std::vector<Message>& out) {
  const std::string where = "messages[" + std::to_string(index) + "]";
  if (!m.is_object()) throw bad_request(where + " must be an object", "messages");
  auto role = get_string(m, "role");
  if (!role || (*role != "user" && *role != "assistant"))
    throw bad_request(where + ".role must be \"user\" or \"assistant\"", "messages");
  const json* content = field(m, "content");
  if (!content) throw bad_request(where + ".content is required", "messages");
  Message message;
  message.role = *role;
  if (content->is_string()) {
    message.text_parts.push_back(content->get<std::string>());
    out.push_back(std::move(message));
    return;
  }
  if (!content->is_array()) throw bad_request(where + ".content must be a string or an array of blocks", "messages");
  for (size_t b = 0; b < content->size(); ++b) {
    const json& block = (*content)[b];
    const std::string at = where + ".content[" + std::to_string(b) + "]";
    if (!block.is_object()) throw bad_request(at + " must be an object", "messages");
    const std::string type = get_string(block, "type").value_or("");
    if (type == "text") {
      message.text_parts.push_back(get_string(block, "text").value_or(""));
    } else if (type == "thinking" && *role == "assistant") {
      message.reasoning += get_string(block, "thinking").value_or("");
    } else if (type == "redacted_thinking") {
      continue;
    } else if (type == "tool_use" && *role == "assistant") {
      auto name = get_string(block, "name");
      if (!name) throw bad_request(at + ".name is required", "messages");
      const json* input = field(block, "input");
      if (input && !input->is_object()) throw bad_request(at + ".input must be an object", "messages");
      message.tool_calls.push_back({get_string(block, "id").value_or(""), *name, input ? dump(*input) : "{}"});
    } else if (type == "tool_result" && *role == "user") {
      // Text the user wrote before the results stays before them.
      if (!message.text_parts.empty()) {
        out.push_back(std::move(message));
        message = Message{};
        message.role = "user";
      }
      Message result;
      result.role = "tool";
      result.tool_call_id = get_string(block, "tool_use_id").value_or("");
      std::string text = block_text(block.contains("content") ? block["content"] : json(), at + ".content");
      if (get_bool(block, "is_error").value_or(false)) text = "Error: " + text;
      result.text_parts.push_back(text);
      out.push_back(std::move(result));
    } else {
      throw bad_request(at + ": block type \"" + type + "\" is not supported in a " + *role + " message", "messages");
    }
  }
  if (!message.text_parts.empty() || !message.reasoning.empty() || !message.tool_calls.empty()) out.push_back(std::move(message));
}

const char* stop_reason(FinishReason reason) {
  switch (reason) {
    case FinishReason::Length: return "max_tokens";
    case FinishReason::ToolCalls: return "tool_use";
    case FinishReason::StopSequence: return "stop_sequence";
    default: return "end_turn";
  }
}

json block_json(const Block& block, bool with_text) {
  switch (block.kind) {
    case Block::Kind::Reasoning:
      return {{"type", "thinking"}, {"thinking", with_text ? block.text : ""}, {"signature", ""}};
    case Block::Kind::Text:
      return {{"type", "text"}, {"text", with_text ? block.text : ""}};
    case Block::Kind::ToolCall: {
      json input = json::object();
      if (with_text) {
        input = json::parse(block.text, nullptr, false);
        if (!input.is_object()) input = json::object();
      }
      return {{"type", "tool_use"}, {"id", block.id}, {"name", block.name}, {"input", input}};
    }
  }
  return json::object();
}

json usage_json(const serve::Usage& u) {
  // As Anthropic counts: input_tokens are the ones not read from the cache.
  return {{"input_tokens", u.prompt_tokens - u.cached_tokens}, {"output_tokens", u.completion_tokens},
          {"cache_creation_input_tokens", 0}, {"cache_read_input_tokens", u.cached_tokens}};
}

class MessageStream final : public BlockStream {
 public:
  MessageStream(std::string id, std::string model) : id_(std::move(id)), model_(std::move(model)) {}

 protected:
  std::string open(const Block& block, int index) override {
    return sse({{"type", "content_block_start"}, {"index", index}, {"content_block", block_json(block, false)}},
               "content_block_start");
  }
  std::string delta(const Block& block, int index, const std::string& text) override {
    json d;
    if (block.kind == Block::Kind::Reasoning) d = {{"type", "thinking_delta"}, {"thinking", text}};
    else if (block.kind == Block::Kind::Text) d = {{"type", "text_delta"}, {"text", text}};
    else d = {{"type", "input_json_delta"}, {"partial_json", text}};
    return sse({{"type", "content_block_delta"}, {"index", index}, {"delta", d}}, "content_block_delta");
  }
  std::string close(const Block& block, int index) override {
    std::string out;
    if (block.kind == Block::Kind::Reasoning)
      out += sse({{"type", "content_block_delta"}, {"index", index}, {"delta", {{"type", "signature_delta"}, {"signature", ""}}}},
                 "content_block_delta");
    return out + sse({{"type", "content_block_stop"}, {"index", index}}, "content_block_stop");
  }
  std::string finish(const Turn& turn) override {
    if (turn.finish_reason == FinishReason::Error)
      return sse(anthropic_error(ApiError(500, "api_error", turn.error)), "error");
    json delta = {{"stop_reason", stop_reason(turn.finish_reason)},
                  {"stop_sequence", turn.stop_sequence.empty() ? json() : json(turn.stop_sequence)}};
    return sse({{"type", "message_delta"}, {"delta", delta}, {"usage", usage_json(turn.usage)}}, "message_delta") +
           sse({{"type", "message_stop"}}, "message_stop");
  }

 private:
  std::string id_, model_;
};

class MessageResponder final : public Responder {
 public:
  MessageResponder(std::string model, int64_t prompt_tokens)
      : id_(random_id("msg_")), model_(std::move(model)), prompt_tokens_(prompt_tokens), stream_(id_, model_) {}

  std::string stream_begin() override {
    json message = {{"id", id_}, {"type", "message"}, {"role", "assistant"}, {"model", model_},
                    {"content", json::array()}, {"stop_reason", json()}, {"stop_sequence", json()},
                    {"usage", {{"input_tokens", prompt_tokens_}, {"output_tokens", 0},
                               {"cache_creation_input_tokens", 0}, {"cache_read_input_tokens", 0}}}};
    return sse({{"type", "message_start"}, {"message", message}}, "message_start") + sse({{"type", "ping"}}, "ping");
  }
  std::string stream_event(const Event& e) override { return stream_.push(e); }

  json complete(const Turn& turn) override {
    json content = json::array();
    for (const Block& block : turn.blocks) content.push_back(block_json(block, true));
    return {{"id", id_}, {"type", "message"}, {"role", "assistant"}, {"model", model_}, {"content", content},
            {"stop_reason", stop_reason(turn.finish_reason)},
            {"stop_sequence", turn.stop_sequence.empty() ? json() : json(turn.stop_sequence)},
            {"usage", usage_json(turn.usage)}};
  }

  void set_prompt_tokens(int64_t n) override { prompt_tokens_ = n; }

 private:
  std::string id_, model_;
  int64_t prompt_tokens_;
  MessageStream stream_;
};

}  // namespace

Request parse_message_request(const json& body, const DoorContext& context, bool for_count) {
  Request r;
  if (const json* system = field(body, "system")) {
    Message m;
    m.role = "system";
    if (system->is_string()) m.text_parts.push_back(system->get<std::string>());
    else if (system->is_array()) m.text_parts.push_back(block_text(*system, "system"));
    else throw bad_request("\"system\" must be a string or an array of text blocks", "system");
    r.messages.push_back(std::move(m));
  }
  const json* messages = get_array(body, "messages");
  if (!messages) throw bad_request("messages: Field required", "messages");
  // Anthropic's API refuses an empty list too: there is no turn to answer.
  if (messages->empty()) throw bad_request("messages: at least one message is required", "messages");
  for (size_t i = 0; i < messages->size(); ++i) read_message((*messages)[i], i, r.messages);
  if (const json* tools = get_array(body, "tools")) {
    for (const json& tool : *tools) {
      if (!tool.is_object()) throw bad_request("tools entries must be objects", "tools");
      // Server tools (web search, bash, ...) carry a type and no input_schema: skipped.
      if (!tool.contains("input_schema") && tool.contains("type") && get_string(tool, "type").value_or("") != "custom") continue;
      auto name = get_string(tool, "name");
      if (!name || name->empty()) throw bad_request("tools[].name is required", "tools");
      serve::ToolSpec spec;
      spec.name = *name;
      spec.description = get_string(tool, "description").value_or("");
      if (const json* schema = get_object(tool, "input_schema")) spec.parameters = *schema;
      r.tools.push_back(std::move(spec));
    }
  }
  if (const json* choice = get_object(body, "tool_choice")) {
    std::string type = get_string(*choice, "type").value_or("auto");
    if (type == "auto") r.tool_choice = ToolChoice::Auto;
    else if (type == "any") r.tool_choice = ToolChoice::Required;
    else if (type == "none") r.tool_choice = ToolChoice::None;
    else if (type == "tool") {
      auto name = get_string(*choice, "name");
      if (!name) throw bad_request("tool_choice.name is required for type \"tool\"", "tool_choice");
      r.tool_choice = ToolChoice::Function;
      r.tool_choice_name = *name;
    } else {
      throw bad_request("tool_choice.type must be auto, any, tool or none", "tool_choice");
    }
    if (get_bool(*choice, "disable_parallel_tool_use").value_or(false)) r.parallel_tool_calls = false;
  }
  check_tool_choice(r, "tool_choice");
  if (const json* thinking = get_object(body, "thinking")) {
    std::string type = get_string(*thinking, "type").value_or("");
    if (type == "disabled") {
      r.reasoning_effort = "none";
    } else if (type == "enabled") {
      auto budget = get_integer(*thinking, "budget_tokens");
      if (!budget) throw bad_request("thinking.budget_tokens is required when thinking is enabled", "thinking");
      if (*budget < 1024) throw bad_request("thinking.budget_tokens must be at least 1024", "thinking");
      auto max_tokens = get_integer(body, "max_tokens");
      if (!for_count && max_tokens && *budget >= *max_tokens)
        throw bad_request("max_tokens must be greater than thinking.budget_tokens", "thinking");
      r.reasoning_budget_tokens = *budget;
      r.reasoning_effort = *budget < 2048 ? "low" : *budget < 8192 ? "medium" : *budget < 24576 ? "high" : "max";
    } else if (type == "adaptive") {
      // The template's default effort.
    } else {
      throw bad_request("thinking.type must be \"enabled\" or \"disabled\"", "thinking");
    }
  }
  read_sampling(body, context, r);
  r.stop = get_strings(body, "stop_sequences");
  if (!for_count) {
    auto max_tokens = get_integer(body, "max_tokens");
    if (!max_tokens) throw bad_request("max_tokens: Field required", "max_tokens");
    if (*max_tokens < 1) throw bad_request("max_tokens: must be at least 1", "max_tokens");
    r.max_tokens = *max_tokens;
  }
  read_test_script(body, context, r);
  return r;
}

Prepared prepare_message(const json& body, const DoorContext& context) {
  Prepared p;
  p.request = parse_message_request(body, context, false);
  p.stream = get_bool(body, "stream").value_or(false);
  p.responder = std::make_unique<MessageResponder>(get_string(body, "model").value_or(context.model_name), 0);
  return p;
}

}  // namespace inkling::server
