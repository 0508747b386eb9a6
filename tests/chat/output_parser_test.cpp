// The output parser on realistic model outputs, encoded with the real tokenizer and fed
// one id at a time, including each failure other engines shipped (NOTES.md).
#include <gtest/gtest.h>

#include <random>

#include "runtime/chat/output_parser.h"
#include "chat_test_util.h"

namespace inkling {
namespace {

struct Collected {
  std::string reasoning, content, errors, end;
  std::vector<std::pair<std::string, std::string>> calls;
  int content_events = 0, end_events = 0;
  std::vector<ChatEvent> all;
};

void collect(const std::vector<ChatEvent>& events, Collected& c) {
  for (const auto& e : events) {
    c.all.push_back(e);
    switch (e.kind) {
      case ChatEvent::Kind::Reasoning: c.reasoning += e.text; break;
      case ChatEvent::Kind::Content: c.content += e.text; ++c.content_events; break;
      case ChatEvent::Kind::ToolCall: c.calls.emplace_back(e.name, e.arguments); break;
      case ChatEvent::Kind::Error: c.errors += e.text + "\n"; break;
      case ChatEvent::Kind::End: c.end = e.text; ++c.end_events; break;
      case ChatEvent::Kind::ToolCallStart:
      case ChatEvent::Kind::ToolCallDelta:
        ADD_FAILURE() << "streamed tool-call events without stream_tool_calls";
        break;
    }
  }
}

// Encodes `output` (what the model writes after the generation prompt) and feeds it id by id.
Collected run(const std::string& output, bool call_finish = true, OutputParser** keep = nullptr) {
  static std::optional<OutputParser> parser;
  parser.emplace(test::chat_tokenizer());
  Collected c;
  for (int32_t id : test::chat_tokenizer().encode(output, true)) collect(parser->push(id), c);
  if (call_finish) collect(parser->finish(), c);
  if (keep) *keep = &*parser;
  return c;
}

void expect_no_markers(const std::string& text) {
  EXPECT_EQ(text.find("<|"), std::string::npos) << text;
  EXPECT_EQ(text.find("|>"), std::string::npos) << text;
}

TEST(OutputParser, ReasoningThenAnswer) {
  OutputParser* p = nullptr;
  auto c = run("<|content_thinking|>The user greets me. I should greet back.<|end_message|>"
               "<|message_model|><|content_text|>Hello! How can I help you today?<|end_message|>"
               "<|content_model_end_sampling|>",
               true, &p);
  EXPECT_EQ(c.reasoning, "The user greets me. I should greet back.");
  EXPECT_EQ(c.content, "Hello! How can I help you today?");
  EXPECT_TRUE(c.calls.empty());
  EXPECT_EQ(c.end, "stop");
  EXPECT_EQ(c.end_events, 1);
  auto m = p->message();
  EXPECT_EQ(m["content"], "Hello! How can I help you today?");
  EXPECT_EQ(m["reasoning_content"], "The user greets me. I should greet back.");
}

// vLLM #49865: <|end_message|> leaked into content in non-reasoning mode.
TEST(OutputParser, EndMessageDoesNotLeakWithoutReasoning) {
  auto c = run("<|content_text|>The capital of France is Paris.<|end_message|><|content_model_end_sampling|>");
  EXPECT_EQ(c.content, "The capital of France is Paris.");
  EXPECT_EQ(c.reasoning, "");
  expect_no_markers(c.content);
  EXPECT_EQ(c.end, "stop");
}

// vLLM PR #49876: text followed by a tool call was left unparsed.
TEST(OutputParser, TextThenToolCall) {
  auto c = run("<|content_text|>Let me check the weather for you.<|end_message|>"
               "<|message_model|>get_weather<|content_invoke_tool_json|>"
               "{\"name\":\"get_weather\",\"args\":{\"city\":\"Paris\",\"unit\":\"celsius\"}}<|end_message|>"
               "<|content_model_end_sampling|>");
  EXPECT_EQ(c.content, "Let me check the weather for you.");
  ASSERT_EQ(c.calls.size(), 1u);
  EXPECT_EQ(c.calls[0].first, "get_weather");
  EXPECT_EQ(c.calls[0].second, "{\"city\":\"Paris\",\"unit\":\"celsius\"}");
  EXPECT_EQ(c.errors, "");
  EXPECT_EQ(c.end, "stop");
}

// SGLang #33181: the tool name leaked into visible content / reasoning.
TEST(OutputParser, ToolNameNeverVisible) {
  auto c = run("<|content_thinking|>I need the weather tool.<|end_message|>"
               "<|message_model|>get_weather<|content_invoke_tool_json|>{\"name\":\"get_weather\",\"args\":{\"city\":\"Oslo\"}}"
               "<|end_message|><|content_model_end_sampling|>");
  EXPECT_EQ(c.reasoning, "I need the weather tool.");
  EXPECT_EQ(c.content, "");
  EXPECT_EQ(c.content_events, 0);
  ASSERT_EQ(c.calls.size(), 1u);
  EXPECT_EQ(c.calls[0].first, "get_weather");
  EXPECT_EQ(c.reasoning.find("get_weather"), std::string::npos);
}

// The output may start directly with the tool name (the prompt already emitted <|message_model|>).
TEST(OutputParser, SeveralCallsInOneTurnStartingWithName) {
  auto c = run("get_weather<|content_invoke_tool_json|>{\"name\":\"get_weather\",\"args\":{\"city\":\"Paris\"}}<|end_message|>"
               "<|message_model|>get_time<|content_invoke_tool_json|>{\"name\": \"get_time\", \"args\": {\"tz\": \"CET\"}}"
               "<|end_message|><|content_model_end_sampling|>");
  ASSERT_EQ(c.calls.size(), 2u);
  EXPECT_EQ(c.calls[0].first, "get_weather");
  EXPECT_EQ(c.calls[1].first, "get_time");
  EXPECT_EQ(c.calls[1].second, "{\"tz\":\"CET\"}");
  EXPECT_EQ(c.content, "");
}

// A sloppy model that opens the next block without closing the text: the role token alone
// must end the text, so the tool name still does not leak.
TEST(OutputParser, RoleTokenClosesAnUnterminatedBlock) {
  auto c = run("<|content_text|>Let me check.<|message_model|>get_weather<|content_invoke_tool_json|>"
               "{\"name\":\"get_weather\",\"args\":{}}<|message_model|><|content_text|>Done<|content_model_end_sampling|>");
  EXPECT_EQ(c.content, "Let me check.Done");
  ASSERT_EQ(c.calls.size(), 1u);
  EXPECT_EQ(c.calls[0].second, "{}");
}

// llama.cpp PR #25731 testing: tokens decoded but nothing streamed.
TEST(OutputParser, StreamsContentIncrementally) {
  const auto& tok = test::chat_tokenizer();
  OutputParser parser(tok);
  auto ids = tok.encode("<|content_text|>One two three four five six seven.", true);
  size_t events_before_end = 0;
  std::string streamed;
  for (int32_t id : ids)
    for (const auto& e : parser.push(id))
      if (e.kind == ChatEvent::Kind::Content) {
        ++events_before_end;
        streamed += e.text;
      }
  EXPECT_GT(events_before_end, 3u);  // streamed while generating, not held to the end
  EXPECT_EQ(streamed, "One two three four five six seven.");
}

TEST(OutputParser, NonEmptyWhenDecodedWithoutContentKind) {
  auto c = run("Sure, here it is.<|end_message|><|content_model_end_sampling|>");
  EXPECT_EQ(c.content, "Sure, here it is.");
  auto d = run("Hello<|content_model_end_sampling|>");  // a bare name-like word is still text
  EXPECT_EQ(d.content, "Hello");
}

TEST(OutputParser, StopsAtEndSamplingNotAtEndMessage) {
  const auto& tok = test::chat_tokenizer();
  OutputParser parser(tok);
  Collected c;
  for (int32_t id : tok.encode("<|content_thinking|>hmm<|end_message|>", true)) collect(parser.push(id), c);
  EXPECT_FALSE(parser.done());  // 200010 closes a block, not the turn
  EXPECT_EQ(c.end_events, 0);
  collect(parser.push(chat_tokens::kEndSampling), c);
  EXPECT_TRUE(parser.done());
  EXPECT_EQ(c.end, "stop");
  collect(parser.push(tok.encode("more", false)[0]), c);  // ignored after the end
  collect(parser.finish(), c);
  EXPECT_EQ(c.end_events, 1);
  EXPECT_EQ(c.content, "");
}

TEST(OutputParser, FinishWithoutEndIsIncomplete) {
  auto c = run("<|content_text|>Truncated answ");
  EXPECT_EQ(c.content, "Truncated answ");
  EXPECT_EQ(c.end, "incomplete");
}

TEST(OutputParser, MalformedToolCallIsAnErrorNotACrash) {
  auto c = run("<|content_text|>Calling.<|end_message|><|message_model|>get_weather<|content_invoke_tool_json|>"
               "{\"name\":\"get_weather\",\"args\":{\"city\":<|end_message|><|content_model_end_sampling|>");
  EXPECT_TRUE(c.calls.empty());
  EXPECT_NE(c.errors.find("malformed tool call to get_weather"), std::string::npos) << c.errors;
  EXPECT_EQ(c.content, "Calling.");
  EXPECT_EQ(c.end, "stop");
  for (const char* bad : {"[1,2]", "{\"name\":5,\"args\":{}}", "{\"args\":[1]}", "", "{\"args\":\"nope\"}"}) {
    auto d = run(std::string("<|content_invoke_tool_json|>") + bad + "<|end_message|><|content_model_end_sampling|>");
    EXPECT_TRUE(d.calls.empty()) << bad;
    EXPECT_FALSE(d.errors.empty()) << bad;
    EXPECT_EQ(d.end, "stop");
  }
  // Truncated mid-call: reported at finish().
  auto e = run("f<|content_invoke_tool_json|>{\"name\":\"f\",\"ar");
  EXPECT_FALSE(e.errors.empty());
  EXPECT_EQ(e.end, "incomplete");
}

TEST(OutputParser, ArgumentsAsStringAndNameFromHeader) {
  auto c = run("lookup<|content_invoke_tool_json|>{\"arguments\":\"{\\\"q\\\": 1}\"}<|end_message|><|content_model_end_sampling|>");
  ASSERT_EQ(c.calls.size(), 1u);
  EXPECT_EQ(c.calls[0].first, "lookup");
  EXPECT_EQ(c.calls[0].second, "{\"q\":1}");
}

TEST(OutputParser, NoSpecialTokenEverVisible) {
  // Every structural id in the middle of text: none shows up, text around survives.
  const auto& tok = test::chat_tokenizer();
  for (int32_t special = chat_tokens::kFirstSpecial; special <= chat_tokens::kLastSpecial; ++special) {
    if (special == chat_tokens::kEndSampling) continue;
    OutputParser parser(tok);
    Collected c;
    for (int32_t id : tok.encode("<|content_text|>alpha", true)) collect(parser.push(id), c);
    collect(parser.push(special), c);
    collect(parser.finish(), c);
    expect_no_markers(c.content);
    expect_no_markers(c.reasoning);
    EXPECT_EQ(c.content.substr(0, 5), "alpha") << special;
  }
}

TEST(OutputParser, MultiByteCharactersAcrossTokensAndMarkers) {
  auto c = run("<|content_thinking|>日本語で考える 🤔<|end_message|><|message_model|><|content_text|>答え: 東京 🗼<|end_message|>"
               "<|content_model_end_sampling|>");
  EXPECT_EQ(c.reasoning, "日本語で考える 🤔");
  EXPECT_EQ(c.content, "答え: 東京 🗼");
}

TEST(OutputParser, MessageCarriesToolCallsInOpenAIShape) {
  OutputParser* p = nullptr;
  run("<|content_text|>Checking.<|end_message|><|message_model|>get_weather<|content_invoke_tool_json|>"
      "{\"name\":\"get_weather\",\"args\":{\"city\":\"Rome\"}}<|end_message|><|content_model_end_sampling|>",
      true, &p);
  auto m = p->message();
  ASSERT_TRUE(m.contains("tool_calls"));
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], "{\"city\":\"Rome\"}");
  EXPECT_EQ(m["content"], "Checking.");
}

// Random mixes of structural ids, text ids and partial UTF-8: never a crash, never a marker
// in visible text, and the end token always ends the turn.
TEST(OutputParser, RandomSequencesAreSafe) {
  const auto& tok = test::chat_tokenizer();
  auto text_ids = tok.encode("Hello, wörld! 日本 🤔 {\"name\":\"f\",\"args\":{\"a\":[1,2]}} get_weather", false);
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 300; ++trial) {
    OutputParser parser(tok);
    Collected c;
    int length = int(rng() % 60);
    bool ended = false;
    for (int i = 0; i < length; ++i) {
      int32_t id;
      switch (rng() % 4) {
        case 0: id = chat_tokens::kFirstSpecial + int32_t(rng() % 60); break;
        case 1: id = int32_t(rng() % 200) + 100000; break;  // arbitrary BPE ids (may split UTF-8)
        default: id = text_ids[rng() % text_ids.size()]; break;
      }
      collect(parser.push(id), c);
      if (id == chat_tokens::kEndSampling) ended = true;
      EXPECT_EQ(parser.done(), ended);
    }
    collect(parser.finish(), c);
    EXPECT_EQ(c.end_events, 1);
    EXPECT_EQ(c.end, ended ? "stop" : "incomplete");
    for (const auto& e : c.all)
      if (e.kind == ChatEvent::Kind::Content || e.kind == ChatEvent::Kind::Reasoning) expect_no_markers(e.text);
  }
}


// Issue 21: model-written arguments nested 10,000 deep once overflowed the stack in a recursive
// JSON copy; they are a malformed call now, and the turn goes on.
TEST(OutputParser, ArgumentsNestedTooDeeplyAreAMalformedCall) {
  std::string deep = std::string(10000, '[') + std::string(10000, ']');
  auto c = run("get_weather<|content_invoke_tool_json|>{\"name\":\"get_weather\",\"args\":{\"x\":" + deep +
               "}}<|end_message|><|message_model|><|content_text|>after<|end_message|><|content_model_end_sampling|>");
  EXPECT_TRUE(c.calls.empty());
  EXPECT_NE(c.errors.find("malformed tool call to get_weather: arguments nest deeper than 128 levels"), std::string::npos)
      << c.errors;
  EXPECT_EQ(c.content, "after");
  std::string as_string = "\"" + std::string(10000, '[') + std::string(10000, ']') + "\"";
  c = run("f<|content_invoke_tool_json|>{\"name\":\"f\",\"args\":" + as_string +
          "}<|end_message|><|content_model_end_sampling|>");
  EXPECT_NE(c.errors.find("nest deeper than 128 levels"), std::string::npos) << c.errors;
  // 100 levels is still a call.
  std::string ok = std::string(100, '[') + std::string(100, ']');
  c = run("f<|content_invoke_tool_json|>{\"name\":\"f\",\"args\":{\"x\":" + ok +
          "}}<|end_message|><|content_model_end_sampling|>");
  ASSERT_EQ(c.calls.size(), 1u) << c.errors;
}

}  // namespace
}  // namespace inkling
