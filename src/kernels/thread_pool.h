// The engine's worker threads: one process-wide team for fork/join loops.
//
// Decode runs a few hundred short parallel products per token (a 1 MB expert matrix streams in
// ~40 us), so starting and joining a loop must cost next to nothing. Workers spin on a shared
// word between jobs and sleep (futex) only after ~1 ms without work: back-to-back products
// start within a cache-line transfer, and an idle process does not burn its cores. The caller
// works too, and claims whatever parts of a job no worker has picked up, so a core busy with
// another process slows a job down instead of stalling it. INKLING_THREADS sets the default
// team size (else the CPUs this process may run on).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
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

}  // namespace inkling::kernels
