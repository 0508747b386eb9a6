#include "runtime/serve/turn_output.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace inkling::serve {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::ToolCalls: return "tool_calls";
    case FinishReason::StopSequence: return "stop_sequence";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::Error: return "error";
  }
  return "stop";
}

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

std::string StopMatcher::push(const std::string& text) {
  if (matched_) return {};
  if (stops_.empty()) return text;
  held_ += text;
  size_t best = std::string::npos;
  for (size_t i = 0; i < stops_.size(); ++i) {
    size_t at = held_.find(stops_[i]);
    if (at != std::string::npos && at < best) {
      best = at;
      matched_index_ = i;
    }
  }
  if (best != std::string::npos) {
    matched_ = true;
    std::string shown = held_.substr(0, best);
    held_.clear();
    return shown;
  }
  // Keep the longest tail that is the start of some stop string.
  size_t keep = 0;
  for (const std::string& stop : stops_)
    for (size_t k = std::min(stop.size() - 1, held_.size()); k > keep; --k)
      if (held_.compare(held_.size() - k, k, stop, 0, k) == 0) {
        keep = k;
        break;
      }
  std::string shown = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return shown;
}

std::string StopMatcher::flush() {
  std::string rest = std::move(held_);
  held_.clear();
  return matched_ ? std::string() : rest;
}

TurnOutput::TurnOutput(const Tokenizer& tokenizer, const Request& request, std::string call_id_prefix)
    : tokenizer_(&tokenizer),
      request_(&request),
      call_id_prefix_(std::move(call_id_prefix)),
      raw_(request.is_raw()),
      parser_(tokenizer, OutputParserOptions{.stream_tool_calls = true}),
      decoder_(tokenizer, /*skip_special=*/true),
      stop_matcher_(request.stop) {}

std::string TurnOutput::token_string(int32_t id) const {
  if (tokenizer_->is_special(id)) return tokenizer_->token_text(id);
  return std::string(tokenizer_->token_bytes(id));
}

void TurnOutput::logprob_of(int32_t id, std::span<const float> logits) {
  if (request_->top_logprobs < 0 || logits.empty()) return;
  float top = -INFINITY;
  for (float v : logits) top = std::max(top, v);
  double sum = 0.0;
  for (float v : logits) sum += std::exp(double(v) - top);
  const float log_norm = top + float(std::log(sum));
  TokenLogprob entry;
  entry.token = token_string(id);
  entry.logprob = logits[size_t(id)] - log_norm;
  const size_t n = std::min<size_t>(size_t(request_->top_logprobs), logits.size());
  if (n > 0) {
    std::vector<int32_t> order(logits.size());
    std::iota(order.begin(), order.end(), 0);
    auto better = [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b); };
    std::partial_sort(order.begin(), order.begin() + std::ptrdiff_t(n), order.end(), better);
    for (size_t i = 0; i < n; ++i)
      entry.top.emplace_back(token_string(order[i]), logits[size_t(order[i])] - log_norm);
  }
  pending_logprobs_.push_back(std::move(entry));
}

void TurnOutput::content(std::string text, std::vector<Event>& out) { emit_content(stop_matcher_.push(text), out); }

void TurnOutput::emit_content(std::string shown, std::vector<Event>& out) {
  if (shown.empty() && pending_logprobs_.empty()) return;
  Event e;
  e.kind = Event::Kind::Content;
  e.text = std::move(shown);
  e.logprobs = std::move(pending_logprobs_);
  pending_logprobs_.clear();
  out.push_back(std::move(e));
}

void TurnOutput::push(int32_t id, std::span<const float> logits, std::vector<Event>& out) {
  if (stop_matcher_.matched()) return;
  if (raw_) {
    logprob_of(id, logits);
    content(decoder_.push(id), out);
    return;
  }
  std::vector<ChatEvent> events = parser_.push(id);
  if (parser_.in_reasoning()) ++reasoning_tokens_;
  const bool visible = !tokenizer_->is_special(id) && !parser_.in_reasoning() && !parser_.in_tool_call();
  if (visible) logprob_of(id, logits);
  handle(events, out);
}

void TurnOutput::handle(std::vector<ChatEvent>& events, std::vector<Event>& out) {
  auto call_event = [&](Event::Kind kind, const std::string& name, std::string text) {
    Event e;
    e.kind = kind;
    e.tool_index = tool_calls_;
    e.tool_id = current_call_id_;
    e.tool_name = name;
    e.text = std::move(text);
    out.push_back(std::move(e));
  };
  const bool calls_as_text = request_->tool_choice == ToolChoice::None;
  for (ChatEvent& ce : events) {
    switch (ce.kind) {
      case ChatEvent::Kind::Reasoning: {
        Event e;
        e.kind = Event::Kind::Reasoning;
        e.text = std::move(ce.text);
        out.push_back(std::move(e));
        break;
      }
      case ChatEvent::Kind::Content:
        content(std::move(ce.text), out);
        break;
      case ChatEvent::Kind::ToolCallStart: {
        if (calls_as_text || stop_after_call_) break;
        current_call_id_ = "call_" + call_id_prefix_ + "_" + std::to_string(tool_calls_);
        call_open_ = true;
        call_event(Event::Kind::ToolCallStart, ce.name, {});
        break;
      }
      case ChatEvent::Kind::ToolCallDelta: {
        if (calls_as_text || stop_after_call_) break;
        call_event(Event::Kind::ToolCallArguments, ce.name, std::move(ce.arguments));
        break;
      }
      case ChatEvent::Kind::ToolCall: {
        if (stop_after_call_) break;
        if (calls_as_text) {  // tools are off for this request: the call is text like any other
          content("{\"name\":" + nlohmann::ordered_json(ce.name).dump() + ",\"args\":" + ce.arguments + "}", out);
          break;
        }
        call_event(Event::Kind::ToolCallEnd, ce.name, std::move(ce.arguments));
        ++tool_calls_;
        ++completed_calls_;
        call_open_ = false;
        if (!request_->parallel_tool_calls) stop_after_call_ = true;
        break;
      }
      case ChatEvent::Kind::Error: {
        Event w;
        w.kind = Event::Kind::Warning;
        w.text = ce.text + "; returned as content";
        if (call_open_) {  // its start already went out: the call is withdrawn
          w.tool_index = tool_calls_++;
          w.tool_id = current_call_id_;
          call_open_ = false;
        }
        out.push_back(std::move(w));
        content(std::move(ce.arguments), out);
        break;
      }
      case ChatEvent::Kind::End:
        break;
    }
  }
}

void TurnOutput::finish(std::vector<Event>& out) {
  if (raw_) {
    content(decoder_.flush(), out);
  } else if (!stop_matcher_.matched()) {
    std::vector<ChatEvent> events = parser_.finish();  // an unfinished block, a cut-off call
    handle(events, out);
  }
  emit_content(stop_matcher_.flush(), out);  // the held tail, and logprobs not yet sent
}

}  // namespace inkling::serve
