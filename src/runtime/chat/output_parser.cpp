#include "runtime/chat/output_parser.h"

#include <cctype>

namespace inkling {

namespace {

constexpr size_t kMaxHeader = 128;  // a tool name longer than this is text, not a header

bool is_structural(const Tokenizer& tokenizer, int32_t id) {
  return (id >= chat_tokens::kFirstSpecial && id <= chat_tokens::kLastSpecial) || tokenizer.is_special(id);
}

bool name_char(unsigned char c) { return std::isalnum(c) || c == '_' || c == '-' || c == '.' || c == ':' || c == '/'; }

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

}  // namespace

OutputParser::OutputParser(const Tokenizer& tokenizer) : tokenizer_(&tokenizer), decoder_(tokenizer) {}

void OutputParser::emit_text(Mode mode, std::string text, std::vector<ChatEvent>& out) {
  if (text.empty()) return;
  switch (mode) {
    case Mode::Header: {
      header_ += text;
      // Text that cannot be a tool name is answer text the model wrote without <|content_text|>.
      bool is_name = header_.size() <= kMaxHeader;
      for (unsigned char c : header_)
        if (!name_char(c)) is_name = false;
      if (!is_name) {
        mode_ = Mode::Content;
        std::string held = std::move(header_);
        header_.clear();
        emit_text(Mode::Content, std::move(held), out);
      }
      return;
    }
    case Mode::Reasoning:
      reasoning_ += text;
      out.push_back({ChatEvent::Kind::Reasoning, std::move(text), {}, {}});
      return;
    case Mode::Content:
      content_ += text;
      out.push_back({ChatEvent::Kind::Content, std::move(text), {}, {}});
      return;
    case Mode::ToolArgs:
      tool_args_ += text;
      return;
    case Mode::Other:
      return;  // system/user/tool blocks the model should not write: dropped
  }
}

void OutputParser::flush_decoder(std::vector<ChatEvent>& out) { emit_text(mode_, decoder_.flush(), out); }

void OutputParser::finish_tool_call(std::vector<ChatEvent>& out) {
  std::string raw = tool_args_;
  std::string header_name = trim(tool_name_);
  tool_args_.clear();
  tool_name_.clear();
  auto fail = [&](const std::string& why) {
    out.push_back({ChatEvent::Kind::Error,
                   "malformed tool call" + (header_name.empty() ? std::string() : " to " + header_name) + ": " + why,
                   header_name, raw});
  };
  nlohmann::ordered_json call = nlohmann::ordered_json::parse(raw, nullptr, /*allow_exceptions=*/false);
  if (call.is_discarded()) return fail("arguments are not valid JSON");
  if (!call.is_object()) return fail("expected a JSON object {\"name\": ..., \"args\": {...}}");
  std::string name = header_name;
  if (call.contains("name")) {
    if (!call["name"].is_string()) return fail("\"name\" is not a string");
    name = call["name"].get<std::string>();
  }
  if (name.empty()) return fail("no function name");
  nlohmann::ordered_json args = nlohmann::ordered_json::object();
  if (call.contains("args")) args = call["args"];
  else if (call.contains("arguments")) args = call["arguments"];
  if (args.is_string()) {  // arguments written as a JSON string
    args = nlohmann::ordered_json::parse(args.get<std::string>(), nullptr, false);
    if (args.is_discarded()) return fail("\"args\" is a string that is not JSON");
  }
  if (!args.is_object()) return fail("\"args\" is not a JSON object");
  std::string arguments = args.dump();
  nlohmann::ordered_json entry;
  entry["id"] = "call_" + std::to_string(tool_calls_.size());
  entry["type"] = "function";
  entry["function"] = {{"name", name}, {"arguments", arguments}};
  tool_calls_.push_back(entry);
  out.push_back({ChatEvent::Kind::ToolCall, {}, name, arguments});
}

void OutputParser::close_block(std::vector<ChatEvent>& out) {
  flush_decoder(out);
  if (mode_ == Mode::ToolArgs) finish_tool_call(out);
  if (mode_ == Mode::Header && !header_.empty()) {  // a bare block: text without a content kind
    std::string held = std::move(header_);
    header_.clear();
    emit_text(Mode::Content, std::move(held), out);
  }
  header_.clear();
}

std::vector<ChatEvent> OutputParser::push(int32_t id) {
  std::vector<ChatEvent> out;
  if (done_) return out;
  if (!is_structural(*tokenizer_, id)) {
    emit_text(mode_, decoder_.push(id), out);
    return out;
  }
  using namespace chat_tokens;
  switch (id) {
    case kContentThinking:
    case kContentText:
    case kInvokeToolJson:
    case kContentXml: {
      flush_decoder(out);
      if (mode_ == Mode::ToolArgs) finish_tool_call(out);
      Mode next = id == kContentThinking ? Mode::Reasoning
                  : id == kContentText   ? Mode::Content
                  : id == kContentXml    ? Mode::Other
                                         : Mode::ToolArgs;
      if (mode_ == Mode::Other) next = Mode::Other;  // inside a system/user/tool block
      // Text between the role token and the kind token is an author name: the tool to call,
      // never visible text.
      if (next == Mode::ToolArgs) tool_name_ = header_;
      header_.clear();
      mode_ = next;
      break;
    }
    case kEndMessage:
      close_block(out);
      mode_ = Mode::Header;
      break;
    case kMessageModel:
      close_block(out);
      mode_ = Mode::Header;
      break;
    case kMessageUser:
    case kMessageSystem:
    case kMessageTool:
      close_block(out);
      mode_ = Mode::Other;
      break;
    case kEndSampling:
      close_block(out);
      done_ = true;
      out.push_back({ChatEvent::Kind::End, "stop", {}, {}});
      break;
    default:  // any other structural token: never visible
      flush_decoder(out);
      break;
  }
  return out;
}

std::vector<ChatEvent> OutputParser::finish() {
  std::vector<ChatEvent> out;
  if (done_) return out;
  close_block(out);
  done_ = true;
  out.push_back({ChatEvent::Kind::End, "incomplete", {}, {}});
  return out;
}

nlohmann::ordered_json OutputParser::message() const {
  nlohmann::ordered_json m;
  m["role"] = "assistant";
  m["content"] = content_;
  if (!reasoning_.empty()) m["reasoning_content"] = reasoning_;
  if (!tool_calls_.empty()) m["tool_calls"] = tool_calls_;
  return m;
}

}  // namespace inkling
