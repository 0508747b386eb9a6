// The engine's worker threads: one process-wide team for fork/join loops.
//
// Decode runs ~50 short parallel jobs per token on the bench model (batches of products; a 1 MB
// expert matrix streams in ~40 us), so starting and joining a loop must cost next to nothing. Workers spin on a shared
// word between jobs and sleep (futex) only after ~1 ms without work: back-to-back products
// start within a cache-line transfer, and an idle process does not burn its cores. The caller
// works too, and claims whatever parts of a job no worker has picked up, so a core busy with
// another process slows a job down instead of stalling it. INKLING_THREADS sets the default
// team size (else the CPUs this process may run on).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <type_traits>
#include <utility>

namespace inkling::kernels {

// Threads used by parallel_run (the caller included), at most kMaxThreads. 0 picks
// INKLING_THREADS when it is a number in 1..kMaxThreads, else the CPUs this process may run on
// (sched_getaffinity). Not to be called while a job runs.
inline constexpr int kMaxThreads = 512;
void set_thread_count(int threads);
int thread_count();

namespace detail {
using JobFn = void (*)(void* context, int thread, int threads);
void run_job(int threads, JobFn fn, void* context);
}  // namespace detail

// Calls body(part, parts) once for each part in [0, parts), parts = min(max_threads,
// thread_count()), on the caller and the workers, and returns when all have finished. Parts are
// claimed by whichever thread is free, so a worker the OS has not scheduled does not hold the
// caller up; no two bodies running at once share a part index, so it can index per-thread
// scratch. A call made from inside a body, or with max_threads <= 1, runs body(0, 1) inline.
// The first exception thrown by a body is rethrown here after all parts have finished.
template <class Body>
void parallel_run(int max_threads, Body&& body) {
  using Decayed = std::remove_reference_t<Body>;
  detail::run_job(
      max_threads,
      [](void* context, int thread, int threads) {
        (*static_cast<Decayed*>(context))(thread, threads);
      },
      const_cast<void*>(static_cast<const void*>(&body)));
}

// Calls body(item, part) for every item in [0, count), items claimed one at a time from a
// shared counter: threads that finish early take more, so a core slowed by something else
// does not hold up the join. `part` (< max_threads) is unique among bodies running at once.
template <class Body>
void parallel_for(int64_t count, int max_threads, Body&& body) {
  if (count <= 0) return;
  std::atomic<int64_t> next{0};
  const int threads = int(std::min<int64_t>(max_threads, count));
  parallel_run(threads, [&](int part, int) {
    for (int64_t item = next.fetch_add(1, std::memory_order_relaxed); item < count;
         item = next.fetch_add(1, std::memory_order_relaxed))
      body(item, part);
  });
}

// Calls body(item, part) for every item in [0, starts.back()), the items given as contiguous
// shares: share s is [starts[s], starts[s + 1]) (starts[0] == 0, starts non-decreasing). Part s
// takes the items of share s in ascending order, so a thread whose items are consecutive pieces
// of memory reads one ascending stream: parallel_for hands items out in global order, and each
// thread's stream then jumps at every item, which costs cold-stream time on every jump. A part
// done with its share takes items one at a time from the back of the share with the most left:
// a core slowed by something else hands over the end of its share, and its own stream goes on.
// Shares beyond the parts that run are taken over that way too; run inline (one thread, or from
// inside a job), it visits every item in ascending order. `part` is unique among bodies running
// at once, as in parallel_for. Items are counted in 32 bits (fewer than 2^32).
template <class Body>
void parallel_for_shares(std::span<const int64_t> starts, Body&& body) {
  const int shares = int(starts.size()) - 1;
  if (shares <= 0 || starts.back() <= 0) return;
  // One word per share, on its own cache line: the next item in the high half, the end in the
  // low half, so the owner's claim from the front and a thief's from the back race on one CAS.
  struct alignas(64) Share {
    std::atomic<uint64_t> range;
  };
  const std::unique_ptr<Share[]> range(new Share[size_t(shares)]);
  for (int s = 0; s < shares; ++s)
    range[size_t(s)].range.store(uint64_t(starts[size_t(s)]) << 32 | uint64_t(starts[size_t(s) + 1]),
                                 std::memory_order_relaxed);
  parallel_run(shares, [&](int part, int parts) {
    if (parts == 1) {  // inline (one thread, or called from inside a job): every item in order
      for (int64_t item = 0; item < starts.back(); ++item) body(item, 0);
      return;
    }
    std::atomic<uint64_t>& own = range[size_t(part)].range;
    for (uint64_t word = own.load(std::memory_order_relaxed); uint32_t(word >> 32) < uint32_t(word);) {
      if (own.compare_exchange_weak(word, word + (uint64_t(1) << 32), std::memory_order_relaxed))
        body(int64_t(word >> 32), part);
    }
    for (;;) {
      int victim = -1;
      uint64_t word = 0;
      uint32_t most = 0;
      for (int s = 0; s < shares; ++s) {
        const uint64_t w = range[size_t(s)].range.load(std::memory_order_relaxed);
        const uint32_t left = uint32_t(w) > uint32_t(w >> 32) ? uint32_t(w) - uint32_t(w >> 32) : 0;
        if (left > most) most = left, victim = s, word = w;
      }
      if (victim < 0) return;
      if (range[size_t(victim)].range.compare_exchange_strong(word, word - 1, std::memory_order_relaxed))
        body(int64_t(uint32_t(word) - 1), part);
    }
  });
}

}  // namespace inkling::kernels
