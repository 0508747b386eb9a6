#include "kernels/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tensor/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define INKLING_CPU_RELAX() _mm_pause()
#else
#define INKLING_CPU_RELAX() std::this_thread::yield()
#endif

namespace inkling::kernels {
namespace {

// How long an idle worker keeps spinning before it sleeps. Long enough to bridge the serial
// gaps of a decode step (norms, routing, sampling), short enough that an idle server sleeps.
constexpr auto kSpinBeforeSleep = std::chrono::microseconds(1000);

thread_local bool inside_job = false;


int default_thread_count() {
  if (const char* env = std::getenv("INKLING_THREADS")) {
    char* end = nullptr;
    const long value = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && value > 0 && value <= kMaxThreads) return int(value);
  }
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::clamp(CPU_COUNT(&set), 1, kMaxThreads);
  return std::clamp(int(std::thread::hardware_concurrency()), 1, kMaxThreads);
}

// A job is `parts` calls body(part, parts). Parts are claimed, not assigned: the caller and
// every worker that turns up take the next unclaimed one from a shared word, so a worker the
// OS has not scheduled yet delays nothing; the caller does its share and returns as soon as
// every part has finished. A worker that wakes after that finds the job over and touches
// nothing of it (the body lives on the caller's stack).
class ThreadPool {
  static_assert(kMaxThreads < (1 << 16), "parts are counted in 16 bits of the claim word");

 public:
  explicit ThreadPool(int threads) : threads_(threads) {
    workers_.reserve(size_t(threads - 1));
    for (int index = 1; index < threads; ++index) workers_.emplace_back([this] { work(); });
  }

  ~ThreadPool() {
    stop_.store(true);
    publish(uint64_t(sequence_ + 1) << 32);
    for (std::thread& worker : workers_) worker.join();
  }

  int size() const { return threads_; }

  void run(int parts, detail::JobFn fn, void* context) {
    // Jobs from two caller threads take turns.
    std::lock_guard<std::mutex> lock(run_mutex_);
    fn_ = fn;
    context_ = context;
    error_ = nullptr;
    finished_.store(0, std::memory_order_relaxed);
    ++sequence_;
    publish(uint64_t(sequence_) << 32 | uint64_t(parts) << 16);
    while (claim_and_execute(sequence_)) {
    }
    for (int spins = 0; finished_.load(std::memory_order_acquire) != parts; ++spins) {
      if (spins < 1 << 14) INKLING_CPU_RELAX();
      else std::this_thread::yield();  // a worker holding a part was descheduled
    }
    if (error_) std::rethrow_exception(error_);
  }

 private:
  // The claim word: sequence (32 bits) | parts (16) | next unclaimed part (16).
  void publish(uint64_t word) {
    claim_.store(word);  // seq_cst: ordered before the sleepers_ read
    wake_.store(uint32_t(word >> 32));
    if (sleepers_.load() > 0) wake_.notify_all();
  }

  // Claims one part of job `sequence` and runs it; false when the job has none left.
  bool claim_and_execute(uint32_t sequence) {
    uint64_t word = claim_.load(std::memory_order_acquire);
    for (;;) {
      const uint32_t parts = uint32_t(word >> 16) & 0xffff, next = uint32_t(word) & 0xffff;
      if (uint32_t(word >> 32) != sequence || next >= parts) return false;
      if (claim_.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel)) {
        // Holding an unfinished part keeps the caller inside run(): fn_ and context_ are stable.
        inside_job = true;
        try {
          fn_(context_, int(next), int(parts));
        } catch (...) {
          std::lock_guard<std::mutex> lock(error_mutex_);
          if (!error_) error_ = std::current_exception();
        }
        inside_job = false;
        finished_.fetch_add(1, std::memory_order_acq_rel);
        return true;
      }
    }
  }

  void work() {
    uint32_t seen = 0;
    for (;;) {
      uint32_t now = wake_.load(std::memory_order_acquire);
      if (now == seen) {
        auto spin_start = std::chrono::steady_clock::now();
        for (int spins = 1; (now = wake_.load(std::memory_order_acquire)) == seen; ++spins) {
          INKLING_CPU_RELAX();
          if (spins % 256 == 0 && std::chrono::steady_clock::now() - spin_start > kSpinBeforeSleep) {
            sleepers_.fetch_add(1);  // seq_cst: ordered before the wait's read of wake_
            wake_.wait(seen);
            sleepers_.fetch_sub(1);
            spin_start = std::chrono::steady_clock::now();
          }
        }
      }
      seen = now;
      if (stop_.load()) return;
      while (claim_and_execute(now)) {
      }
    }
  }

  const int threads_;
  std::vector<std::thread> workers_;
  std::mutex run_mutex_, error_mutex_;
  detail::JobFn fn_ = nullptr;
  void* context_ = nullptr;
  uint32_t sequence_ = 0;
  std::exception_ptr error_;
  std::atomic<bool> stop_{false};
  alignas(64) std::atomic<uint64_t> claim_{0};
  alignas(64) std::atomic<uint32_t> wake_{0};  // the sequence alone, futex-sized for wait()
  alignas(64) std::atomic<int> finished_{0};
  alignas(64) std::atomic<int> sleepers_{0};
};

std::mutex pool_mutex;
std::unique_ptr<ThreadPool> pool;
int requested_threads = 0;

ThreadPool& current_pool() {
  std::lock_guard<std::mutex> lock(pool_mutex);
  if (!pool) pool = std::make_unique<ThreadPool>(requested_threads > 0 ? requested_threads : default_thread_count());
  return *pool;
}

}  // namespace

void set_thread_count(int threads) {
  if (threads < 0 || threads > kMaxThreads)
    throw Error("thread count must be 0.." + std::to_string(kMaxThreads) + ", got " + std::to_string(threads));
  std::lock_guard<std::mutex> lock(pool_mutex);
  requested_threads = threads;
  const int wanted = threads > 0 ? threads : default_thread_count();
  if (pool && pool->size() != wanted) pool.reset();
}

int thread_count() { return current_pool().size(); }

namespace detail {

void run_job(int threads, JobFn fn, void* context) {
  if (threads <= 1 || inside_job) return fn(context, 0, 1);
  ThreadPool& team = current_pool();
  threads = std::min(threads, team.size());
  if (threads <= 1) return fn(context, 0, 1);
  team.run(threads, fn, context);
}

}  // namespace detail
}  // namespace inkling::kernels
