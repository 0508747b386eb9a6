// The reasoning budget: which effort gives how many reasoning tokens, how max_tokens caps it for
// constrained turns, and the logits step that closes the reasoning once it is spent.
#include "runtime/serve/reasoning_budget.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "runtime/chat/output_parser.h"

namespace inkling::serve {
namespace {

using nlohmann::ordered_json;

TEST(ReasoningBudget, NamedEffortsGiveTheDocumentedTokens) {
  EXPECT_EQ(effort_reasoning_tokens("none"), 0);
  EXPECT_EQ(effort_reasoning_tokens("minimal"), 256);
  EXPECT_EQ(effort_reasoning_tokens("low"), 1024);
  EXPECT_EQ(effort_reasoning_tokens("medium"), 4096);
  EXPECT_EQ(effort_reasoning_tokens("high"), 16384);
  EXPECT_EQ(effort_reasoning_tokens("xhigh"), 32768);
  EXPECT_EQ(effort_reasoning_tokens("max"), 32768);
  // Absent: the template's default effort, 0.9, which is "high".
  EXPECT_EQ(effort_reasoning_tokens(ordered_json()), 16384);
}

TEST(ReasoningBudget, NumbersMatchTheLevelsTheyRenderAsAndInterpolateBetween) {
  // The numbers the template renders for the names give the names' budgets.
  EXPECT_EQ(effort_reasoning_tokens(0.0), 0);
  EXPECT_EQ(effort_reasoning_tokens(0.1), 256);
  EXPECT_EQ(effort_reasoning_tokens(0.2), 1024);
  EXPECT_EQ(effort_reasoning_tokens(0.7), 4096);
  EXPECT_EQ(effort_reasoning_tokens(0.9), 16384);
  EXPECT_EQ(effort_reasoning_tokens(0.99), 32768);
  // Halfway between minimal and low on a log scale; linear from none to minimal.
  EXPECT_EQ(effort_reasoning_tokens(0.15), 512);
  EXPECT_EQ(effort_reasoning_tokens(0.05), 128);
  // More effort never gives fewer tokens.
  int64_t previous = 0;
  for (int hundredths = 0; hundredths <= 99; ++hundredths) {
    const int64_t tokens = effort_reasoning_tokens(hundredths / 100.0);
    EXPECT_GE(tokens, previous) << hundredths;
    previous = tokens;
  }
}

TEST(ReasoningBudget, ConstrainedTurnsKeepHalfOfMaxTokensForTheAnswer) {
  Request r;
  r.reasoning_effort = "high";
  r.max_tokens = 1000;
  EXPECT_EQ(reasoning_budget(r), 16384);  // a free answer: the client sizes max_tokens
  r.grammar = std::make_shared<grammar::Grammar>();
  EXPECT_EQ(reasoning_budget(r), 500);
  r.grammar.reset();
  r.tools.push_back({"f", "", ordered_json::object()});
  r.tool_choice = ToolChoice::Required;
  EXPECT_EQ(reasoning_budget(r), 500);
  r.tool_choice = ToolChoice::Function;
  EXPECT_EQ(reasoning_budget(r), 500);
  r.tool_choice = ToolChoice::Auto;
  EXPECT_EQ(reasoning_budget(r), 16384);
  r.reasoning_effort = "minimal";
  r.tool_choice = ToolChoice::Required;
  EXPECT_EQ(reasoning_budget(r), 256);  // the smaller of the two
  r.max_tokens = 0;                     // no max_tokens: the effort alone
  r.reasoning_effort = "medium";
  EXPECT_EQ(reasoning_budget(r), 4096);
}

TEST(ReasoningBudget, AnExplicitBudgetWinsOverTheEffortAndARawPromptHasNone) {
  Request r;
  r.reasoning_effort = "low";  // what the Messages door renders for budget_tokens 1500
  r.reasoning_budget_tokens = 1500;
  r.max_tokens = 2000;
  EXPECT_EQ(reasoning_budget(r), 1500);
  r.tool_choice = ToolChoice::Required;
  r.tools.push_back({"f", "", ordered_json::object()});
  EXPECT_EQ(reasoning_budget(r), 1000);
  Request raw;
  raw.raw_prompt = "text";
  raw.reasoning_effort = "none";
  EXPECT_EQ(reasoning_budget(raw), -1);
}

std::vector<float> flat_logits() {
  return std::vector<float>(size_t(chat_tokens::kEndMessage) + 100, 1.0f);
}

size_t finite(const std::vector<float>& logits) {
  size_t n = 0;
  for (float v : logits) n += std::isfinite(v) ? 1 : 0;
  return n;
}

TEST(LimitReasoning, ChangesNothingWithinTheBudget) {
  std::vector<float> logits = flat_logits();
  limit_reasoning(10, true, 9, logits);
  limit_reasoning(-1, true, 1000000, logits);
  limit_reasoning(10, false, 3, logits);
  EXPECT_EQ(finite(logits), logits.size());
}

TEST(LimitReasoning, ASpentBudgetClosesTheOpenBlock) {
  std::vector<float> logits = flat_logits();
  logits[size_t(chat_tokens::kEndMessage)] = -INFINITY;  // even when the model would never end it
  limit_reasoning(10, true, 10, logits);
  EXPECT_EQ(finite(logits), 1u);
  EXPECT_TRUE(std::isfinite(logits[size_t(chat_tokens::kEndMessage)]));
}

TEST(LimitReasoning, ASpentBudgetOpensNoNewBlockAndZeroOpensNone) {
  std::vector<float> logits = flat_logits();
  limit_reasoning(0, false, 0, logits);
  EXPECT_EQ(finite(logits), logits.size() - 1);
  EXPECT_FALSE(std::isfinite(logits[size_t(chat_tokens::kContentThinking)]));
}

}  // namespace
}  // namespace inkling::serve
