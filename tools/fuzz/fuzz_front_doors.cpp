// libFuzzer target for the server's request mapping and output stage.
//
// Built and run by tools/fuzz/run.sh (seed corpus: tools/fuzz/corpus/front_doors; `-seed_corpus=1 DIR`
// rewrites its seeds into DIR).
//
// The first byte picks what runs on the rest:
//   0-3: a request body for chat completions / completions / messages / responses, then the
//        prompt it renders through the Inkling template; either may refuse it, only with ApiError
//        or inkling::Error;
//   4:   the rest as generated token ids (2 bytes each) through the tool-call forcer and
//        TurnOutput with tools, stop strings and logprobs: no exception at all, and streamed call
//        arguments that add up to the final ones.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "apps/server/front_door.h"
#include "runtime/chat/chat_template.h"
#include "runtime/serve/prompt.h"
#include "runtime/serve/tool_forcer.h"
#include "runtime/serve/turn_output.h"
#include "tensor/error.h"
#include "fuzz_util.h"

namespace {

using inkling::fuzz::check;

using namespace inkling;

const ChatTemplate& chat_template() {
  static const ChatTemplate t = ChatTemplate::from_source(fuzz::inkling_template_source(), "inkling_chat_template.jinja");
  return t;
}

void run_body(int door, const std::string& text) {
  server::DoorContext context;
  context.tokenizer = &fuzz::inkling_tokenizer();
  context.model_name = "fuzz";
  context.context = 4096;
  context.allow_scripts = true;
  static server::ResponseStore responses(16);
  context.responses = &responses;
  try {
    server::json body = server::parse_body(text);
    server::Prepared p = door == 0   ? server::prepare_chat_completion(body, context)
                         : door == 1 ? server::prepare_completion(body, context)
                         : door == 2 ? server::prepare_message(body, context)
                                     : server::prepare_response(body, context);
    std::vector<int32_t> ids = serve::encode_prompt(p.request, fuzz::inkling_tokenizer(), chat_template());
    (void)ids;
    // The Responses door stores each answer (here an empty turn) for previous_response_id; ids
    // are random, so fuzzed bodies reach only the unknown-id path of the lookup.
    server::Turn turn;
    if (door == 3) (void)p.responder->complete(turn);
  } catch (const server::ApiError&) {
  } catch (const Error&) {
  }
}

void run_ids(const uint8_t* data, size_t size) {
  serve::Request r;
  r.tools = {{"get_weather", "", server::json::object()}, {"get_time", "", server::json::object()}};
  r.stop = {"STOP", "\n\n"};
  // Logprobs scan all 200k logits per token: on one input in four, or they take most of the run.
  r.top_logprobs = size % 4 == 0 ? 2 : -1;
  r.tool_choice = size % 2 ? serve::ToolChoice::Required : serve::ToolChoice::Auto;
  serve::TurnOutput output(fuzz::inkling_tokenizer(), r, "f");
  serve::ToolCallForcer forcer(fuzz::inkling_tokenizer(), r);
  std::vector<float> logits(size_t(fuzz::inkling_tokenizer().vocab_size()), 0.0f);
  std::vector<serve::Event> events;
  for (size_t i = 0; i + 1 < size; i += 2) {
    // Ids spread over the specials (199998..200057) and ordinary tokens alike.
    const uint16_t raw = uint16_t(data[i] | (data[i + 1] << 8));
    int32_t id = raw < 4096 ? int32_t(199998 + raw % 60) : int32_t(raw) * 3;
    bool consumed = true;
    if (forcer.active()) id = forcer.choose(id, logits, consumed);
    output.push(id, logits, events);
    if (output.should_stop()) break;
  }
  output.finish(events);
  std::vector<std::string> streamed(64);
  for (const serve::Event& e : events) {
    if (e.tool_index >= 0 && e.tool_index < 64) {
      if (e.kind == serve::Event::Kind::ToolCallArguments) streamed[size_t(e.tool_index)] += e.text;
      if (e.kind == serve::Event::Kind::ToolCallEnd && !streamed[size_t(e.tool_index)].empty())
        check(streamed[size_t(e.tool_index)] == e.text, "streamed arguments differ from the final ones");
    }
  }
}

void write_seeds(const char* dir) {
  const std::vector<std::pair<uint8_t, std::string>> seeds = {
      {0, R"({"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"hi"}]},)"
          R"({"role":"assistant","content":null,"reasoning":"r","tool_calls":[{"id":"c","type":"function","function":)"
          R"({"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c","content":"ok"}],)"
          R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":"required",)"
          R"("stop":["x"],"logprobs":true,"top_logprobs":3,"reasoning_effort":"low","stream":true})"},
      {1, R"({"prompt":"Once upon","max_tokens":5,"logprobs":2,"stop":"END","seed":1})"},
      {2, R"({"model":"m","max_tokens":50,"system":[{"type":"text","text":"s"}],"thinking":{"type":"enabled","budget_tokens":2000},)"
          R"("messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"thinking","thinking":"t"},)"
          R"({"type":"tool_use","id":"u","name":"f","input":{"a":1}}]},{"role":"user","content":[{"type":"tool_result",)"
          R"("tool_use_id":"u","content":[{"type":"text","text":"r"}]}]}],"tools":[{"name":"f","input_schema":{"type":"object"}}],)"
          R"("tool_choice":{"type":"any"}})"},
      {3, R"({"instructions":"i","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"q"}]},)"
          R"({"type":"reasoning","summary":[{"type":"summary_text","text":"t"}]},{"type":"function_call","call_id":"c","name":"f",)"
          R"("arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"o"}],"tools":[{"type":"function","name":"f"},)"
          R"({"type":"web_search"}],"reasoning":{"effort":"high"},"max_output_tokens":9})"},
  };
  int n = 0;
  for (const auto& [door, body] : seeds) {
    std::ofstream out(std::string(dir) + "/seed" + std::to_string(n++), std::ios::binary);
    out.put(char(door));
    out << body;
  }
  const std::string script = "<|content_thinking|>r<|end_message|><|message_model|>get_weather<|content_invoke_tool_json|>"
                             "{\"name\":\"get_weather\",\"args\":{\"a\":[1,{\"b\":\"c\"}]}}<|end_message|><|content_model_end_sampling|>";
  std::ofstream out(std::string(dir) + "/seed_ids", std::ios::binary);
  out.put(char(4));
  for (int32_t id : fuzz::inkling_tokenizer().encode(script, true)) {
    // Inverse of run_ids' mapping where it exists.
    const uint16_t raw = id >= 199998 ? uint16_t(id - 199998) : uint16_t(id % 3 == 0 && id / 3 >= 4096 ? id / 3 : 4096);
    out.put(char(raw & 0xff));
    out.put(char(raw >> 8));
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  inkling::fuzz::write_seeds_if_asked(*argc, *argv, write_seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int mode = data[0] % 5;
  if (mode < 4) run_body(mode, std::string(reinterpret_cast<const char*>(data + 1), size - 1));
  else run_ids(data + 1, size - 1);
  return 0;
}
