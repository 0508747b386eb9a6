// How many tokens the reasoning span of a chat turn may take, and the step that enforces it.
//
// The budget comes from the request's effort (reasoning_effort, reasoning.effort, Anthropic's
// thinking), or from Anthropic's explicit thinking.budget_tokens. Effort levels are named the way
// the chat template renders them (none 0, minimal 0.1, low 0.2, medium 0.7, high 0.9, xhigh and
// max 0.99; absent: the template's default, 0.9), and the token budgets are the ones the
// Messages front door maps back to those levels (budget_tokens below 2048 is low, below 8192
// medium, below 24576 high), so an effort and a budget_tokens that name the same level agree:
//
//   none 0 | minimal 256 | low 1024 | medium 4096 | high (the default) 16384 | xhigh, max 32768
//
// A number between the levels' numbers is interpolated on a log scale (0.15 -> 512); between 0
// and 0.1 linearly. A turn that must follow a grammar or a tool schema keeps at least half of
// max_tokens for its answer, so there the budget is also at most max_tokens / 2.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>

#include "runtime/serve/request.h"

namespace inkling::serve {

// Reasoning tokens an effort allows: a level name or a number in [0, 0.99] (as
// parse_reasoning_effort returns it); null is the template's default (0.9).
int64_t effort_reasoning_tokens(const nlohmann::ordered_json& effort);

// The reasoning budget of a request, counted as `usage.reasoning_tokens` counts (the opening
// <|content_thinking|> included); -1: unbounded (a raw prompt has no reasoning span).
int64_t reasoning_budget(const Request& request);

// Before sampling: once `reasoning_tokens` reached `budget`, the open reasoning block is closed
// (only <|end_message|> is left) and no new one may open (<|content_thinking|> is removed); a
// negative budget changes nothing. At budget 0 the turn therefore starts with its answer.
void limit_reasoning(int64_t budget, bool in_reasoning, int64_t reasoning_tokens,
                     std::span<float> logits);

}  // namespace inkling::serve
