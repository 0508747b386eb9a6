// POST /v1/responses: the OpenAI Responses API (input items in, output items out).
#include "apps/server/front_door.h"

namespace inkling::server {

namespace {

using serve::Message;
using serve::Request;
using serve::ToolChoice;

std::string item_text(const json& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_null()) return {};
  if (!content.is_array()) throw bad_request(where + " must be a string or an array of content parts", "input");
  std::string out;
  for (const json& part : content) {
    if (!part.is_object()) throw bad_request(where + ": content parts must be objects", "input");
    std::string type = get_string(part, "type").value_or("input_text");
    if (type == "input_text" || type == "output_text" || type == "text" || type == "reasoning_text" ||
        type == "summary_text")
      out += get_string(part, "text").value_or("");
    else
      throw bad_request(where + ": content type \"" + type + "\" is not supported (this server runs the text model)", "input");
  }
  return out;
}

// Consecutive reasoning, message and function_call items of the model form one assistant turn.
Message& assistant_turn(std::vector<Message>& out) {
  if (out.empty() || out.back().role != "assistant") out.push_back(Message{.role = "assistant"});
  return out.back();
}

void read_input(const json& input, std::vector<Message>& out) {
  if (input.is_string()) {
    out.push_back(Message{.role = "user", .text_parts = {input.get<std::string>()}});
    return;
  }
  if (!input.is_array()) throw bad_request("\"input\" must be a string or an array of items", "input");
  for (size_t i = 0; i < input.size(); ++i) {
    const json& item = input[i];
    const std::string where = "input[" + std::to_string(i) + "]";
    if (!item.is_object()) throw bad_request(where + " must be an object", "input");
    std::string type = get_string(item, "type").value_or(item.contains("role") ? "message" : "");
    if (type == "message") {
      auto role = get_string(item, "role");
      if (!role || (*role != "user" && *role != "assistant" && *role != "system" && *role != "developer"))
        throw bad_request(where + ".role must be user, assistant, system or developer", "input");
      std::string text = item_text(item.contains("content") ? item["content"] : json(), where + ".content");
      if (*role == "assistant") {
        Message& turn = assistant_turn(out);
        if (!turn.tool_calls.empty()) out.push_back(Message{.role = "assistant"});  // text after calls: a new turn
        out.back().text_parts.push_back(text);
      } else {
        out.push_back(Message{.role = *role, .text_parts = {text}});
      }
    } else if (type == "reasoning") {
      std::string text;
      if (const json* content = get_array(item, "content")) text = item_text(*content, where + ".content");
      if (text.empty())
        if (const json* summary = get_array(item, "summary")) text = item_text(*summary, where + ".summary");
      Message& turn = assistant_turn(out);
      if (!turn.text_parts.empty() || !turn.tool_calls.empty()) out.push_back(Message{.role = "assistant"});
      out.back().reasoning += text;
    } else if (type == "function_call") {
      auto name = get_string(item, "name");
      if (!name) throw bad_request(where + ".name is required", "input");
      std::string call_id = get_string(item, "call_id").value_or(get_string(item, "id").value_or(""));
      assistant_turn(out).tool_calls.push_back({call_id, *name, get_string(item, "arguments").value_or("{}")});
    } else if (type == "function_call_output") {
      Message result{.role = "tool"};
      result.tool_call_id = get_string(item, "call_id").value_or("");
      const json* output = field(item, "output");
      result.text_parts.push_back(output ? item_text(*output, where + ".output") : "");
      out.push_back(std::move(result));
    } else if (type == "item_reference") {
      throw bad_request(where + ": item references need stored responses, which this server does not keep", "input");
    } else {
      throw bad_request(where + ": item type \"" + type + "\" is not supported", "input");
    }
  }
}

json usage_json(const serve::Usage& u) {
  return {{"input_tokens", u.prompt_tokens},
          {"input_tokens_details", {{"cached_tokens", u.cached_tokens}}},
          {"output_tokens", u.completion_tokens},
          {"output_tokens_details", {{"reasoning_tokens", u.reasoning_tokens}}},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

class ResponseResponder final : public Responder, private BlockStream {
 public:
  ResponseResponder(std::string model, json echo) : id_(random_id("resp_")), model_(std::move(model)), echo_(std::move(echo)) {
    created_ = unix_time();
  }

  std::string stream_begin() override {
    json response = envelope("in_progress", json::array(), json());
    std::string out = event("response.created", {{"response", response}});
    return out + event("response.in_progress", {{"response", response}});
  }
  std::string stream_event(const Event& e) override { return push(e); }
  json complete(const Turn& turn) override { return final_response(turn); }

 private:
  std::string item_id(const Block& block, int index) {
    while (int(item_ids_.size()) <= index) item_ids_.push_back({});
    if (item_ids_[size_t(index)].empty())
      item_ids_[size_t(index)] = random_id(block.kind == Block::Kind::Reasoning ? "rs_"
                                           : block.kind == Block::Kind::Text    ? "msg_"
                                                                                : "fc_");
    return item_ids_[size_t(index)];
  }
  json item(const Block& block, int index, bool done) {
    const std::string status = done ? "completed" : "in_progress";
    switch (block.kind) {
      case Block::Kind::Reasoning:
        return {{"type", "reasoning"}, {"id", item_id(block, index)}, {"summary", json::array()},
                {"content", done ? json::array({{{"type", "reasoning_text"}, {"text", block.text}}}) : json::array()},
                {"status", status}};
      case Block::Kind::Text:
        return {{"type", "message"}, {"id", item_id(block, index)}, {"status", status}, {"role", "assistant"},
                {"content", done ? json::array({output_text(block.text)}) : json::array()}};
      case Block::Kind::ToolCall:
        return {{"type", "function_call"}, {"id", item_id(block, index)}, {"call_id", block.id}, {"name", block.name},
                {"arguments", done ? block.text : ""}, {"status", status}};
    }
    return json::object();
  }
  static json output_text(const std::string& text) {
    return {{"type", "output_text"}, {"text", text}, {"annotations", json::array()}, {"logprobs", json::array()}};
  }
  std::string event(const std::string& type, json body) {
    json data = {{"type", type}, {"sequence_number", sequence_++}};
    for (auto& [key, value] : body.items()) data[key] = value;
    return sse(data, type);
  }

  std::string open(const Block& block, int index) override {
    std::string out = event("response.output_item.added", {{"output_index", index}, {"item", item(block, index, false)}});
    if (block.kind == Block::Kind::Text)
      out += event("response.content_part.added", {{"item_id", item_id(block, index)}, {"output_index", index},
                                                   {"content_index", 0}, {"part", output_text("")}});
    if (block.kind == Block::Kind::Reasoning)
      out += event("response.content_part.added", {{"item_id", item_id(block, index)}, {"output_index", index},
                                                   {"content_index", 0}, {"part", {{"type", "reasoning_text"}, {"text", ""}}}});
    return out;
  }
  std::string delta(const Block& block, int index, const std::string& text) override {
    const char* type = block.kind == Block::Kind::Reasoning ? "response.reasoning_text.delta"
                       : block.kind == Block::Kind::Text    ? "response.output_text.delta"
                                                            : "response.function_call_arguments.delta";
    json body = {{"item_id", item_id(block, index)}, {"output_index", index}};
    if (block.kind != Block::Kind::ToolCall) body["content_index"] = 0;
    body["delta"] = text;
    if (block.kind == Block::Kind::Text) body["logprobs"] = json::array();
    return event(type, body);
  }
  std::string close(const Block& block, int index) override {
    std::string out;
    const std::string id = item_id(block, index);
    if (block.kind == Block::Kind::Text) {
      out += event("response.output_text.done", {{"item_id", id}, {"output_index", index}, {"content_index", 0},
                                                 {"text", block.text}, {"logprobs", json::array()}});
      out += event("response.content_part.done",
                   {{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"part", output_text(block.text)}});
    } else if (block.kind == Block::Kind::Reasoning) {
      out += event("response.reasoning_text.done",
                   {{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"text", block.text}});
      out += event("response.content_part.done", {{"item_id", id}, {"output_index", index}, {"content_index", 0},
                                                  {"part", {{"type", "reasoning_text"}, {"text", block.text}}}});
    } else {
      out += event("response.function_call_arguments.done",
                   {{"item_id", id}, {"output_index", index}, {"name", block.name}, {"arguments", block.text}});
    }
    return out + event("response.output_item.done", {{"output_index", index}, {"item", item(block, index, true)}});
  }
  std::string finish(const Turn& turn) override {
    if (turn.finish_reason == FinishReason::Error) {
      json response = envelope("failed", json::array(), json());
      response["error"] = {{"code", "server_error"}, {"message", turn.error}};
      return event("response.failed", {{"response", response}});
    }
    json response = final_response(turn);
    return event(turn.finish_reason == FinishReason::Length ? "response.incomplete" : "response.completed",
                 {{"response", response}});
  }

  json final_response(const Turn& turn) {
    remember(turn);
    json output = json::array();
    for (size_t i = 0; i < turn.blocks.size(); ++i) {
      const Block& block = turn.blocks[i];
      output.push_back(item(block, block.stream_index >= 0 ? block.stream_index : int(i), true));
    }
    const bool incomplete = turn.finish_reason == FinishReason::Length;
    if (incomplete && !output.empty()) output.back()["status"] = "incomplete";  // cut off by the limit
    json response = envelope(incomplete ? "incomplete" : "completed", output, usage_json(turn.usage));
    if (incomplete) response["incomplete_details"] = {{"reason", "max_output_tokens"}};
    return response;
  }
  json envelope(const std::string& status, json output, json usage) {
    json r = {{"id", id_}, {"object", "response"}, {"created_at", created_}, {"status", status}, {"model", model_},
              {"output", std::move(output)}, {"error", json()}, {"incomplete_details", json()},
              {"parallel_tool_calls", parallel_tool_calls_},
              {"previous_response_id", previous_id_.empty() ? json() : json(previous_id_)},
              {"store", store_ != nullptr}};
    for (auto& [key, value] : echo_.items()) r[key] = value;
    r["usage"] = std::move(usage);
    return r;
  }

  // Keeps the conversation and this answer for a follow-up that names this response (once).
  void remember(const Turn& turn) {
    if (!store_ || remembered_ || turn.finish_reason == FinishReason::Error) return;
    remembered_ = true;
    std::vector<serve::Message> conversation = conversation_;
    serve::Message answer{.role = "assistant"};
    for (const Block& block : turn.blocks) {
      if (block.kind == Block::Kind::Reasoning) answer.reasoning += block.text;
      if (block.kind == Block::Kind::Text) answer.text_parts.push_back(block.text);
      if (block.kind == Block::Kind::ToolCall) answer.tool_calls.push_back({block.id, block.name, block.text});
    }
    conversation.push_back(std::move(answer));
    store_->put(id_, std::move(conversation));
  }

  std::string id_, model_;
  int64_t created_ = 0;
  json echo_;  // request fields the response object repeats (instructions, tools, ...)
  bool remembered_ = false;
 public:
  bool parallel_tool_calls_ = true;
  ResponseStore* store_ = nullptr;             // null: "store": false
  std::vector<serve::Message> conversation_;  // the request's messages without its instructions
  std::string previous_id_;

 private:
  std::vector<std::string> item_ids_;
  int64_t sequence_ = 0;
};

}  // namespace

Prepared prepare_response(const json& body, const DoorContext& context) {
  std::string previous_id;
  std::vector<serve::Message> earlier;
  if (auto previous = get_string(body, "previous_response_id")) {
    std::optional<std::vector<serve::Message>> found =
        context.responses ? context.responses->get(*previous) : std::nullopt;
    if (!found)
      throw bad_request("previous_response_id \"" + *previous +
                            "\" is not a stored response (this server keeps the last " +
                            std::to_string(context.responses ? context.responses->capacity() : 0) +
                            " responses created with \"store\": true, in memory, until it restarts)",
                        "previous_response_id");
    previous_id = *previous;
    earlier = std::move(*found);
  }
  if (field(body, "conversation"))
    throw bad_request("\"conversation\" is not supported: send the whole conversation in \"input\"", "conversation");
  Prepared p;
  Request& r = p.request;
  if (auto instructions = get_string(body, "instructions"))
    r.messages.push_back(Message{.role = "system", .text_parts = {*instructions}});
  const json* input = field(body, "input");
  if (!input) throw bad_request("\"input\" is required", "input");
  // A follow-up continues the stored conversation (its instructions are not inherited); the
  // prompt then begins with the tokens of the previous turn, which the prompt cache holds.
  const size_t conversation_start = r.messages.size();
  for (serve::Message& m : earlier) r.messages.push_back(std::move(m));
  read_input(*input, r.messages);
  json echo = json::object();
  json echoed_tools = json::array();
  if (const json* tools = get_array(body, "tools")) {
    for (const json& tool : *tools) {
      if (!tool.is_object()) throw bad_request("\"tools\" entries must be objects", "tools");
      if (get_string(tool, "type").value_or("") != "function") continue;  // web_search, local_shell, custom...: skipped
      auto name = get_string(tool, "name");
      if (!name || name->empty()) throw bad_request("tools[].name is required for a function tool", "tools");
      serve::ToolSpec spec;
      spec.name = *name;
      spec.description = get_string(tool, "description").value_or("");
      if (const json* parameters = get_object(tool, "parameters")) spec.parameters = *parameters;
      r.tools.push_back(std::move(spec));
      echoed_tools.push_back(tool);
    }
  }
  echo["tools"] = echoed_tools;
  if (const json* choice = field(body, "tool_choice")) {
    if (choice->is_string()) {
      r.tool_choice = tool_choice_mode(choice->get<std::string>());
    } else if (choice->is_object() && get_string(*choice, "type").value_or("") == "function") {
      auto name = get_string(*choice, "name");
      if (!name) throw bad_request("tool_choice.name is required", "tool_choice");
      r.tool_choice = ToolChoice::Function;
      r.tool_choice_name = *name;
    } else {
      throw bad_request("\"tool_choice\" must be auto, none, required or {\"type\": \"function\", \"name\": ...}", "tool_choice");
    }
    echo["tool_choice"] = *choice;
  }
  check_tool_choice(r, "tool_choice");
  if (auto parallel = get_bool(body, "parallel_tool_calls")) r.parallel_tool_calls = *parallel;
  if (const json* reasoning = get_object(body, "reasoning"))
    if (const json* effort = field(*reasoning, "effort")) r.reasoning_effort = read_effort(*effort, "reasoning.effort");
  if (const json* text = get_object(body, "text"))
    if (const json* format = get_object(*text, "format")) read_text_format(*format, r);
  read_sampling(body, context, r);
  if (auto max_tokens = get_integer(body, "max_output_tokens")) {
    if (*max_tokens < 1) throw bad_request("\"max_output_tokens\" must be at least 1", "max_output_tokens");
    r.max_tokens = *max_tokens;
  }
  read_test_script(body, context, r);
  if (auto instructions = get_string(body, "instructions")) echo["instructions"] = *instructions;
  if (auto t = get_number(body, "temperature")) echo["temperature"] = *t;
  if (auto t = get_number(body, "top_p")) echo["top_p"] = *t;
  if (auto m = get_integer(body, "max_output_tokens")) echo["max_output_tokens"] = *m;
  p.stream = get_bool(body, "stream").value_or(false);
  auto responder = std::make_unique<ResponseResponder>(get_string(body, "model").value_or(context.model_name), echo);
  responder->parallel_tool_calls_ = r.parallel_tool_calls;
  responder->previous_id_ = previous_id;
  if (get_bool(body, "store").value_or(true) && context.responses) {
    responder->store_ = context.responses;
    responder->conversation_.assign(r.messages.begin() + std::ptrdiff_t(conversation_start), r.messages.end());
  }
  p.responder = std::move(responder);
  return p;
}

}  // namespace inkling::server
