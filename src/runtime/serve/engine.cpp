#include "runtime/serve/engine.h"

#include <algorithm>
#include <random>

#include "runtime/generate/sampler.h"
#include "runtime/serve/tool_forcer.h"
#include "runtime/serve/turn_output.h"
#include "tensor/error.h"

namespace inkling::serve {

using Clock = std::chrono::steady_clock;

namespace {

// The last event of a request that failed before or outside its own steps.
std::vector<Event> failed(std::string error) {
  std::vector<Event> events(1);
  events[0].kind = Event::Kind::Finish;
  events[0].finish_reason = FinishReason::Error;
  events[0].error = std::move(error);
  return events;
}

}  // namespace

bool RequestHandle::wait(std::vector<Event>& out, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (finish_taken_) return true;
  ready_.wait_for(lock, timeout, [&] { return !events_.empty(); });
  for (Event& e : events_) out.push_back(std::move(e));
  events_.clear();
  if (finish_queued_) finish_taken_ = true;
  return finish_taken_;
}

void RequestHandle::push(std::vector<Event>& events) {
  if (events.empty()) return;
  {
    std::lock_guard lock(mutex_);
    for (Event& e : events) {
      if (e.kind == Event::Kind::Finish) finish_queued_ = true;
      events_.push_back(std::move(e));
    }
  }
  events.clear();
  ready_.notify_all();
}

struct Engine::Job {
  std::shared_ptr<RequestHandle> handle;
  Request request;
  std::vector<int32_t> prompt;
  Clock::time_point submitted;
};

struct Engine::Slot {
  int index = 0;
  std::unique_ptr<Job> job;
  std::optional<SequenceState> state;
  std::vector<float> logits, chosen_logits;
  size_t prompt_fed = 0;
  size_t cached = 0;  // prompt tokens the kept state already held
  std::optional<Sampler> sampler;
  std::optional<TurnOutput> output;
  std::optional<ToolCallForcer> forcer;
  std::vector<int32_t> script;
  size_t script_next = 0;
  int64_t generated = 0;
  Clock::time_point started, first_token;
  SlotInfo info;  // read by other threads under the engine's mutex
};

Engine::Engine(InklingModel& model, const Tokenizer& tokenizer, EngineOptions options)
    : model_(&model), tokenizer_(&tokenizer), options_(std::move(options)) {
  if (options_.parallel < 1) throw Error("--parallel must be at least 1");
  if (options_.prefill_chunk < 1) throw Error("the prefill chunk must be at least 1 token");
  if (options_.stop_ids.empty()) options_.stop_ids = {200006};
  for (int i = 0; i < options_.parallel; ++i) {
    auto slot = std::make_unique<Slot>();
    slot->index = i;
    slot->info.index = i;
    slots_.push_back(std::move(slot));
  }
  thread_ = std::thread([this] { run(); });
}

Engine::~Engine() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<RequestHandle> Engine::submit(Request request, std::vector<int32_t> prompt) {
  auto job = std::make_unique<Job>();
  job->request = std::move(request);
  job->prompt = std::move(prompt);
  job->submitted = Clock::now();
  std::shared_ptr<RequestHandle> handle;
  {
    std::lock_guard lock(mutex_);
    handle = std::make_shared<RequestHandle>(next_id_++);
    job->handle = handle;
    if (!alive_) {
      std::vector<Event> events = failed("the inference loop has stopped");
      handle->push(events);
      return handle;
    }
    queue_.push_back(std::move(job));
  }
  work_.notify_all();
  return handle;
}

void Engine::cancel_all() {
  {
    std::lock_guard lock(mutex_);
    for (auto& slot : slots_)
      if (slot->job) slot->job->handle->cancel();
    for (auto& job : queue_) job->handle->cancel();
  }
  work_.notify_all();
}

std::vector<SlotInfo> Engine::slots() const {
  std::lock_guard lock(mutex_);
  std::vector<SlotInfo> out;
  for (const auto& slot : slots_) out.push_back(slot->info);
  return out;
}

size_t Engine::queue_depth() const {
  std::lock_guard lock(mutex_);
  return queue_.size();
}

EngineCounters Engine::counters() const {
  std::lock_guard lock(mutex_);
  return counters_;
}

// A free slot for `job`: the one whose kept state is the longest proper prefix of its prompt
// (`reused` tokens), else one holding nothing, else the one holding the least.
Engine::Slot* Engine::slot_for(const Job& job, size_t& reused) {
  Slot* best = nullptr;
  reused = 0;
  for (auto& slot : slots_) {
    if (slot->job || !slot->state || !job.request.cache_prompt) continue;
    const std::vector<int32_t>& held = slot->state->tokens;
    if (held.size() > reused && held.size() < job.prompt.size() &&
        std::equal(held.begin(), held.end(), job.prompt.begin())) {
      best = slot.get();
      reused = held.size();
    }
  }
  if (best) return best;
  for (auto& slot : slots_) {
    if (slot->job) continue;
    const size_t held = slot->state ? slot->state->tokens.size() : 0;
    const size_t best_held = best && best->state ? best->state->tokens.size() : 0;
    if (!best || held < best_held) best = slot.get();
  }
  return best;
}

void Engine::admit() {
  while (!queue_.empty()) {
    size_t reused = 0;
    Slot* slot = slot_for(*queue_.front(), reused);
    if (!slot) return;
    slot->job = std::move(queue_.front());
    queue_.pop_front();
    Slot& s = *slot;
    const Request& r = s.job->request;
    if (reused == 0) s.state.reset();  // a fresh sequence at the first step
    s.prompt_fed = reused;
    s.cached = reused;
    s.generated = 0;
    s.script.clear();
    s.script_next = 0;
    if (options_.allow_scripts && !r.scripted_output.empty())
      s.script = tokenizer_->encode(r.scripted_output, /*parse_special=*/true);
    SamplingParams sampling = r.sampling;
    if (!r.seed_given) sampling.seed = std::random_device{}();
    s.sampler.emplace(sampling);
    s.output.emplace(*tokenizer_, r, std::to_string(s.job->handle->id()));
    s.forcer.emplace(*tokenizer_, r);
    s.started = Clock::now();
    s.info = SlotInfo{s.index, true, s.job->handle->id(), int64_t(s.job->prompt.size()), int64_t(reused), 0,
                      int64_t(reused)};
    if (reused > 0) {
      ++counters_.cache_hits;
      counters_.cached_prompt_tokens += int64_t(reused);
    }
  }
}

void Engine::run() {
  try {
    while (true) {
      std::vector<Slot*> active;
      {
        std::unique_lock lock(mutex_);
        work_.wait(lock, [&] {
          if (stopping_ || !queue_.empty()) return true;
          for (auto& slot : slots_)
            if (slot->job) return true;
          return false;
        });
        if (stopping_) break;
        admit();
        for (auto& slot : slots_)
          if (slot->job) active.push_back(slot.get());
      }
      for (Slot* slot : active) {
        step(*slot);
        if (options_.test_step_delay_ms > 0)
          std::this_thread::sleep_for(std::chrono::milliseconds(options_.test_step_delay_ms));
      }
    }
  } catch (const std::exception& e) {
    alive_ = false;
    std::lock_guard lock(mutex_);
    for (auto& slot : slots_)
      if (slot->job) {
        std::vector<Event> events = failed(std::string("the inference loop stopped: ") + e.what());
        slot->job->handle->push(events);
        slot->job.reset();
      }
    for (auto& job : queue_) {
      std::vector<Event> events = failed("the inference loop stopped");
      job->handle->push(events);
    }
    queue_.clear();
  }
}

void Engine::finish(Slot& s, FinishReason reason, std::string error) {
  std::vector<Event> events;
  if (s.output && reason != FinishReason::Error) s.output->finish(events);
  const auto now = Clock::now();
  Event e;
  e.kind = Event::Kind::Finish;
  e.finish_reason = reason;
  e.error = std::move(error);
  if (reason == FinishReason::StopSequence && s.output->matched_stop()) e.stop_sequence = *s.output->matched_stop();
  Usage& u = e.usage;
  u.prompt_tokens = int64_t(s.job->prompt.size());
  u.cached_tokens = int64_t(s.cached);
  u.completion_tokens = s.generated;
  u.reasoning_tokens = s.output ? s.output->reasoning_tokens() : 0;
  u.queue_seconds = std::chrono::duration<double>(s.started - s.job->submitted).count();
  const bool sampled = s.generated > 0;
  u.prompt_seconds = std::chrono::duration<double>((sampled ? s.first_token : now) - s.started).count();
  u.generation_seconds = sampled ? std::chrono::duration<double>(now - s.first_token).count() : 0.0;
  events.push_back(std::move(e));
  {
    std::lock_guard lock(mutex_);
    ++counters_.requests_finished;
    if (reason == FinishReason::Cancelled) ++counters_.cancelled;
    counters_.prompt_tokens += int64_t(s.prompt_fed - s.cached);
    counters_.generated_tokens += s.generated;
    counters_.prompt_seconds += u.prompt_seconds;
    counters_.generation_seconds += u.generation_seconds;
    if (sampled) {
      counters_.first_token_seconds_sum += std::chrono::duration<double>(s.first_token - s.job->submitted).count();
      ++counters_.first_token_count;
    }
    s.job->handle->push(events);
    s.job.reset();
    // The state stays for the next turn of the conversation, unless an error left it unknown.
    if (reason == FinishReason::Error) s.state.reset();
    s.output.reset();
    s.forcer.reset();
    s.info = SlotInfo{s.index, false, -1, 0, 0, 0, s.state ? int64_t(s.state->tokens.size()) : 0};
  }
}

void Engine::step(Slot& s) {
  try {
    if (s.job->handle->cancelled()) return finish(s, FinishReason::Cancelled);
    if (!s.state) {
      s.state = model_->new_sequence();
      s.logits.assign(size_t(model_->vocab()), 0.0f);
    }
    const std::vector<int32_t>& prompt = s.job->prompt;
    if (s.prompt_fed < prompt.size()) {
      const size_t n = std::min(prompt.size() - s.prompt_fed, size_t(options_.prefill_chunk));
      const bool last = s.prompt_fed + n == prompt.size();
      model_->prefill(*s.state, std::span<const int32_t>(prompt).subspan(s.prompt_fed, n), last ? s.logits.data() : nullptr);
      s.prompt_fed += n;
      {
        std::lock_guard lock(mutex_);
        s.info.prompt_done = int64_t(s.prompt_fed);
      }
      if (last && s.state->position >= s.state->context_limit) return finish(s, FinishReason::Length);
      return;
    }
    sample_and_feed(s);
  } catch (const std::exception& e) {
    if (s.job) finish(s, FinishReason::Error, e.what());
  }
}

void Engine::sample_and_feed(Slot& s) {
  const Request& r = s.job->request;
  const bool want_logprobs = r.top_logprobs >= 0;
  if (want_logprobs) s.chosen_logits = s.logits;  // before penalties change them
  const bool scripted = s.script_next < s.script.size();
  const int32_t candidate = scripted ? s.script[s.script_next] : s.sampler->sample(s.logits, s.state->tokens);
  bool consumed = true;
  const int32_t token = s.forcer->active() ? s.forcer->choose(candidate, s.logits, consumed) : candidate;
  if (scripted && consumed) ++s.script_next;  // an inserted token leaves the script where it was
  if (s.generated == 0) s.first_token = Clock::now();
  ++s.generated;
  std::vector<Event> events;
  s.output->push(token, want_logprobs ? std::span<const float>(s.chosen_logits) : std::span<const float>(), events);
  s.job->handle->push(events);
  {
    std::lock_guard lock(mutex_);
    s.info.generated = s.generated;
  }
  const bool eos = std::find(options_.stop_ids.begin(), options_.stop_ids.end(), token) != options_.stop_ids.end();
  if (s.output->matched_stop()) return finish(s, FinishReason::StopSequence);
  if (s.output->should_stop()) return finish(s, FinishReason::ToolCalls);
  if (eos && !r.ignore_eos) return finish(s, s.output->tool_calls() > 0 ? FinishReason::ToolCalls : FinishReason::Stop);
  if (r.max_tokens > 0 && s.generated >= r.max_tokens) return finish(s, FinishReason::Length);
  const int32_t next[1] = {token};
  model_->prefill(*s.state, next, s.logits.data());
  // Prompt and generated tokens together never pass the context.
  if (s.state->position >= s.state->context_limit) return finish(s, FinishReason::Length);
}

}  // namespace inkling::serve
