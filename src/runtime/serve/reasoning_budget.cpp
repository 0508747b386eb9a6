#include "runtime/serve/reasoning_budget.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>

#include "runtime/chat/output_parser.h"

namespace inkling::serve {

namespace {

struct EffortLevel {
  const char* name;
  double value;    // what the chat template renders for the name
  int64_t tokens;  // the reasoning budget at that level
};

// In increasing order of value; xhigh and max render the same number and get the same budget.
constexpr std::array<EffortLevel, 7> kLevels = {{
    {"none", 0.0, 0},
    {"minimal", 0.1, 256},
    {"low", 0.2, 1024},
    {"medium", 0.7, 4096},
    {"high", 0.9, 16384},
    {"xhigh", 0.99, 32768},
    {"max", 0.99, 32768},
}};
constexpr double kDefaultEffort = 0.9;  // the template's, when a request names none

int64_t tokens_at(double value) {
  if (value <= 0.0) return 0;
  const EffortLevel* below = &kLevels[0];
  for (const EffortLevel& level : kLevels) {
    if (value == level.value) return level.tokens;
    if (value < level.value) {
      const double t = (value - below->value) / (level.value - below->value);
      // From 0 tokens a log scale cannot start: the first step is linear.
      if (below->tokens == 0) return int64_t(std::lround(t * double(level.tokens)));
      return int64_t(std::lround(double(below->tokens) *
                                 std::pow(double(level.tokens) / double(below->tokens), t)));
    }
    below = &level;
  }
  return kLevels.back().tokens;
}

}  // namespace

int64_t effort_reasoning_tokens(const nlohmann::ordered_json& effort) {
  if (effort.is_string()) {
    const std::string name = effort.get<std::string>();
    for (const EffortLevel& level : kLevels)
      if (name == level.name) return level.tokens;
  }
  if (effort.is_number()) return tokens_at(effort.get<double>());
  return tokens_at(kDefaultEffort);  // null, or a value the front door would have refused
}

int64_t reasoning_budget(const Request& request) {
  if (request.is_raw()) return -1;
  int64_t budget = request.reasoning_budget_tokens >= 0
                       ? request.reasoning_budget_tokens
                       : effort_reasoning_tokens(request.reasoning_effort);
  const bool constrained = request.grammar || request.tool_choice == ToolChoice::Required ||
                           request.tool_choice == ToolChoice::Function;
  if (constrained && request.max_tokens > 0) budget = std::min(budget, request.max_tokens / 2);
  return budget;
}

void limit_reasoning(int64_t budget, bool in_reasoning, int64_t reasoning_tokens,
                     std::span<float> logits) {
  if (budget < 0 || reasoning_tokens < budget) return;
  if (logits.size() <= size_t(std::max(chat_tokens::kEndMessage, chat_tokens::kContentThinking)))
    return;  // no chat vocabulary
  constexpr float kNever = -std::numeric_limits<float>::infinity();
  if (in_reasoning) {
    const float keep = logits[size_t(chat_tokens::kEndMessage)];
    std::fill(logits.begin(), logits.end(), kNever);
    logits[size_t(chat_tokens::kEndMessage)] = std::isfinite(keep) ? keep : 0.0f;
  } else {
    logits[size_t(chat_tokens::kContentThinking)] = kNever;
  }
}

}  // namespace inkling::serve
