#include "runtime/serve/engine.h"

#include <algorithm>
#include <cstdio>
#include <random>
#include <stdexcept>

#include "runtime/generate/sampler.h"
#include "runtime/chat/output_parser.h"
#include "runtime/serve/reasoning_budget.h"
#include "runtime/serve/response_constraint.h"
#include "runtime/serve/tool_forcer.h"
#include "runtime/serve/turn_output.h"
#include "tensor/error.h"

namespace inkling::serve {

using Clock = std::chrono::steady_clock;

namespace {

// The last event of a request that ended before or outside its own steps.
std::vector<Event> ended(FinishReason reason, std::string error = {}) {
  std::vector<Event> events(1);
  events[0].kind = Event::Kind::Finish;
  events[0].finish_reason = reason;
  events[0].error = std::move(error);
  return events;
}

std::vector<Event> failed(std::string error) { return ended(FinishReason::Error, std::move(error)); }

std::string mib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", double(bytes) / 1048576.0);
  return text;
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
  size_t cached = 0;  // prompt tokens the kept state or a snapshot already held
  std::optional<int32_t> pending;  // sampled, fed at the next step
  int64_t reserved = 0;            // bytes of the KV budget this request holds
  int64_t admitted = 0;            // admission order: earlier prompts get the step's budget first
  std::optional<Sampler> sampler;
  std::optional<TurnOutput> output;
  std::optional<ToolCallForcer> forcer;
  std::optional<ResponseConstraint> constraint;
  int64_t reasoning_budget = -1;  // reasoning tokens before the answer is forced (-1: unbounded)
  grammar::TokenMask allowed;
  std::vector<int32_t> script;
  size_t script_next = 0;
  int64_t generated = 0;
  Clock::time_point started, first_token;
  SlotInfo info;  // read by other threads under the engine's mutex
};

Engine::Engine(InklingModel& model, const Tokenizer& tokenizer, EngineOptions options)
    : model_(&model),
      tokenizer_(&tokenizer),
      options_(std::move(options)),
      cache_(options_.cache_budget),
      pacer_(options_.max_step_seconds, options_.min_prompt_tokens_per_step, options_.parallel) {
  if (options_.parallel < 1) throw Error("--parallel must be at least 1");
  if (options_.prefill_chunk < 1) throw Error("the prefill chunk must be at least 1 token");
  if (options_.batch_tokens < 1 || options_.batch_tokens > model.max_step_tokens())
    throw Error("--batch-tokens must be 1.." + std::to_string(model.max_step_tokens()) + ", got " +
                std::to_string(options_.batch_tokens));
  if (options_.parallel > options_.batch_tokens)
    throw Error("--parallel " + std::to_string(options_.parallel) + " is more than --batch-tokens " +
                std::to_string(options_.batch_tokens) + ": every running sequence needs a token of each step");
  if (options_.checkpoint_every < 0) throw Error("the checkpoint interval must not be negative");
  if (!(options_.max_step_seconds >= 0)) throw Error("--max-step-ms must not be negative");
  options_.prefill_chunk = std::min(options_.prefill_chunk, options_.batch_tokens);
  const int64_t full = model.state_bytes(model.options().context);
  if (options_.kv_budget <= 0) options_.kv_budget = int64_t(options_.parallel) * full;
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
  EngineCounters out = counters_;
  out.kv_reserved = kv_reserved_;
  out.kv_budget = options_.kv_budget;
  return out;
}

int64_t Engine::kv_need(const Request& request, size_t prompt_tokens) const {
  const int64_t context = model_->options().context;
  const int64_t generation = request.max_tokens > 0 ? request.max_tokens : context;
  return model_->state_bytes(std::min(context, int64_t(prompt_tokens) + generation));
}

std::string Engine::never_fits(const Request& request, size_t prompt_tokens) const {
  const int64_t need = kv_need(request, prompt_tokens);
  if (need <= options_.kv_budget) return {};
  return "the request needs " + mib(need) + " MiB of KV cache (" + std::to_string(prompt_tokens) +
         " prompt tokens + " +
         (request.max_tokens > 0 ? "max_tokens " + std::to_string(request.max_tokens)
                                 : std::string("no max_tokens: the rest of the context")) +
         ", up to the context of " + std::to_string(model_->options().context) + ") and the server's KV budget is " +
         mib(options_.kv_budget) + " MiB (--kv-budget); lower max_tokens or raise the budget";
}

bool Engine::fits_now(const Job& job) const {
  return kv_reserved_ + kv_need(job.request, job.prompt.size()) <= options_.kv_budget;
}

// A free slot for `job` and where its prompt starts: the slot whose kept state is the longest
// proper prefix of the prompt (`reused` tokens), or a snapshot of the prompt cache when that is
// longer (restored into the slot holding the least); with neither, the slot holding the least.
Engine::Slot* Engine::slot_for(const Job& job, size_t& reused, std::shared_ptr<const StateSnapshot>& snapshot) {
  Slot* kept = nullptr;
  reused = 0;
  snapshot.reset();
  if (job.request.cache_prompt) {
    for (auto& slot : slots_) {
      if (slot->job || !slot->state) continue;
      const std::vector<int32_t>& held = slot->state->tokens;
      if (held.size() > reused && held.size() < job.prompt.size() &&
          std::equal(held.begin(), held.end(), job.prompt.begin())) {
        kept = slot.get();
        reused = held.size();
      }
    }
    std::shared_ptr<const StateSnapshot> cached = cache_.longest_prefix(job.prompt);
    if (cached && cached->tokens.size() > reused) {
      snapshot = std::move(cached);
      reused = snapshot->tokens.size();
      kept = nullptr;
    }
  }
  if (kept) return kept;
  Slot* best = nullptr;
  for (auto& slot : slots_) {
    if (slot->job) continue;
    const size_t held = slot->state ? slot->state->tokens.size() : 0;
    const size_t best_held = best && best->state ? best->state->tokens.size() : 0;
    if (!best || held < best_held) best = slot.get();
  }
  if (!snapshot) reused = 0;
  return best;
}

void Engine::admit() {
  counters_.waiting_for_memory = 0;
  while (!queue_.empty()) {
    Job& next = *queue_.front();
    if (options_.allow_scripts && next.request.test_stop_loop)
      throw std::runtime_error("a test request stopped the inference loop (inkling_test_stop_loop)");
    if (next.handle->cancelled()) {  // gone before it started: nothing to run
      std::vector<Event> events = ended(FinishReason::Cancelled);
      events[0].usage.prompt_tokens = int64_t(next.prompt.size());
      next.handle->push(events);
      ++counters_.cancelled;
      ++counters_.requests_finished;
      queue_.pop_front();
      continue;
    }
    if (std::string why = never_fits(next.request, next.prompt.size()); !why.empty()) {
      std::vector<Event> events = failed(why);
      next.handle->push(events);
      ++counters_.requests_finished;
      queue_.pop_front();
      continue;
    }
    if (!fits_now(next)) {  // fits once running requests finish
      counters_.waiting_for_memory = int64_t(queue_.size());
      return;
    }
    bool free_slot = false;
    for (auto& slot : slots_) free_slot |= !slot->job;
    if (!free_slot) return;
    size_t reused = 0;
    std::shared_ptr<const StateSnapshot> snapshot;
    Slot* slot = slot_for(next, reused, snapshot);
    std::unique_ptr<Job> job = std::move(queue_.front());
    queue_.pop_front();
    start(*slot, std::move(job), reused, std::move(snapshot));
    // Kept states of the other free slots are memory too: drop them (their snapshots are in the
    // prompt cache) while the running requests' reservations and they exceed the budget.
    int64_t kept = 0;
    for (auto& other : slots_)
      if (!other->job && other->state) kept += model_->state_bytes(other->state->position);
    for (auto& other : slots_) {
      if (kv_reserved_ + kept <= options_.kv_budget) break;
      if (other->job || !other->state) continue;
      kept -= model_->state_bytes(other->state->position);
      other->state.reset();
      other->info.cached_tokens = 0;
    }
  }
}

void Engine::start(Slot& s, std::unique_ptr<Job> job, size_t reused, std::shared_ptr<const StateSnapshot> snapshot) {
  s.job = std::move(job);
  const Request& r = s.job->request;
  s.reserved = kv_need(s.job->request, s.job->prompt.size());
  kv_reserved_ += s.reserved;
  s.admitted = admissions_++;
  s.logits.assign(size_t(model_->vocab()), 0.0f);
  const int64_t room = int64_t(s.job->prompt.size()) + 1;
  if (snapshot) {
    try {
      if (!s.state) s.state = model_->new_sequence(room);
      model_->restore(*snapshot, *s.state);
    } catch (const std::exception&) {  // a snapshot that does not restore: compute the prompt instead
      reused = 0;
    }
  }
  if (reused == 0) s.state = model_->new_sequence(room);
  s.prompt_fed = reused;
  s.cached = reused;
  s.pending.reset();
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
  s.constraint.reset();
  if (r.grammar) s.constraint.emplace(grammar_matcher(r.grammar, r.grammar_key));
  s.reasoning_budget = reasoning_budget(r);
  s.started = Clock::now();
  s.info = SlotInfo{s.index, true, s.job->handle->id(), int64_t(s.job->prompt.size()), int64_t(reused), 0,
                    int64_t(reused)};
  if (reused > 0) {
    ++counters_.cache_hits;
    counters_.cached_prompt_tokens += int64_t(reused);
  }
}

void Engine::run() {
  try {
    while (true) {
      std::vector<Slot*> active;
      {
        std::unique_lock lock(mutex_);
        work_.wait(lock, [&] {
          if (stopping_) return true;
          for (auto& slot : slots_)
            if (slot->job) return true;
          if (queue_.empty()) return false;
          // Queued work that cannot start (memory) waits for a running request, not in a spin.
          return kv_reserved_ == 0 || fits_now(*queue_.front()) || queue_.front()->handle->cancelled();
        });
        if (stopping_) break;
        admit();
        for (auto& slot : slots_)
          if (slot->job) active.push_back(slot.get());
      }
      if (active.empty()) continue;
      step(active);
      if (options_.test_step_delay_ms > 0)
        std::this_thread::sleep_for(std::chrono::milliseconds(options_.test_step_delay_ms));
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

// One batched step: a decode token of every sequence that has one to feed, then prompt chunks in
// admission order while the step's budget lasts (a long prompt ends its chunks on checkpoint
// boundaries), all in one forward call; then every sequence that produced logits samples.
void Engine::step(const std::vector<Slot*>& active) {
  std::vector<Slot*> fed;
  std::vector<BatchItem> items;
  std::vector<size_t> prompt_share;
  for (Slot* s : active)
    if (s->job->handle->cancelled()) finish(*s, FinishReason::Cancelled);
  int64_t budget = options_.batch_tokens;
  for (Slot* s : active) {
    if (!s->job || !s->pending) continue;
    items.push_back({&*s->state, std::span<const int32_t>(&*s->pending, 1), s->logits.data()});
    fed.push_back(s);
    prompt_share.push_back(0);
    --budget;
  }
  const size_t decodes = items.size();
  const int64_t allowance = pacer_.prompt_allowance(int(decodes), budget);
  const bool cut = allowance < budget;
  budget = allowance;
  bool paced = false;  // the cut kept some prompt tokens out of this step
  std::vector<Slot*> prefilling;
  for (Slot* s : active)
    if (s->job && !s->pending && s->prompt_fed < s->job->prompt.size()) prefilling.push_back(s);
  std::sort(prefilling.begin(), prefilling.end(), [](const Slot* a, const Slot* b) { return a->admitted < b->admitted; });
  for (Slot* s : prefilling) {
    if (budget <= 0) {
      paced = paced || cut;
      break;
    }
    const std::vector<int32_t>& prompt = s->job->prompt;
    const size_t chunk = std::min(prompt.size() - s->prompt_fed, size_t(options_.prefill_chunk));
    size_t n = std::min(chunk, size_t(budget));
    paced = paced || (cut && n < chunk);
    const int64_t every = options_.checkpoint_every;
    if (every > 0 && cache_.enabled() && s->job->request.cache_prompt) {
      const size_t boundary = (s->prompt_fed / size_t(every) + 1) * size_t(every);
      if (boundary < prompt.size()) n = std::min(n, boundary - s->prompt_fed);
    }
    const bool last = s->prompt_fed + n == prompt.size();
    items.push_back({&*s->state, std::span<const int32_t>(prompt).subspan(s->prompt_fed, n),
                     last ? s->logits.data() : nullptr});
    fed.push_back(s);
    prompt_share.push_back(n);
    budget -= int64_t(n);
  }
  if (items.empty()) return;
  if (paced) {
    std::lock_guard lock(mutex_);
    ++counters_.paced_steps;
  }
  forward(fed, items, decodes);
  for (size_t i = 0; i < fed.size(); ++i) {
    Slot* s = fed[i];
    if (!s || !s->job) continue;
    try {
      if (prompt_share[i] > 0) {
        after_prefill(*s, prompt_share[i]);
      } else {
        s->pending.reset();
        if (s->state->position >= s->state->context_limit) {
          finish(*s, FinishReason::Length);  // prompt and generated tokens together never pass the context
          continue;
        }
        sample(*s);
      }
    } catch (const std::exception& e) {
      if (s->job) finish(*s, FinishReason::Error, e.what());
    }
  }
}

// The step's forward call. An item that would make the call throw (a token outside the
// vocabulary, the context exceeded) fails its own request before the call; anything that still
// throws leaves the step's states unknown, so every request in it fails, and the loop goes on.
void Engine::forward(std::vector<Slot*>& fed, std::vector<BatchItem>& items, size_t decodes) {
  std::vector<BatchItem> valid;
  int valid_decodes = 0;
  int64_t valid_prompt_tokens = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    try {
      model_->check_tokens(*items[i].state, items[i].tokens);
      valid.push_back(items[i]);
      if (i < decodes)
        ++valid_decodes;
      else
        valid_prompt_tokens += int64_t(items[i].tokens.size());
    } catch (const std::exception& e) {
      finish(*fed[i], FinishReason::Error, e.what());
      fed[i] = nullptr;
    }
  }
  if (valid.empty()) return;
  try {
    const Clock::time_point started = Clock::now();
    model_->forward_batch(valid);
    pacer_.record(std::chrono::duration<double>(Clock::now() - started).count(), valid_decodes, valid_prompt_tokens);
  } catch (const std::exception& e) {
    for (Slot*& s : fed)
      if (s && s->job) {
        finish(*s, FinishReason::Error, std::string("the batched step failed: ") + e.what());
        s = nullptr;
      }
    return;
  }
  std::lock_guard lock(mutex_);
  ++counters_.steps;
  counters_.step_sequences += int64_t(valid.size());
  for (const BatchItem& item : valid) counters_.step_tokens += int64_t(item.tokens.size());
}

void Engine::after_prefill(Slot& s, size_t n) {
  s.prompt_fed += n;
  {
    std::lock_guard lock(mutex_);
    s.info.prompt_done = int64_t(s.prompt_fed);
  }
  const bool done = s.prompt_fed == s.job->prompt.size();
  const int64_t every = options_.checkpoint_every;
  if (done || (every > 0 && s.prompt_fed % size_t(every) == 0)) checkpoint(s);
  if (!done) return;
  if (s.state->position >= s.state->context_limit) return finish(s, FinishReason::Length);
  sample(s);
}

void Engine::checkpoint(const Slot& s) {
  if (!cache_.enabled() || !s.job->request.cache_prompt || !s.state || s.state->tokens.empty()) return;
  if (cache_.holds(s.state->tokens)) return;
  cache_.insert(std::make_shared<const StateSnapshot>(model_->snapshot(*s.state)));
}

void Engine::finish(Slot& s, FinishReason reason, std::string error) {
  std::vector<Event> events;
  if (s.output && reason != FinishReason::Error) s.output->finish(events);
  // The end of a response is where the next turn of the conversation starts.
  if (reason != FinishReason::Error && s.generated > 0) {
    try {
      checkpoint(s);
    } catch (const std::exception&) {  // out of memory for a snapshot: the cache simply lacks it
    }
  }
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
    kv_reserved_ -= s.reserved;
    s.reserved = 0;
    s.pending.reset();
    // The state stays for the next turn of the conversation, unless an error left it unknown.
    if (reason == FinishReason::Error) s.state.reset();
    s.output.reset();
    s.forcer.reset();
    s.info = SlotInfo{s.index, false, -1, 0, 0, 0, s.state ? int64_t(s.state->tokens.size()) : 0};
  }
  work_.notify_all();  // a request waiting for memory may fit now
}

// Samples the next token from the slot's logits, hands out its events, and ends the request or
// leaves the token to be fed at the next step.
void Engine::sample(Slot& s) {
  const Request& r = s.job->request;
  const bool want_logprobs = r.top_logprobs >= 0;
  if (want_logprobs) s.chosen_logits = s.logits;  // before penalties change them
  const bool scripted = s.script_next < s.script.size();
  const int64_t remaining = r.max_tokens > 0 ? r.max_tokens - s.generated : -1;
  if (s.constraint && !scripted && s.constraint->allowed(s.allowed, remaining)) grammar::mask_logits(s.allowed, s.logits);
  if (!scripted) limit_reasoning(s.reasoning_budget, s.output->in_reasoning(), s.output->reasoning_tokens(), s.logits);
  const int32_t candidate = scripted ? s.script[s.script_next] : s.sampler->sample(s.logits, s.state->tokens);
  bool consumed = true;
  const bool forcing = s.forcer->active();
  const int32_t token = forcing ? s.forcer->choose(candidate, s.logits, consumed) : candidate;
  bool constraint_starts = false;
  if (forcing && !s.forcer->active()) {
    // The forced call's header is written: its JSON follows the tool's schema from here.
    auto found = r.tool_call_grammars.find(s.forcer->chosen());
    if (found != r.tool_call_grammars.end()) {
      s.constraint = ResponseConstraint::in_block(grammar_matcher(found->second.first, found->second.second));
      constraint_starts = true;
    }
  }
  if (scripted && consumed) ++s.script_next;  // an inserted token leaves the script where it was
  if (s.constraint && !constraint_starts) s.constraint->accept(token);
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
  s.pending = token;
}

grammar::GrammarMatcher Engine::grammar_matcher(const std::shared_ptr<const grammar::Grammar>& grammar, const std::string& key) {
  if (!grammar_vocabulary_)
    grammar_vocabulary_ = grammar::TokenVocabulary::from_tokenizer(*tokenizer_, int32_t(model_->vocab()), {chat_tokens::kEndMessage});
  auto found = grammar_matchers_.find(key);
  if (found == grammar_matchers_.end()) {
    if (grammar_matchers_.size() >= 8) grammar_matchers_.clear();  // each holds up to ~100 MB of caches
    found = grammar_matchers_.emplace(key, grammar::GrammarMatcher(grammar, grammar_vocabulary_)).first;
  }
  grammar::GrammarMatcher fresh = found->second;
  fresh.reset();
  return fresh;
}

}  // namespace inkling::serve
