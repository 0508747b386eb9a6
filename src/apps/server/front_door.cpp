#include "apps/server/front_door.h"

#include <algorithm>

#include "runtime/grammar/json_schema.h"

#include "runtime/chat/chat_template.h"
#include "tensor/error.h"

namespace inkling::server {

namespace {

// A GBNF string literal of `bytes` (quotes and backslashes escaped).
std::string gbnf_string_literal(const std::string& bytes) {
  std::string out = "\"";
  for (char c : bytes) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

void Turn::add(const Event& e) {
  auto append = [&](Block::Kind kind, const std::string& text) {
    if (blocks.empty() || blocks.back().kind != kind) blocks.push_back({kind, {}, {}, {}});
    blocks.back().text += text;
  };
  switch (e.kind) {
    case Event::Kind::Reasoning: append(Block::Kind::Reasoning, e.text); break;
    case Event::Kind::Content:
      if (!e.text.empty()) append(Block::Kind::Text, e.text);
      logprobs.insert(logprobs.end(), e.logprobs.begin(), e.logprobs.end());
      break;
    case Event::Kind::ToolCallStart: blocks.push_back({Block::Kind::ToolCall, {}, e.tool_id, e.tool_name}); break;
    case Event::Kind::ToolCallArguments:
      if (!blocks.empty() && blocks.back().kind == Block::Kind::ToolCall) blocks.back().text += e.text;
      break;
    case Event::Kind::ToolCallEnd:
      // The whole arguments are authoritative (a call cut off by the token limit has no deltas).
      if (blocks.empty() || blocks.back().kind != Block::Kind::ToolCall || blocks.back().id != e.tool_id)
        blocks.push_back({Block::Kind::ToolCall, {}, e.tool_id, e.tool_name});
      blocks.back().text = e.text;
      break;
    case Event::Kind::Warning:
      if (e.tool_index >= 0)
        std::erase_if(blocks, [&](const Block& b) { return b.kind == Block::Kind::ToolCall && b.id == e.tool_id; });
      break;
    case Event::Kind::Finish:
      finished = true;
      finish_reason = e.finish_reason;
      stop_sequence = e.stop_sequence;
      error = e.error;
      usage = e.usage;
      break;
  }
}

std::string Turn::text() const {
  std::string out;
  for (const Block& b : blocks)
    if (b.kind == Block::Kind::Text) out += b.text;
  return out;
}

std::string Turn::reasoning() const {
  std::string out;
  for (const Block& b : blocks)
    if (b.kind == Block::Kind::Reasoning) out += b.text;
  return out;
}

std::vector<const Block*> Turn::tool_calls() const {
  std::vector<const Block*> out;
  for (const Block& b : blocks)
    if (b.kind == Block::Kind::ToolCall) out.push_back(&b);
  return out;
}

std::string BlockStream::push(const Event& e) {
  std::string out;
  if (e.kind == Event::Kind::Warning && e.tool_index >= 0 && open_) {
    // A streamed call that did not parse: its block closes as it stands; the text follows.
    out += close(turn_.blocks.back(), index_);
    open_ = false;
  }
  const size_t before = turn_.blocks.size();
  const std::string previous_text = before ? turn_.blocks.back().text : std::string();
  turn_.add(e);
  const size_t after = turn_.blocks.size();
  if (after > before) {
    if (open_) out += close(turn_.blocks[before - 1], index_);
    open_ = true;
    index_ = next_index_++;
    turn_.blocks.back().stream_index = index_;
    const Block& block = turn_.blocks.back();
    Block empty = block;
    empty.text.clear();
    out += open(empty, index_);
    if (!block.text.empty()) out += delta(block, index_, block.text);
  } else if (open_ && after == before && turn_.blocks.back().text != previous_text) {
    const Block& block = turn_.blocks.back();
    // Grown in place (the usual case), or a tool call's arguments replaced at its end.
    std::string added = block.text.compare(0, previous_text.size(), previous_text) == 0
                            ? block.text.substr(previous_text.size())
                            : block.text;
    if (!added.empty()) out += delta(block, index_, added);
  }
  if (e.kind == Event::Kind::Finish) {
    if (open_) out += close(turn_.blocks.back(), index_);
    open_ = false;
    out += finish(turn_);
  }
  return out;
}

json openai_error(const ApiError& error) {
  json body = {{"message", error.what()}, {"type", error.type}, {"param", error.param.empty() ? json() : json(error.param)},
               {"code", json()}};
  for (auto& [key, value] : error.extra.items()) body[key] = value;
  return {{"error", body}};
}

json anthropic_error(const ApiError& error) {
  std::string type = error.type;
  if (error.status == 413) type = "request_too_large";
  else if (error.status == 404) type = "not_found_error";
  else if (error.status >= 500) type = "api_error";
  json body = {{"type", type}, {"message", error.what()}};
  for (auto& [key, value] : error.extra.items()) body[key] = value;
  return {{"type", "error"}, {"error", body}};
}

nlohmann::ordered_json read_effort(const json& value, const char* param) {
  try {
    if (value.is_string()) return parse_reasoning_effort(value.get<std::string>());
    if (value.is_number()) return parse_reasoning_effort(value.dump());
  } catch (const Error& e) {
    throw bad_request(e.what(), param);
  }
  throw bad_request(std::string(param) + " must be a string (" + reasoning_effort_choices() + ") or a number", param);
}

void read_sampling(const json& body, const DoorContext& context, serve::Request& r) {
  r.sampling = context.default_sampling;
  if (auto v = get_number(body, "temperature")) r.sampling.temperature = float(*v);
  if (auto v = get_number(body, "top_p")) r.sampling.top_p = float(*v);
  if (auto v = get_integer(body, "top_k")) {
    if (*v < -1 || *v > 1000000) throw bad_request("\"top_k\" must be -1, 0 or a positive count", "top_k");
    r.sampling.top_k = *v < 0 ? 0 : int(*v);
  }
  if (auto v = get_number(body, "min_p")) r.sampling.min_p = float(*v);
  if (auto v = get_number(body, "presence_penalty")) r.sampling.presence_penalty = float(*v);
  if (auto v = get_number(body, "frequency_penalty")) r.sampling.frequency_penalty = float(*v);
  if (auto v = get_number(body, "repetition_penalty")) r.sampling.repetition_penalty = float(*v);
  if (auto v = get_integer(body, "seed")) {
    r.sampling.seed = uint64_t(*v);
    r.seed_given = true;
  }
  try {
    r.sampling.validate();
  } catch (const Error& e) {
    // validate() names the field first ("temperature must be >= 0"); that field is the param.
    std::string message = e.what();
    throw bad_request(message, message.substr(0, message.find(' ')));
  }
}

void read_test_script(const json& body, const DoorContext& context, serve::Request& r) {
  auto script = get_string(body, "inkling_test_script");
  if (!script) return;
  if (!context.allow_scripts)
    throw bad_request("\"inkling_test_script\" is a test-only field; start the server with --test-scripts to use it",
                      "inkling_test_script");
  r.scripted_output = *script;
}

void read_test_stop_loop(const json& body, const DoorContext& context, serve::Request& r) {
  if (!get_bool(body, "inkling_test_stop_loop").value_or(false)) return;
  if (!context.allow_scripts)
    throw bad_request("\"inkling_test_stop_loop\" is a test-only field; start the server with --test-scripts to use it",
                      "inkling_test_stop_loop");
  r.test_stop_loop = true;
}

serve::ToolChoice tool_choice_mode(const std::string& value) {
  if (value == "auto") return serve::ToolChoice::Auto;
  if (value == "none") return serve::ToolChoice::None;
  if (value == "required") return serve::ToolChoice::Required;
  throw bad_request("\"tool_choice\" must be auto, none, required or a named function, got \"" + value + "\"", "tool_choice");
}

void check_tool_choice(serve::Request& r, const char* param) {
  if ((r.tool_choice == serve::ToolChoice::Required || r.tool_choice == serve::ToolChoice::Function) && r.tools.empty())
    throw bad_request(std::string("\"") + param + "\" asks for a tool call but no function tools are declared", param);
  if (r.tool_choice == serve::ToolChoice::Function) {
    auto named = std::find_if(r.tools.begin(), r.tools.end(), [&](const serve::ToolSpec& t) { return t.name == r.tool_choice_name; });
    if (named == r.tools.end())
      throw bad_request(std::string("\"") + param + "\" names \"" + r.tool_choice_name + "\", which is not among the declared tools", param);
    serve::ToolSpec only = *named;
    r.tools = {only};
  }
  if (r.tool_choice != serve::ToolChoice::Required && r.tool_choice != serve::ToolChoice::Function) return;
  // The forced call's JSON follows the tool's parameters schema: compiled here, so a schema we
  // cannot enforce is a 400 naming the tool rather than a call that may not parse.
  for (const serve::ToolSpec& tool : r.tools) {
    std::string args;
    try {
      args = grammar::json_schema_to_gbnf(tool.parameters.empty() ? json{{"type", "object"}} : tool.parameters);
    } catch (const Error& e) {
      throw bad_request("tool \"" + tool.name + "\" parameters: " + e.what(), param);
    }
    // The schema's GBNF starts with its root rule; it becomes the call's "args".
    if (args.rfind("root ::= ", 0) != 0) throw bad_request("tool \"" + tool.name + "\": internal grammar error", param);
    std::string gbnf = "root ::= \"{\" ws \"\\\"name\\\"\" ws \":\" ws " +
                       gbnf_string_literal(json(tool.name).dump(-1, ' ', false, json::error_handler_t::replace)) +
                       " ws \",\" ws \"\\\"args\\\"\" ws \":\" ws call-args ws \"}\"\ncall-args ::= " + args.substr(9);
    try {
      r.tool_call_grammars[tool.name] = {std::make_shared<grammar::Grammar>(grammar::parse_gbnf(gbnf)), gbnf};
    } catch (const Error& e) {
      throw bad_request("tool \"" + tool.name + "\" parameters: " + e.what(), param);
    }
  }
}

std::string sse(const json& data, const std::string& event_name) {
  std::string out;
  if (!event_name.empty()) out += "event: " + event_name + "\n";
  out += "data: " + dump(data) + "\n\n";
  return out;
}

void ResponseStore::put(const std::string& id, std::vector<serve::Message> conversation) {
  std::lock_guard lock(mutex_);
  entries_.emplace_back(id, std::move(conversation));
  while (entries_.size() > capacity_) entries_.pop_front();
}

std::optional<std::vector<serve::Message>> ResponseStore::get(const std::string& id) const {
  std::lock_guard lock(mutex_);
  for (auto it = entries_.rbegin(); it != entries_.rend(); ++it)
    if (it->first == id) return it->second;
  return std::nullopt;
}

namespace {

// GBNF for a format object: Chat Completions nests the schema ({"type": "json_schema",
// "json_schema": {"schema": ...}}), Responses does not ({"type": "json_schema", "schema": ...}).
// Empty for "text".
std::string format_gbnf(const json& format, const std::string& param) {
  if (!format.is_object()) throw bad_request("\"" + param + "\" must be an object", param);
  const std::string type = get_string(format, "type").value_or("text");
  if (type == "text") return {};
  if (type == "json_object") return grammar::free_json_gbnf(true);
  if (type != "json_schema") throw bad_request(param + " \"" + type + "\" is not one of text, json_object, json_schema", param);
  const json* schema = field(format, "schema");
  if (const json* spec = field(format, "json_schema"); !schema && spec && spec->is_object()) schema = field(*spec, "schema");
  if (!schema) throw bad_request(param + " json_schema names no schema", param);
  try {
    return grammar::json_schema_to_gbnf(*schema);
  } catch (const Error& e) {
    throw bad_request(param + ": " + e.what(), param);
  }
}

void set_grammar(std::string gbnf, const std::string& param, serve::Request& r) {
  if (gbnf.empty()) return;
  if (r.tool_choice == serve::ToolChoice::Required || r.tool_choice == serve::ToolChoice::Function)
    throw bad_request("a forced tool call and a response format cannot both be enforced", param);
  try {
    r.grammar = std::make_shared<grammar::Grammar>(grammar::parse_gbnf(gbnf));
  } catch (const Error& e) {
    throw bad_request(std::string(e.what()), param);
  }
  r.grammar_key = std::move(gbnf);
}

}  // namespace

void read_text_format(const json& format, serve::Request& r) { set_grammar(format_gbnf(format, "text.format"), "text.format", r); }

void read_response_format(const json& body, serve::Request& r) {
  std::string gbnf;
  if (const json* format = field(body, "response_format")) gbnf = format_gbnf(*format, "response_format");
  if (const json* text = field(body, "grammar")) {
    if (!text->is_string()) throw bad_request("\"grammar\" must be a string of GBNF", "grammar");
    if (!gbnf.empty()) throw bad_request("give \"grammar\" or a JSON response_format, not both", "grammar");
    gbnf = text->get<std::string>();
  }
  set_grammar(std::move(gbnf), field(body, "grammar") ? "grammar" : "response_format", r);
}

}  // namespace inkling::server
