// The server's per-request output stage: stop strings held back across deltas, tool calls
// streamed in fragments that add up to the final arguments, withdrawn when they do not parse.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "runtime/serve/turn_output.h"
#include "runtime/tokenizer/tokenizer.h"

namespace inkling::serve {
namespace {

const Tokenizer& tokenizer() {
  static const Tokenizer t = Tokenizer::from_file(std::string(INKLING_SOURCE_DIR) + "/data/tokenizer.json");
  return t;
}

std::vector<Event> run(const Request& request, const std::string& script) {
  TurnOutput output(tokenizer(), request, "t");
  std::vector<Event> events;
  for (int32_t id : tokenizer().encode(script, true)) output.push(id, {}, events);
  output.finish(events);
  return events;
}

std::string joined(const std::vector<Event>& events, Event::Kind kind) {
  std::string out;
  for (const Event& e : events)
    if (e.kind == kind) out += e.text;
  return out;
}

TEST(StopMatcher, HoldsBackAPartialMatchAcrossPushes) {
  StopMatcher m({"STOP", "xyz"});
  EXPECT_EQ(m.push("one ST"), "one ");
  EXPECT_EQ(m.push("O"), "");
  EXPECT_EQ(m.push("P two"), "");
  ASSERT_NE(m.matched(), nullptr);
  EXPECT_EQ(*m.matched(), "STOP");
  EXPECT_EQ(m.push("more"), "");
}

TEST(StopMatcher, ReleasesAFalseStartAndFlushes) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.push("a S"), "a ");
  EXPECT_EQ(m.push("T b"), "ST b");
  EXPECT_EQ(m.push(" ST"), " ");
  EXPECT_EQ(m.flush(), "ST");
  EXPECT_EQ(m.matched(), nullptr);
}

TEST(StopMatcher, RandomSplitsGiveTheSameText) {
  const std::string text = "the cat sat on the mat and then STOPPED there";
  std::mt19937 rng(3);
  for (int round = 0; round < 200; ++round) {
    StopMatcher m({"STOP", "mat and x"});
    std::string shown;
    size_t at = 0;
    while (at < text.size()) {
      size_t n = 1 + rng() % 5;
      shown += m.push(text.substr(at, n));
      at += n;
    }
    shown += m.flush();
    EXPECT_EQ(shown, "the cat sat on the mat and then ");
  }
}

TEST(TurnOutput, ToolCallArgumentsStreamInFragmentsThatAddUp) {
  Request r;
  auto events = run(r, "<|message_model|>get<|content_invoke_tool_json|>{\"name\":\"get\",\"args\":{\"city\":\"Paris\","
                       "\"days\":[1,2]}}<|end_message|><|content_model_end_sampling|>");
  int starts = 0, fragments = 0;
  std::string streamed, final_args;
  for (const Event& e : events) {
    if (e.kind == Event::Kind::ToolCallStart) {
      ++starts;
      EXPECT_EQ(e.tool_name, "get");
      EXPECT_EQ(e.tool_index, 0);
    }
    if (e.kind == Event::Kind::ToolCallArguments) {
      ++fragments;
      streamed += e.text;
    }
    if (e.kind == Event::Kind::ToolCallEnd) final_args = e.text;
  }
  EXPECT_EQ(starts, 1);
  EXPECT_GT(fragments, 3);
  EXPECT_EQ(streamed, final_args);
  EXPECT_EQ(final_args, "{\"city\":\"Paris\",\"days\":[1,2]}");
}

TEST(TurnOutput, AStartedCallThatDoesNotParseIsWithdrawnAndBecomesContent) {
  Request r;
  auto events = run(r, "<|message_model|>get<|content_invoke_tool_json|>{\"name\":\"get\",\"args\":{\"a\":"
                       "<|end_message|><|content_model_end_sampling|>");
  bool withdrawn = false;
  for (const Event& e : events)
    if (e.kind == Event::Kind::Warning) withdrawn = e.tool_index == 0 && !e.tool_id.empty();
  EXPECT_TRUE(withdrawn);
  EXPECT_EQ(joined(events, Event::Kind::Content), "{\"name\":\"get\",\"args\":{\"a\":");
  for (const Event& e : events) EXPECT_NE(e.kind, Event::Kind::ToolCallEnd);
}

TEST(TurnOutput, StopStringEndsTheTurnAndIsNotShown) {
  Request r;
  r.stop = {"END"};
  TurnOutput output(tokenizer(), r, "t");
  std::vector<Event> events;
  for (int32_t id : tokenizer().encode("<|content_text|>alpha beta END gamma", true)) {
    output.push(id, {}, events);
    if (output.should_stop()) break;
  }
  output.finish(events);
  EXPECT_EQ(joined(events, Event::Kind::Content), "alpha beta ");
  ASSERT_NE(output.matched_stop(), nullptr);
}

TEST(TurnOutput, ParallelToolCallsFalseStopsAfterTheFirst) {
  Request r;
  r.parallel_tool_calls = false;
  TurnOutput output(tokenizer(), r, "t");
  std::vector<Event> events;
  for (int32_t id : tokenizer().encode("<|message_model|>a<|content_invoke_tool_json|>{\"name\":\"a\",\"args\":{}}<|end_message|>"
                                       "<|message_model|>b<|content_invoke_tool_json|>{\"name\":\"b\",\"args\":{}}<|end_message|>",
                                       true)) {
    output.push(id, {}, events);
    if (output.should_stop()) break;
  }
  int ends = 0;
  for (const Event& e : events) ends += e.kind == Event::Kind::ToolCallEnd;
  EXPECT_EQ(ends, 1);
  EXPECT_TRUE(output.should_stop());
}

TEST(TurnOutput, LogprobsAreNormalizedAndSorted) {
  Request r;
  r.top_logprobs = 3;
  TurnOutput output(tokenizer(), r, "t");
  std::vector<float> logits(size_t(tokenizer().vocab_size()), 0.0f);
  logits[5] = 2.0f;
  logits[7] = 1.0f;
  const int32_t id = tokenizer().encode("hello", false)[0];
  logits[size_t(id)] = 3.0f;
  std::vector<Event> events;
  output.push(chat_tokens::kContentText, {}, events);
  output.push(id, logits, events);
  output.finish(events);
  std::vector<TokenLogprob> all;
  for (const Event& e : events) all.insert(all.end(), e.logprobs.begin(), e.logprobs.end());
  ASSERT_EQ(all.size(), 1u);
  double sum = 0;
  for (float v : logits) sum += std::exp(double(v) - 3.0);
  EXPECT_NEAR(all[0].logprob, -std::log(sum), 1e-5);
  ASSERT_EQ(all[0].top.size(), 3u);
  EXPECT_EQ(all[0].top[0].first, "hello");
  EXPECT_GT(all[0].top[0].second, all[0].top[1].second);
  EXPECT_GT(all[0].top[1].second, all[0].top[2].second);
}

}  // namespace
}  // namespace inkling::serve
