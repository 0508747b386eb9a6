// The inference loop behind the server: requests arrive from any thread through a queue, up to
// `parallel` of them run at once, and one thread advances all of them in batched steps: each step
// is one forward call (InklingModel::forward_batch) over a decode token of every generating
// sequence plus prefill chunks of new ones, under a token budget. Nothing waits to fill a batch.
//
// Admission: a request starts when a sequence slot is free and its KV cache fits the memory
// budget (its prompt + max_tokens, capped at the context); otherwise it waits, and one that could
// never fit fails with an error that says so. Reserved memory is never taken back from a running
// sequence, so running out of it cannot corrupt one.
//
// Prompt cache: a slot keeps its sequence state after a request, and snapshots of states (end of
// each prompt, end of each response, every `checkpoint_every` tokens of a long prompt) go to a
// PromptCache bounded by bytes. A new request starts from the longest of these whose tokens are a
// prefix of its prompt, restored exactly (convolution states, global KV, the sliding rings), and
// computes only the rest.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "model/forward.h"
#include "runtime/grammar/matcher.h"
#include "runtime/serve/prompt_cache.h"
#include "runtime/serve/request.h"
#include "runtime/serve/step_pacer.h"
#include "runtime/tokenizer/tokenizer.h"

namespace inkling::serve {

// One request's side of the queue: the engine pushes events, an HTTP thread waits for them.
class RequestHandle {
 public:
  explicit RequestHandle(int64_t id) : id_(id) {}
  // Waits up to `timeout` for events and appends them to `out`. Returns true once the Finish
  // event is among the events handed out (nothing follows it).
  bool wait(std::vector<Event>& out, std::chrono::milliseconds timeout);
  // Asks the engine to stop this request at its next step (the client went away).
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }
  int64_t id() const { return id_; }

  void push(std::vector<Event>& events);  // the engine's side

 private:
  int64_t id_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::vector<Event> events_;
  bool finish_queued_ = false, finish_taken_ = false;
  std::atomic<bool> cancelled_{false};
};

struct EngineOptions {
  int parallel = 1;               // sequences in flight at once
  int64_t batch_tokens = 256;     // tokens per step, all sequences together (<= the model's step budget)
  int64_t prefill_chunk = 256;    // prompt tokens per step of one sequence
  int64_t kv_budget = 0;          // bytes of KV + state for running sequences (0: parallel x a full context)
  int64_t cache_budget = 0;       // bytes of prompt-cache snapshots (0: no snapshots; kept slot states still reused)
  int64_t checkpoint_every = 1024;  // snapshot long prompts every this many tokens (0: only at their end)
  // While sequences decode, prompt chunks are cut so a step's estimated time stays under this
  // (0: never cut), but a prompt always advances at least min_prompt_tokens_per_step a step.
  double max_step_seconds = 0.0;
  int64_t min_prompt_tokens_per_step = 16;
  bool allow_scripts = false;     // honour Request::scripted_output (tests only)
  int test_step_delay_ms = 0;     // tests only: sleep after every step
  std::vector<int32_t> stop_ids;  // ids that end a turn (EOS)
};

struct SlotInfo {
  int index = 0;
  bool busy = false;
  int64_t request_id = -1;
  int64_t prompt_tokens = 0, prompt_done = 0, generated = 0;
  int64_t cached_tokens = 0;  // busy: prompt tokens taken from the kept state; free: tokens the kept state holds
};

struct EngineCounters {
  int64_t requests_finished = 0;
  int64_t prompt_tokens = 0, generated_tokens = 0;
  double prompt_seconds = 0.0, generation_seconds = 0.0;
  double first_token_seconds_sum = 0.0;  // submit -> first generated token, summed
  int64_t first_token_count = 0;
  int64_t cancelled = 0;
  int64_t cache_hits = 0, cached_prompt_tokens = 0;  // requests that reused a kept state or snapshot, tokens reused
  int64_t steps = 0, step_tokens = 0, step_sequences = 0;  // batched steps, tokens and sequences over all of them
  int64_t paced_steps = 0;  // steps whose prompt chunks max_step_seconds cut short
  int64_t kv_reserved = 0, kv_budget = 0;                // bytes reserved by running sequences, the budget
  int64_t waiting_for_memory = 0;                        // queued requests that fit the budget only later
};

class Engine {
 public:
  Engine(InklingModel& model, const Tokenizer& tokenizer, EngineOptions options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request whose prompt is already encoded (and fits the context). Never blocks on
  // inference; the handle receives the request's events.
  std::shared_ptr<RequestHandle> submit(Request request, std::vector<int32_t> prompt);

  // Why a request of this prompt length could never start under the KV budget (empty: it can).
  std::string never_fits(const Request& request, size_t prompt_tokens) const;

  // Cancels every running and queued request (shutdown): each ends at its next step.
  void cancel_all();

  std::vector<SlotInfo> slots() const;
  PromptCacheStats cache_stats() const { return cache_.stats(); }
  size_t queue_depth() const;
  EngineCounters counters() const;
  // False once the loop has died of an error it could not pin on one request.
  bool alive() const { return alive_; }
  int64_t context() const { return model_->options().context; }
  const EngineOptions& options() const { return options_; }

 private:
  struct Job;
  struct Slot;
  void run();
  void admit();
  Slot* slot_for(const Job& job, size_t& reused, std::shared_ptr<const StateSnapshot>& snapshot);
  int64_t kv_need(const Request& request, size_t prompt_tokens) const;
  bool fits_now(const Job& job) const;  // within the budget beside the running requests' reservations
  void start(Slot& slot, std::unique_ptr<Job> job, size_t reused, std::shared_ptr<const StateSnapshot> snapshot);
  void step(const std::vector<Slot*>& active);
  // items[0, decodes) are decode tokens, the rest prompt chunks.
  void forward(std::vector<Slot*>& fed, std::vector<BatchItem>& items, size_t decodes);
  void after_prefill(Slot& slot, size_t n);
  void sample(Slot& slot);
  void checkpoint(const Slot& slot);
  void finish(Slot& slot, FinishReason reason, std::string error = {});
  // A matcher at the start of `request`'s grammar, sharing the mask caches of earlier requests
  // with the same grammar (only the inference thread uses them).
  grammar::GrammarMatcher grammar_matcher(const std::shared_ptr<const grammar::Grammar>& grammar, const std::string& key);

  InklingModel* model_;
  const Tokenizer* tokenizer_;
  EngineOptions options_;

  mutable std::mutex mutex_;
  std::condition_variable work_;
  std::deque<std::unique_ptr<Job>> queue_;
  std::vector<std::unique_ptr<Slot>> slots_;
  PromptCache cache_;
  StepPacer pacer_;  // the inference thread's only
  int64_t kv_reserved_ = 0;  // bytes reserved by the slots running a request
  EngineCounters counters_;
  int64_t next_id_ = 1;
  int64_t admissions_ = 0;
  bool stopping_ = false;
  std::atomic<bool> alive_{true};
  std::thread thread_;
  std::shared_ptr<const grammar::TokenVocabulary> grammar_vocabulary_;  // built at the first grammar
  std::map<std::string, grammar::GrammarMatcher> grammar_matchers_;      // by grammar_key, a few
};

}  // namespace inkling::serve
