#include "runtime/chat/chat_template.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/gguf.h"
#include "io/text_file.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tensor/error.h"

namespace inkling {

namespace {

// tokenizer_config.json's chat_template: a string, or [{name, template}] with "default" chosen.
std::string template_from_config(const nlohmann::json& value, const std::string& path) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_array()) {
    for (const auto& entry : value)
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string())
        return entry["template"].get<std::string>();
    throw Error(path + ": chat_template is a list without a \"default\" entry");
  }
  throw Error(path + ": chat_template must be a string or a list of {name, template}");
}

std::string lower_trim(std::string_view text) {
  size_t begin = 0, end = text.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(text[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  std::string out(text.substr(begin, end - begin));
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// bos_token / eos_token in tokenizer_config.json: a string or {"content": ...}.
std::string token_string(const nlohmann::json& config, const char* key, const std::string& fallback) {
  if (!config.contains(key)) return fallback;
  const auto& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return v.is_null() ? std::string() : fallback;
}

}  // namespace

const std::vector<std::string>& reasoning_effort_names() {
  static const std::vector<std::string> names = {"none", "minimal", "low", "medium", "high", "xhigh", "max"};
  return names;
}

std::string reasoning_effort_choices() {
  std::string out;
  for (const std::string& name : reasoning_effort_names()) out += name + ", ";
  return out + "or a number in [0, 0.99]";
}

nlohmann::ordered_json parse_reasoning_effort(std::string_view text) {
  std::string key = lower_trim(text);
  for (const std::string& name : reasoning_effort_names())
    if (key == name) return key;
  double value = 0.0;
  auto [ptr, ec] = std::from_chars(key.data(), key.data() + key.size(), value);
  if (key.empty() || ec != std::errc() || ptr != key.data() + key.size() || !(value >= 0.0 && value <= 0.99))
    throw Error("invalid reasoning effort \"" + std::string(text) + "\": expected " + reasoning_effort_choices());
  return value;
}

ChatTemplate::ChatTemplate(jinja::Template tmpl, std::string origin)
    : template_(std::move(tmpl)), origin_(std::move(origin)) {}

ChatTemplate ChatTemplate::from_source(std::string_view source, std::string origin) {
  return ChatTemplate(jinja::Template::parse(source, origin), origin);
}

ChatTemplate ChatTemplate::from_dir(const std::string& dir, const std::string& override_path) {
  if (!override_path.empty()) return from_source(read_text_file(override_path, kMaxTemplateFileBytes), override_path);
  std::string config_path = dir + "/tokenizer_config.json";
  if (std::filesystem::exists(config_path)) {
    nlohmann::json config;
    try {
      config = nlohmann::json::parse(read_text_file(config_path, kMaxTokenizerFileBytes));
    } catch (const nlohmann::json::exception& e) {
      throw Error(config_path + ": invalid JSON: " + e.what());
    }
    if (config.is_object() && config.contains("chat_template") && !config["chat_template"].is_null()) {
      ChatTemplate t = from_source(template_from_config(config["chat_template"], config_path),
                                   config_path + "[\"chat_template\"]");
      t.set_special_tokens(token_string(config, "bos_token", ""),
                           token_string(config, "eos_token", "<|content_model_end_sampling|>"));
      return t;
    }
  }
  std::string jinja_path = dir + "/chat_template.jinja";
  if (std::filesystem::exists(jinja_path)) return from_source(read_text_file(jinja_path, kMaxTemplateFileBytes), jinja_path);
  return from_source(builtin_chat_template(), "builtin");
}

std::optional<ChatTemplate> ChatTemplate::from_gguf(const GgufModelFiles& model, const Tokenizer& tokenizer) {
  static constexpr std::string_view kKey = "tokenizer.chat_template";
  const GgufFile& file = model.first();
  if (!file.find(kKey)) return std::nullopt;
  ChatTemplate t = from_source(file.string(kKey), file.label() + "[\"" + std::string(kKey) + "\"]");
  // No BOS text where the tokenizer adds none, as a tokenizer_config.json with bos_token null.
  t.set_special_tokens(tokenizer.bos_id() ? tokenizer.token_text(*tokenizer.bos_id()) : "",
                       tokenizer.eos_id() ? tokenizer.token_text(*tokenizer.eos_id()) : t.eos_token_);
  return t;
}

void ChatTemplate::set_special_tokens(std::string bos, std::string eos) {
  bos_token_ = std::move(bos);
  eos_token_ = std::move(eos);
}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, const ChatRenderOptions& options) const {
  if (!messages.is_array()) throw Error("chat messages must be a JSON array");
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    if (!m.is_object()) throw Error("chat message " + std::to_string(i) + " is not a JSON object");
    if (!m.contains("role") || !m["role"].is_string())
      throw Error("chat message " + std::to_string(i) + " has no \"role\" string");
  }
  if (!options.tools.is_null() && !options.tools.is_array()) throw Error("tools must be a JSON array");
  nlohmann::ordered_json context;
  context["messages"] = messages;
  if (!options.tools.is_null()) context["tools"] = options.tools;
  context["add_generation_prompt"] = options.add_generation_prompt;
  if (!options.reasoning_effort.is_null()) context["reasoning_effort"] = options.reasoning_effort;
  context["bos_token"] = bos_token_;
  context["eos_token"] = eos_token_;
  return template_.render(context);
}

std::vector<int32_t> ChatTemplate::encode(const Tokenizer& tokenizer, const nlohmann::ordered_json& messages,
                                          const ChatRenderOptions& options) const {
  return tokenizer.encode(render(messages, options), /*parse_special=*/true);
}

}  // namespace inkling
