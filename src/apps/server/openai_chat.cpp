// POST /v1/chat/completions: OpenAI Chat Completions into the internal request and back.
#include "apps/server/front_door.h"

namespace inkling::server {

namespace {

using serve::Message;
using serve::Request;
using serve::ToolChoice;

// Text of a content value: a string, or an array of text parts (other part types are refused).
std::vector<std::string> text_parts(const json& content, const std::string& where) {
  if (content.is_null()) return {};
  if (content.is_string()) return {content.get<std::string>()};
  if (!content.is_array()) throw bad_request(where + ".content must be a string or an array of parts", "messages");
  std::vector<std::string> parts;
  for (const json& part : content) {
    if (part.is_string()) {
      parts.push_back(part.get<std::string>());
      continue;
    }
    if (!part.is_object()) throw bad_request(where + ".content parts must be objects", "messages");
    std::string type = get_string(part, "type").value_or("text");
    if (type != "text" && type != "input_text" && type != "output_text")
      throw bad_request(where + ": content part type \"" + type + "\" is not supported (this server runs the text model)",
                        "messages");
    auto text = get_string(part, "text");
    parts.push_back(text.value_or(""));
  }
  return parts;
}

std::string arguments_text(const json& arguments) {
  if (arguments.is_null()) return "{}";
  if (arguments.is_string()) return arguments.get<std::string>();
  if (arguments.is_object()) return dump(arguments);
  throw bad_request("tool call arguments must be a JSON object or a string holding one", "messages");
}

std::vector<Message> read_messages(const json& body) {
  const json* messages = get_array(body, "messages");
  if (!messages) throw bad_request("\"messages\" is required", "messages");
  if (messages->empty()) throw bad_request("\"messages\" must not be empty", "messages");
  std::vector<Message> out;
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw bad_request(where + " must be an object", "messages");
    auto role = get_string(m, "role");
    if (!role) throw bad_request(where + ".role is required", "messages");
    if (*role != "system" && *role != "developer" && *role != "user" && *role != "assistant" && *role != "tool")
      throw bad_request(where + ".role \"" + *role + "\" is not one of system, developer, user, assistant, tool", "messages");
    Message message;
    message.role = *role;
    message.text_parts = text_parts(m.contains("content") ? m["content"] : json(), where);
    if (*role == "assistant") {
      // Both names clients use for the reasoning (vLLM's `reasoning`, everyone else's
      // `reasoning_content`), so the next prompt repeats what the model wrote.
      if (auto r = get_string(m, "reasoning_content")) message.reasoning = *r;
      else if (auto r2 = get_string(m, "reasoning")) message.reasoning = *r2;
      if (const json* calls = get_array(m, "tool_calls")) {
        for (const json& call : *calls) {
          if (!call.is_object()) throw bad_request(where + ".tool_calls entries must be objects", "messages");
          const json* function = get_object(call, "function");
          if (!function) throw bad_request(where + ".tool_calls entries need a \"function\"", "messages");
          auto name = get_string(*function, "name");
          if (!name) throw bad_request(where + ".tool_calls[].function.name is required", "messages");
          message.tool_calls.push_back({get_string(call, "id").value_or(""), *name,
                                        arguments_text(function->contains("arguments") ? (*function)["arguments"] : json())});
        }
      }
    }
    if (*role == "tool") {
      message.tool_call_id = get_string(m, "tool_call_id").value_or("");
      message.name = get_string(m, "name").value_or("");
    }
    out.push_back(std::move(message));
  }
  return out;
}

void read_tools(const json& body, Request& r) {
  if (const json* tools = get_array(body, "tools")) {
    for (const json& tool : *tools) {
      if (!tool.is_object()) throw bad_request("\"tools\" entries must be objects", "tools");
      if (get_string(tool, "type").value_or("function") != "function") continue;  // other tool kinds: skipped
      const json* function = get_object(tool, "function");
      if (!function) throw bad_request("a function tool needs a \"function\" object", "tools");
      auto name = get_string(*function, "name");
      if (!name || name->empty()) throw bad_request("tools[].function.name is required", "tools");
      serve::ToolSpec spec;
      spec.name = *name;
      spec.description = get_string(*function, "description").value_or("");
      if (const json* parameters = get_object(*function, "parameters")) spec.parameters = *parameters;
      r.tools.push_back(std::move(spec));
    }
  }
  if (const json* choice = field(body, "tool_choice")) {
    if (choice->is_string()) {
      r.tool_choice = tool_choice_mode(choice->get<std::string>());
    } else if (choice->is_object()) {
      const json* function = get_object(*choice, "function");
      auto name = function ? get_string(*function, "name") : get_string(*choice, "name");
      if (!name) throw bad_request("\"tool_choice\" names no function", "tool_choice");
      r.tool_choice = ToolChoice::Function;
      r.tool_choice_name = *name;
    } else {
      throw bad_request("\"tool_choice\" must be a string or an object", "tool_choice");
    }
  }
  if (auto parallel = get_bool(body, "parallel_tool_calls")) r.parallel_tool_calls = *parallel;
  check_tool_choice(r, "tool_choice");
}

void read_effort_fields(const json& body, Request& r) {
  if (const json* v = field(body, "reasoning_effort")) r.reasoning_effort = read_effort(*v, "reasoning_effort");
  if (const json* reasoning = get_object(body, "reasoning"))
    if (const json* v = field(*reasoning, "effort")) r.reasoning_effort = read_effort(*v, "reasoning.effort");
  if (const json* kwargs = get_object(body, "chat_template_kwargs")) {
    // The request's own fields set these; a kwarg must not smuggle in another conversation or drop
    // the generation prompt (vLLM once let it).
    for (const char* reserved : {"messages", "add_generation_prompt", "tools", "bos_token", "eos_token"})
      if (kwargs->contains(reserved))
        throw bad_request(std::string("chat_template_kwargs may not set \"") + reserved +
                              "\": the request's own fields decide it",
                          "chat_template_kwargs");
    if (const json* v = field(*kwargs, "reasoning_effort"))
      r.reasoning_effort = read_effort(*v, "chat_template_kwargs.reasoning_effort");
  }
}

json logprob_json(const serve::TokenLogprob& lp) {
  auto bytes = [](const std::string& s) {
    json b = json::array();
    for (unsigned char c : s) b.push_back(int(c));
    return b;
  };
  json top = json::array();
  for (const auto& [token, value] : lp.top) top.push_back({{"token", token}, {"logprob", value}, {"bytes", bytes(token)}});
  return {{"token", lp.token}, {"logprob", lp.logprob}, {"bytes", bytes(lp.token)}, {"top_logprobs", top}};
}

const char* finish_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::Length: return "length";
    case FinishReason::ToolCalls: return "tool_calls";
    default: return "stop";
  }
}

// llama-server's `timings` object: clients such as its web UI show it.
json timings_json(const serve::Usage& u) {
  return {{"cache_n", u.cached_tokens},
          {"prompt_n", u.prompt_tokens - u.cached_tokens},
          {"prompt_ms", u.prompt_seconds * 1e3},
          {"prompt_per_second",
           u.prompt_seconds > 0 ? double(u.prompt_tokens - u.cached_tokens) / u.prompt_seconds : 0.0},
          {"predicted_n", u.completion_tokens},
          {"predicted_ms", u.generation_seconds * 1e3},
          {"predicted_per_second", u.generation_seconds > 0 ? double(u.completion_tokens - 1) / u.generation_seconds : 0.0}};
}

json usage_json(const serve::Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}},
          {"completion_tokens_details", {{"reasoning_tokens", u.reasoning_tokens}}}};
}

class ChatResponder final : public Responder {
 public:
  ChatResponder(std::string model, bool logprobs, bool include_usage)
      : id_(random_id("chatcmpl-")), model_(std::move(model)), created_(unix_time()), logprobs_(logprobs),
        include_usage_(include_usage) {}

  std::string stream_begin() override { return chunk({{"role", "assistant"}, {"content", ""}}); }

  std::string stream_event(const Event& e) override {
    switch (e.kind) {
      case Event::Kind::Reasoning:
        return chunk({{"reasoning_content", e.text}, {"reasoning", e.text}});
      case Event::Kind::Content: {
        if (e.text.empty() && (!logprobs_ || e.logprobs.empty())) return {};
        json lp;
        if (logprobs_) {
          lp = {{"content", json::array()}};
          for (const auto& entry : e.logprobs) lp["content"].push_back(logprob_json(entry));
        }
        return chunk({{"content", e.text}}, json(), lp);
      }
      case Event::Kind::ToolCallStart:
        calls_ = std::max(calls_, e.tool_index + 1);
        return chunk({{"tool_calls", json::array({{{"index", e.tool_index}, {"id", e.tool_id}, {"type", "function"},
                                                   {"function", {{"name", e.tool_name}, {"arguments", ""}}}}})}});
      case Event::Kind::ToolCallArguments:
        return chunk({{"tool_calls", json::array({{{"index", e.tool_index}, {"function", {{"arguments", e.text}}}}})}});
      case Event::Kind::ToolCallEnd:
        if (e.tool_index < calls_) return {};  // already streamed
        calls_ = e.tool_index + 1;             // a call cut off by the limit: all at once
        return chunk({{"tool_calls", json::array({{{"index", e.tool_index}, {"id", e.tool_id}, {"type", "function"},
                                                   {"function", {{"name", e.tool_name}, {"arguments", e.text}}}}})}});
      case Event::Kind::Warning:
        return {};
      case Event::Kind::Finish: {
        if (e.finish_reason == FinishReason::Error) {
          ApiError error(500, "server_error", e.error);
          return "data: " + dump(openai_error(error)) + "\n\ndata: [DONE]\n\n";
        }
        std::string out = chunk(json::object(), finish_name(e.finish_reason));
        if (include_usage_) {
          json body = base();
          body["choices"] = json::array();
          body["usage"] = usage_json(e.usage);
          body["timings"] = timings_json(e.usage);
          out += "data: " + dump(body) + "\n\n";
        }
        return out + "data: [DONE]\n\n";
      }
    }
    return {};
  }

  json complete(const Turn& turn) override {
    json message = {{"role", "assistant"}};
    std::string text = turn.text(), reasoning = turn.reasoning();
    auto calls = turn.tool_calls();
    message["content"] = text.empty() && !calls.empty() ? json() : json(text);
    if (!reasoning.empty()) {
      message["reasoning_content"] = reasoning;
      message["reasoning"] = reasoning;
    }
    if (!calls.empty()) {
      json list = json::array();
      for (const Block* c : calls)
        list.push_back({{"id", c->id}, {"type", "function"}, {"function", {{"name", c->name}, {"arguments", c->text}}}});
      message["tool_calls"] = list;
    }
    json choice = {{"index", 0}, {"message", message}, {"logprobs", json()}, {"finish_reason", finish_name(turn.finish_reason)}};
    if (logprobs_) {
      json content = json::array();
      for (const auto& entry : turn.logprobs) content.push_back(logprob_json(entry));
      choice["logprobs"] = {{"content", content}};
    }
    json body = base();
    body["object"] = "chat.completion";
    body["choices"] = json::array({choice});
    body["usage"] = usage_json(turn.usage);
    body["timings"] = timings_json(turn.usage);
    return body;
  }

 private:
  json base() const {
    return {{"id", id_}, {"object", "chat.completion.chunk"}, {"created", created_}, {"model", model_},
            {"system_fingerprint", "inkling.cpp"}};
  }
  std::string chunk(json delta, json finish_reason = json(), json logprobs = json()) {
    json body = base();
    body["choices"] = json::array({{{"index", 0}, {"delta", std::move(delta)}, {"logprobs", std::move(logprobs)},
                                    {"finish_reason", std::move(finish_reason)}}});
    return "data: " + dump(body) + "\n\n";
  }

  std::string id_, model_;
  int64_t created_;
  bool logprobs_, include_usage_;
  int calls_ = 0;
};

}  // namespace

void read_common_limits(const json& body, Request& r, const char* max_key_a, const char* max_key_b) {
  const char* key = max_key_a;
  std::optional<int64_t> max_tokens = get_integer(body, max_key_a);
  if (!max_tokens && max_key_b) {
    key = max_key_b;
    max_tokens = get_integer(body, max_key_b);
  }
  if (max_tokens) {
    if (*max_tokens < 1) throw bad_request(std::string("\"") + key + "\" must be at least 1", key);
    r.max_tokens = *max_tokens;
  }
  if (auto n = get_integer(body, "n"); n && *n != 1) throw bad_request("only n = 1 is supported", "n");
  r.stop = get_strings(body, "stop");
  r.ignore_eos = get_bool(body, "ignore_eos").value_or(false);
  r.cache_prompt = get_bool(body, "cache_prompt").value_or(true);
  if (r.stop.size() > 16) throw bad_request("at most 16 stop sequences", "stop");
}

Prepared prepare_chat_completion(const json& body, const DoorContext& context) {
  Prepared p;
  Request& r = p.request;
  r.messages = read_messages(body);
  read_tools(body, r);
  read_sampling(body, context, r);
  read_common_limits(body, r, "max_completion_tokens", "max_tokens");
  read_effort_fields(body, r);
  read_test_script(body, context, r);
  read_test_stop_loop(body, context, r);
  read_response_format(body, r);
  const bool logprobs = get_bool(body, "logprobs").value_or(false);
  if (logprobs) {
    int64_t top = get_integer(body, "top_logprobs").value_or(0);
    if (top < 0 || top > 20) throw bad_request("\"top_logprobs\" must be 0..20", "top_logprobs");
    r.top_logprobs = int(top);
  } else if (get_integer(body, "top_logprobs").value_or(0) > 0) {
    throw bad_request("\"top_logprobs\" needs \"logprobs\": true", "top_logprobs");
  }
  p.stream = get_bool(body, "stream").value_or(false);
  bool include_usage = false;
  if (const json* options = get_object(body, "stream_options")) include_usage = get_bool(*options, "include_usage").value_or(false);
  p.responder = std::make_unique<ChatResponder>(get_string(body, "model").value_or(context.model_name), logprobs, include_usage);
  return p;
}

}  // namespace inkling::server
