// POST /v1/completions: a raw prompt (no chat template) in, text out.
#include "apps/server/front_door.h"

namespace inkling::server {

namespace {

const char* finish_name(FinishReason reason) { return reason == FinishReason::Length ? "length" : "stop"; }

class CompletionResponder final : public Responder {
 public:
  CompletionResponder(std::string model, bool logprobs)
      : id_(random_id("cmpl-")), model_(std::move(model)), created_(unix_time()), logprobs_(logprobs) {}

  std::string stream_event(const Event& e) override {
    if (e.kind == Event::Kind::Content) {
      if (e.text.empty() && (!logprobs_ || e.logprobs.empty())) return {};
      json lp;
      if (logprobs_) lp = logprobs_json(e.logprobs, offset_);
      offset_ += int64_t(e.text.size());
      return chunk(e.text, json(), lp);
    }
    if (e.kind != Event::Kind::Finish) return {};
    if (e.finish_reason == FinishReason::Error)
      return "data: " + dump(openai_error(ApiError(500, "server_error", e.error))) + "\n\ndata: [DONE]\n\n";
    return chunk("", finish_name(e.finish_reason), json()) + "data: [DONE]\n\n";
  }

  json complete(const Turn& turn) override {
    std::string text = turn.text();
    json choice = {{"text", text}, {"index", 0}, {"logprobs", json()}, {"finish_reason", finish_name(turn.finish_reason)}};
    if (logprobs_) choice["logprobs"] = logprobs_json(turn.logprobs, 0);
    json body = base();
    body["choices"] = json::array({choice});
    const auto& u = turn.usage;
    body["usage"] = {{"prompt_tokens", u.prompt_tokens},
                     {"completion_tokens", u.completion_tokens},
                     {"total_tokens", u.prompt_tokens + u.completion_tokens},
                     {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
    return body;
  }

 private:
  // The legacy shape: parallel arrays of tokens, their logprobs, the alternatives, text offsets.
  static json logprobs_json(const std::vector<serve::TokenLogprob>& entries, int64_t offset) {
    json tokens = json::array(), values = json::array(), top = json::array(), offsets = json::array();
    for (const auto& lp : entries) {
      tokens.push_back(lp.token);
      values.push_back(lp.logprob);
      json alternatives = json::object();
      for (const auto& [token, value] : lp.top) alternatives[token] = value;
      top.push_back(alternatives);
      offsets.push_back(offset);
      offset += int64_t(lp.token.size());
    }
    return {{"tokens", tokens}, {"token_logprobs", values}, {"top_logprobs", top}, {"text_offset", offsets}};
  }
  json base() const {
    return {{"id", id_}, {"object", "text_completion"}, {"created", created_}, {"model", model_}};
  }
  std::string chunk(const std::string& text, json finish_reason, json logprobs) {
    json body = base();
    body["choices"] = json::array({{{"text", text}, {"index", 0}, {"logprobs", std::move(logprobs)},
                                    {"finish_reason", std::move(finish_reason)}}});
    return "data: " + dump(body) + "\n\n";
  }

  std::string id_, model_;
  int64_t created_;
  bool logprobs_;
  int64_t offset_ = 0;
};

}  // namespace

Prepared prepare_completion(const json& body, const DoorContext& context) {
  Prepared p;
  serve::Request& r = p.request;
  const json* prompt = field(body, "prompt");
  if (!prompt) throw bad_request("\"prompt\" is required", "prompt");
  // The API's four shapes: a string, an array of ids, and a one-element array of either.
  if (prompt->is_array() && prompt->size() == 1 && ((*prompt)[0].is_string() || (*prompt)[0].is_array()))
    prompt = &(*prompt)[0];
  if (prompt->is_string()) {
    r.raw_prompt = prompt->get<std::string>();
  } else if (prompt->is_array() && !prompt->empty() && (*prompt)[0].is_number()) {
    r.raw_prompt_tokens = get_token_ids(*prompt, context.tokenizer->vocab_size(), "prompt");
  } else {
    throw bad_request("\"prompt\" must be a string or an array of token ids (one prompt per request)", "prompt");
  }
  if (get_bool(body, "echo").value_or(false)) throw bad_request("\"echo\" is not supported", "echo");
  if (auto suffix = get_string(body, "suffix"); suffix && !suffix->empty())
    throw bad_request("\"suffix\" is not supported", "suffix");
  read_sampling(body, context, r);
  r.max_tokens = 16;  // the API's default
  read_common_limits(body, r, "max_tokens", nullptr);
  read_test_script(body, context, r);
  const std::optional<int64_t> logprobs = get_integer(body, "logprobs");
  if (logprobs) {
    if (*logprobs < 0 || *logprobs > 20) throw bad_request("\"logprobs\" must be 0..20", "logprobs");
    r.top_logprobs = int(*logprobs);
  }
  p.stream = get_bool(body, "stream").value_or(false);
  p.responder = std::make_unique<CompletionResponder>(get_string(body, "model").value_or(context.model_name), logprobs.has_value());
  return p;
}

}  // namespace inkling::server
