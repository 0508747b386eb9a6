#include "runtime/serve/prompt.h"

#include "tensor/error.h"

namespace inkling::serve {

using json = nlohmann::ordered_json;

json template_messages(const std::vector<Message>& messages) {
  json out = json::array();
  for (const Message& m : messages) {
    json entry;
    entry["role"] = m.role;
    if (m.text_parts.size() == 1) {
      entry["content"] = m.text_parts[0];
    } else if (m.text_parts.empty()) {
      entry["content"] = "";
    } else {
      json parts = json::array();
      for (const std::string& part : m.text_parts) parts.push_back({{"type", "text"}, {"text", part}});
      entry["content"] = parts;
    }
    if (!m.reasoning.empty()) entry["reasoning_content"] = m.reasoning;
    if (!m.tool_calls.empty()) {
      json calls = json::array();
      for (const ToolCall& call : m.tool_calls)
        calls.push_back({{"id", call.id}, {"type", "function"}, {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
      entry["tool_calls"] = calls;
    }
    if (!m.tool_call_id.empty()) entry["tool_call_id"] = m.tool_call_id;
    if (!m.name.empty()) entry["name"] = m.name;
    out.push_back(std::move(entry));
  }
  return out;
}

json template_tools(const std::vector<ToolSpec>& tools) {
  json out = json::array();
  for (const ToolSpec& t : tools)
    out.push_back({{"type", "function"},
                   {"function", {{"name", t.name}, {"description", t.description}, {"parameters", t.parameters}}}});
  return out;
}

std::string render_prompt(const Request& request, const ChatTemplate& chat_template) {
  ChatRenderOptions options;
  if (!request.tools.empty() && request.tool_choice != ToolChoice::None) options.tools = template_tools(request.tools);
  options.reasoning_effort = request.reasoning_effort;
  return chat_template.render(template_messages(request.messages), options);
}

std::vector<int32_t> encode_prompt(const Request& request, const Tokenizer& tokenizer, const ChatTemplate& chat_template) {
  if (request.raw_prompt_tokens) return *request.raw_prompt_tokens;
  if (request.raw_prompt) return tokenizer.encode(*request.raw_prompt, /*parse_special=*/true);
  return tokenizer.encode(render_prompt(request, chat_template), /*parse_special=*/true);
}

}  // namespace inkling::serve
