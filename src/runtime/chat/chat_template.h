// Chat templates: find the checkpoint's template (or use our built-in one), render a
// conversation to the prompt string, and encode it with special tokens parsed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/jinja/template.h"

namespace inkling {

class GgufModelFiles;
class Tokenizer;

// Our own template for checkpoints that ship none: the Inkling wire format for
// system / user / assistant (with reasoning_content) / tool messages, tool
// declarations and calls, the "Thinking effort level" block and the
// `<|message_model|>` generation prompt.
std::string_view builtin_chat_template();

// "none" | "minimal" | "low" | "medium" | "high" | "xhigh" | "max" (case-insensitive) or a
// number in [0, 0.99]; returns the template kwarg (the name as a string, or the number).
// Throws inkling::Error for anything else.
nlohmann::ordered_json parse_reasoning_effort(std::string_view text);
// The named levels the template accepts, in order, and "none, minimal, ..., or a number in
// [0, 0.99]" for messages: the one list every option and API error quotes.
const std::vector<std::string>& reasoning_effort_names();
std::string reasoning_effort_choices();

struct ChatRenderOptions {
  nlohmann::ordered_json tools;             // null or an array of tool declarations
  nlohmann::ordered_json reasoning_effort;  // null: the template's default
  bool add_generation_prompt = true;
};

class ChatTemplate {
 public:
  // Parses `source`; `origin` says where it came from (a path, "builtin").
  static ChatTemplate from_source(std::string_view source, std::string origin);
  // The template for checkpoint `dir`: `override_path` when non-empty, else
  // tokenizer_config.json's chat_template (a string, or a list of {name, template}
  // where "default" is used), else chat_template.jinja, else the built-in one.
  static ChatTemplate from_dir(const std::string& dir, const std::string& override_path = {});
  // A GGUF model's tokenizer.chat_template (nullopt when its metadata has none), given the
  // bos_token / eos_token texts of `tokenizer` (its vocabulary, from the same metadata).
  // Throws naming the file and key when the value is not a string or does not parse.
  static std::optional<ChatTemplate> from_gguf(const GgufModelFiles& model, const Tokenizer& tokenizer);

  // The prompt text. Throws inkling::Error for a bad conversation (messages not an
  // array, a message that is not an object) or an error the template raises.
  std::string render(const nlohmann::ordered_json& messages, const ChatRenderOptions& options = {}) const;
  // render() encoded with special-token strings parsed (no BOS is added).
  std::vector<int32_t> encode(const Tokenizer& tokenizer, const nlohmann::ordered_json& messages,
                              const ChatRenderOptions& options = {}) const;

  const std::string& origin() const { return origin_; }
  bool is_builtin() const { return origin_ == "builtin"; }
  // bos_token / eos_token passed to the template ("" and "<|content_model_end_sampling|>" by default).
  void set_special_tokens(std::string bos, std::string eos);

 private:
  ChatTemplate(jinja::Template tmpl, std::string origin);
  jinja::Template template_;
  std::string origin_;
  std::string bos_token_;
  std::string eos_token_ = "<|content_model_end_sampling|>";
};

}  // namespace inkling
