// The inference loop behind the server: requests arrive from any thread through a queue, up to
// `parallel` of them run at once in slots, and one thread steps every running slot in turn (a
// prefill chunk or one decode token each), so no request waits for another to finish. Each step
// is a whole unit of work per sequence; a batched step over several sequences replaces the
// per-slot loop in run() without changing the interface (submit, handles, events).
//
// Prompt reuse: a slot keeps its sequence state (KV, sliding rings, convolution states) after a
// request ends. A new request whose prompt begins with every token that state consumed (the
// previous turn of the same conversation: its prompt and the answer as generated) goes to that
// slot and computes only the rest. Nothing is rewound, so the state is exactly the one a run of
// those tokens leaves; a prompt that diverges earlier starts from scratch.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "model/forward.h"
#include "runtime/serve/request.h"
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
  int64_t prefill_chunk = 256;    // prompt tokens per step of one sequence
  bool allow_scripts = false;     // honour Request::scripted_output (tests only)
  int test_step_delay_ms = 0;     // tests only: sleep after every step of a slot
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
  int64_t cache_hits = 0, cached_prompt_tokens = 0;  // requests that reused a kept state, tokens reused
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

  // Cancels every running and queued request (shutdown): each ends at its next step.
  void cancel_all();

  std::vector<SlotInfo> slots() const;
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
  Slot* slot_for(const Job& job, size_t& reused);
  void step(Slot& slot);
  void sample_and_feed(Slot& slot);
  void finish(Slot& slot, FinishReason reason, std::string error = {});

  InklingModel* model_;
  const Tokenizer* tokenizer_;
  EngineOptions options_;

  mutable std::mutex mutex_;
  std::condition_variable work_;
  std::deque<std::unique_ptr<Job>> queue_;
  std::vector<std::unique_ptr<Slot>> slots_;
  EngineCounters counters_;
  int64_t next_id_ = 1;
  bool stopping_ = false;
  std::atomic<bool> alive_{true};
  std::thread thread_;
};

}  // namespace inkling::serve
