#include "runtime/chat/output_parser.h"

#include <cctype>

#include "io/json_depth.h"

namespace inkling {

namespace {

constexpr size_t kMaxHeader = 128;  // a tool name longer than this is text, not a header
// Real tool arguments nest a few levels; far deeper is refused as a malformed call.
constexpr int kMaxToolCallDepth = 128;

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

OutputParser::OutputParser(const Tokenizer& tokenizer, OutputParserOptions options)
    : options_(options), tokenizer_(&tokenizer), decoder_(tokenizer) {}

void OutputParser::stream_tool_args(std::vector<ChatEvent>& out) {
  CallScan& s = scan_;
  for (; s.scanned < tool_args_.size(); ++s.scanned) {
    const char c = tool_args_[s.scanned];
    if (s.in_string) {
      if (s.escape) {
        s.escape = false;
      } else if (c == '\\') {
        s.escape = true;
      } else if (c == '"') {
        s.in_string = false;
        if (s.capture) {
          if (s.capturing_key) s.last_key = s.buffer;
          else if (s.last_key == "name") s.json_name = s.buffer;
          s.capture = false;
        }
        continue;
      }
      if (s.capture) s.buffer += c;
      continue;
    }
    switch (c) {
      case '"':
        s.in_string = true;
        if (s.depth == 1) {
          s.capture = true;
          s.capturing_key = s.expect_key;
          s.buffer.clear();
        }
        break;
      case '{':
      case '[':
        if (s.depth == 1 && !s.expect_key && c == '{' && s.args_begin == std::string::npos &&
            (s.last_key == "args" || s.last_key == "arguments"))
          s.args_begin = s.scanned;
        if (s.depth == 0) s.expect_key = true;
        ++s.depth;
        break;
      case '}':
      case ']':
        --s.depth;
        if (s.depth == 1 && s.args_begin != std::string::npos && s.args_end == std::string::npos)
          s.args_end = s.scanned + 1;
        break;
      case ':':
        if (s.depth == 1) s.expect_key = false;
        break;
      case ',':
        if (s.depth == 1) s.expect_key = true;
        break;
      default:
        break;
    }
  }
  if (s.args_begin == std::string::npos) return;
  const std::string name = !s.json_name.empty() ? s.json_name : trim(tool_name_);
  if (!s.started) {
    if (name.empty()) return;
    s.started = true;
    out.push_back({ChatEvent::Kind::ToolCallStart, {}, name, {}});
  }
  const size_t end = s.args_end != std::string::npos ? s.args_end : tool_args_.size();
  const size_t from = s.args_begin + s.streamed;
  if (end > from) {
    out.push_back({ChatEvent::Kind::ToolCallDelta, {}, name, tool_args_.substr(from, end - from)});
    s.streamed += end - from;
  }
}

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
      if (options_.stream_tool_calls) stream_tool_args(out);
      return;
    case Mode::Other:
      return;  // system/user/tool blocks the model should not write: dropped
  }
}

void OutputParser::flush_decoder(std::vector<ChatEvent>& out) { emit_text(mode_, decoder_.flush(), out); }

void OutputParser::finish_tool_call(std::vector<ChatEvent>& out) {
  std::string raw = tool_args_;
  std::string header_name = trim(tool_name_);
  CallScan scan = std::move(scan_);
  scan_ = CallScan{};
  tool_args_.clear();
  tool_name_.clear();
  auto fail = [&](const std::string& why) {
    out.push_back({ChatEvent::Kind::Error,
                   "malformed tool call" + (header_name.empty() ? std::string() : " to " + header_name) + ": " + why,
                   header_name, raw});
  };
  // The model writes these bytes: a 10,000-deep object must not recurse through copy and dump.
  if (json_nesting_depth(raw) > kMaxToolCallDepth)
    return fail("arguments nest deeper than " + std::to_string(kMaxToolCallDepth) + " levels");
  nlohmann::ordered_json call = nlohmann::ordered_json::parse(raw, nullptr, /*allow_exceptions=*/false);
  bool repaired = false;
  if (call.is_discarded() && raw.find("&quot;") != std::string::npos) {
    // Models sometimes write the HTML entity where a JSON quote belongs.
    std::string fixed = raw;
    for (size_t at = 0; (at = fixed.find("&quot;", at)) != std::string::npos;) fixed.replace(at, 6, 1, '"');
    call = nlohmann::ordered_json::parse(fixed, nullptr, false);
    repaired = !call.is_discarded();
  }
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
    if (json_nesting_depth(args.get_ref<const std::string&>()) > kMaxToolCallDepth)
      return fail("arguments nest deeper than " + std::to_string(kMaxToolCallDepth) + " levels");
    args = nlohmann::ordered_json::parse(args.get<std::string>(), nullptr, false);
    if (args.is_discarded()) return fail("\"args\" is a string that is not JSON");
  }
  if (!args.is_object()) return fail("\"args\" is not a JSON object");
  std::string arguments = args.dump();
  if (options_.stream_tool_calls) {
    // The model's own text of the object when the scan found it, so streamed deltas add up to it.
    const bool have_slice = !repaired && scan.args_begin != std::string::npos && scan.args_end != std::string::npos;
    if (have_slice) arguments = raw.substr(scan.args_begin, scan.args_end - scan.args_begin);
    if (!scan.started) {
      out.push_back({ChatEvent::Kind::ToolCallStart, {}, name, {}});
      out.push_back({ChatEvent::Kind::ToolCallDelta, {}, name, arguments});
    } else if (have_slice && scan.streamed < arguments.size()) {
      out.push_back({ChatEvent::Kind::ToolCallDelta, {}, name, arguments.substr(scan.streamed)});
    }
  }
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
