// libFuzzer target for the chat output parser on random id streams (built by tools/fuzz/run.sh).
//
// Each 3 bytes are one generated id: with the third byte's top bit set, one of Inkling's 60
// special ids (first byte mod 60), else the 23 low bits mod the 199998 ordinary ids; so blocks
// open, close and nest in every order, and seeds can spell real outputs. The first byte's low bit turns on streamed
// tool calls. The parser must never throw; the streamed argument deltas of each call must add up
// to the arguments its ToolCall event carries; message() must be serializable.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "runtime/chat/output_parser.h"
#include "runtime/tokenizer/tokenizer.h"
#include "fuzz_util.h"

namespace {

using inkling::fuzz::check;

using inkling::ChatEvent;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  inkling::OutputParserOptions options;
  options.stream_tool_calls = data[0] & 1;
  inkling::OutputParser parser(inkling::fuzz::inkling_tokenizer(), options);
  std::string streamed;
  auto take = [&](const std::vector<ChatEvent>& events) {
    for (const ChatEvent& e : events) {
      if (e.kind == ChatEvent::Kind::ToolCallStart) streamed.clear();
      if (e.kind == ChatEvent::Kind::ToolCallDelta) streamed += e.arguments;
      if (e.kind == ChatEvent::Kind::ToolCall && options.stream_tool_calls)
        check(streamed == e.arguments, "streamed tool-call deltas differ from the call's arguments");
    }
  };
  for (size_t i = 1; i + 2 < size; i += 3) {
    const uint32_t raw = uint32_t(data[i]) | uint32_t(data[i + 1]) << 8 | uint32_t(data[i + 2]) << 16;
    const int32_t id = raw & 0x800000 ? int32_t(199998 + data[i] % 60) : int32_t((raw & 0x7FFFFF) % 199998);
    take(parser.push(id));
  }
  take(parser.finish());
  (void)parser.message().dump();
  return 0;
}
