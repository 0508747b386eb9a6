#include "runtime/serve/tool_forcer.h"

#include "runtime/chat/output_parser.h"

namespace inkling::serve {

ToolCallForcer::ToolCallForcer(const Tokenizer& tokenizer, const Request& request) {
  if (request.is_raw() || request.tools.empty()) return;
  if (request.tool_choice != ToolChoice::Required && request.tool_choice != ToolChoice::Function) return;
  for (const ToolSpec& tool : request.tools) {
    if (request.tool_choice == ToolChoice::Function && tool.name != request.tool_choice_name) continue;
    std::vector<int32_t> ids = tokenizer.encode(tool.name, /*parse_special=*/false);
    if (!ids.empty()) {
      name_tokens_.push_back(std::move(ids));
      names_.push_back(tool.name);
    }
  }
  if (name_tokens_.empty()) return;
  for (size_t i = 0; i < name_tokens_.size(); ++i) live_.push_back(i);
  phase_ = Phase::Start;
}

int32_t ToolCallForcer::name_token(int32_t candidate, std::span<const float> logits) {
  int32_t token = -1;
  for (size_t t : live_)
    if (name_tokens_[t][written_] == candidate) token = candidate;
  if (token < 0) {
    float best = 0.0f;
    for (size_t t : live_) {
      const int32_t id = name_tokens_[t][written_];
      const float score = size_t(id) < logits.size() ? logits[size_t(id)] : 0.0f;
      if (token < 0 || score > best) {
        token = id;
        best = score;
      }
    }
  }
  std::erase_if(live_, [&](size_t t) { return name_tokens_[t][written_] != token; });
  ++written_;
  for (size_t t : live_)
    if (name_tokens_[t].size() == written_) {
      phase_ = Phase::Invoke;  // a whole name is written
      chosen_ = names_[t];
    }
  return token;
}

int32_t ToolCallForcer::choose(int32_t candidate, std::span<const float> logits, bool& consumed) {
  using namespace chat_tokens;
  consumed = false;
  const int32_t token = next_token(candidate, logits, consumed);
  consumed = consumed || token == candidate;
  return token;
}

int32_t ToolCallForcer::next_token(int32_t candidate, std::span<const float> logits, bool& consumed) {
  using namespace chat_tokens;
  switch (phase_) {
    case Phase::Done:
      return candidate;
    case Phase::Start:
      // Right after the generation prompt: a reasoning block may come first (an empty model
      // header is let through); anything else is where the answer would start.
      if (candidate == kContentThinking) {
        phase_ = Phase::Reasoning;
        return candidate;
      }
      if (candidate == kMessageModel) return candidate;
      phase_ = Phase::Name;
      return name_token(candidate, logits);
    case Phase::Reasoning:
      if (candidate == kEndMessage || candidate == kEndSampling || candidate == kMessageModel) {
        phase_ = Phase::Header;
        consumed = true;
        return kEndMessage;  // the reasoning block closes; the turn goes on to the call
      }
      return candidate;
    case Phase::Header:
      phase_ = Phase::Name;
      return kMessageModel;
    case Phase::Name:
      return name_token(candidate, logits);
    case Phase::Invoke:
      phase_ = Phase::Done;
      return kInvokeToolJson;
  }
  return candidate;
}

}  // namespace inkling::serve
