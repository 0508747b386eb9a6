// A request's prompt: its messages and tools as the chat template sees them, and the ids.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/chat/chat_template.h"
#include "runtime/serve/request.h"
#include "runtime/tokenizer/tokenizer.h"

namespace inkling::serve {

// Messages in the template's (OpenAI) shape: assistant reasoning as reasoning_content, tool
// calls as {id, type, function: {name, arguments}}, several text parts as a list of parts.
nlohmann::ordered_json template_messages(const std::vector<Message>& messages);
// Tools as [{type: function, function: {name, description, parameters}}].
nlohmann::ordered_json template_tools(const std::vector<ToolSpec>& tools);

// The chat prompt's text: the messages rendered through the template, tools left out when
// tool_choice is none. Throws inkling::Error for a conversation the template rejects.
std::string render_prompt(const Request& request, const ChatTemplate& chat_template);

// The prompt's ids: the raw prompt tokenized (special-token strings parsed), or the messages
// rendered through the template (tools left out when tool_choice is none). Throws
// inkling::Error for a conversation the template rejects.
std::vector<int32_t> encode_prompt(const Request& request, const Tokenizer& tokenizer, const ChatTemplate& chat_template);

}  // namespace inkling::serve
