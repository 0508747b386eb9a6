// The worker team: every part of a job runs exactly once, nesting runs inline, errors come back
// to the caller, and many tiny jobs, concurrent callers and more threads than cores all finish.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kernels/thread_pool.h"
#include "tensor/error.h"

namespace inkling::test {
namespace {

// Restores the default team size after a test changed it.
class ThreadCountGuard {
 public:
  ~ThreadCountGuard() { kernels::set_thread_count(0); }
};

TEST(ThreadPool, EveryPartRunsExactlyOnce) {
  ThreadCountGuard guard;
  for (int threads : {1, 2, 3, 8}) {
    kernels::set_thread_count(threads);
    ASSERT_EQ(kernels::thread_count(), threads);
    for (int requested : {1, 2, 5, 16}) {
      std::vector<std::atomic<int>> runs(16);
      std::atomic<int> reported_parts{-1};
      kernels::parallel_run(requested, [&](int part, int parts) {
        runs[size_t(part)].fetch_add(1);
        reported_parts.store(parts);
      });
      const int expected = std::min(requested, threads);
      EXPECT_EQ(reported_parts.load(), expected) << threads << " threads, " << requested << " requested";
      for (int part = 0; part < 16; ++part)
        EXPECT_EQ(runs[size_t(part)].load(), part < expected ? 1 : 0) << "part " << part;
    }
  }
}

TEST(ThreadPool, ParallelForCoversEveryItemOnce) {
  ThreadCountGuard guard;
  kernels::set_thread_count(3);
  const int64_t count = 10007;
  std::vector<std::atomic<int>> hits(static_cast<size_t>(count));
  std::atomic<bool> bad_part{false};
  kernels::parallel_for(count, 3, [&](int64_t item, int part) {
    hits[size_t(item)].fetch_add(1);
    if (part < 0 || part >= 3) bad_part = true;
  });
  for (int64_t i = 0; i < count; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << "item " << i;
  EXPECT_FALSE(bad_part.load());
  kernels::parallel_for(0, 3, [&](int64_t, int) { FAIL() << "no items to visit"; });
}

TEST(ThreadPool, SharesCoverEveryItemOnceAndRunInOrder) {
  ThreadCountGuard guard;
  for (int threads : {1, 2, 3}) {
    kernels::set_thread_count(threads);
    // Uneven shares, an empty one, and more shares than threads (those are all taken over).
    const std::vector<int64_t> starts = {0, 700, 700, 1500, 1503, 4000};
    const int shares = int(starts.size()) - 1;
    std::vector<std::atomic<int>> hits(size_t(starts.back()));
    std::vector<std::vector<int64_t>> seen(static_cast<size_t>(shares));  // items each part took, in order
    kernels::parallel_for_shares(starts, [&](int64_t item, int part) {
      hits[size_t(item)].fetch_add(1);
      seen[size_t(part)].push_back(item);  // parts running at once are distinct
    });
    for (int64_t i = 0; i < starts.back(); ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << "item " << i;
    // Each part took what it got of its own share first, from the front and in ascending order
    // (another part may have taken the back, or all of it if this one started late), and
    // nothing of its own share after that.
    for (int part = 0; part < std::min(threads, shares); ++part) {
      const std::vector<int64_t>& items = seen[size_t(part)];
      const int64_t begin = starts[size_t(part)], end = starts[size_t(part) + 1];
      size_t k = 0;
      for (int64_t expected = begin; k < items.size() && items[k] == expected; ++k, ++expected) {
      }
      for (size_t j = k; j < items.size(); ++j)
        EXPECT_TRUE(items[j] < begin || items[j] >= end)
            << threads << " threads: part " << part << " took item " << items[j] << " of its share out of order";
    }
  }
  // One thread, or a call from inside a job: every item in ascending order.
  kernels::set_thread_count(1);
  std::vector<int64_t> order;
  kernels::parallel_for_shares(std::vector<int64_t>{0, 3, 5, 9}, [&](int64_t item, int) { order.push_back(item); });
  EXPECT_EQ(order, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
  kernels::parallel_for_shares(std::vector<int64_t>{0}, [&](int64_t, int) { FAIL() << "no shares"; });
  kernels::parallel_for_shares(std::vector<int64_t>{0, 0, 0}, [&](int64_t, int) { FAIL() << "no items"; });
}

TEST(ThreadPool, NestedCallsRunInline) {
  ThreadCountGuard guard;
  kernels::set_thread_count(2);
  std::atomic<int> inner_parts{0}, inner_runs{0};
  kernels::parallel_run(2, [&](int, int) {
    kernels::parallel_run(4, [&](int part, int parts) {
      inner_runs.fetch_add(1);
      if (parts != 1 || part != 0) inner_parts.store(parts);
    });
  });
  EXPECT_EQ(inner_runs.load(), 2);
  EXPECT_EQ(inner_parts.load(), 0);
}

TEST(ThreadPool, ErrorsReachTheCallerAndThePoolKeepsWorking) {
  ThreadCountGuard guard;
  kernels::set_thread_count(2);
  std::atomic<int> finished{0};
  try {
    kernels::parallel_run(2, [&](int part, int) {
      if (part == 1) throw Error("part one failed");
      finished.fetch_add(1);
    });
    FAIL() << "expected the body's error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "part one failed");
  }
  EXPECT_EQ(finished.load(), 1);
  std::atomic<int> runs{0};
  kernels::parallel_run(2, [&](int, int) { runs.fetch_add(1); });
  EXPECT_EQ(runs.load(), 2);
}

TEST(ThreadPool, ManyTinyJobs) {
  ThreadCountGuard guard;
  kernels::set_thread_count(2);
  std::atomic<int64_t> total{0};
  for (int job = 0; job < 100000; ++job)
    kernels::parallel_run(2, [&](int part, int) { total.fetch_add(part + 1, std::memory_order_relaxed); });
  EXPECT_EQ(total.load(), int64_t(100000) * 3);
}

TEST(ThreadPool, MoreThreadsThanCores) {
  ThreadCountGuard guard;
  const int threads = int(std::thread::hardware_concurrency()) * 4 + 1;
  kernels::set_thread_count(threads);
  std::atomic<int64_t> total{0};
  for (int job = 0; job < 2000; ++job)
    kernels::parallel_for(64, threads, [&](int64_t item, int) { total.fetch_add(item, std::memory_order_relaxed); });
  EXPECT_EQ(total.load(), int64_t(2000) * (63 * 64 / 2));
}

TEST(ThreadPool, ConcurrentCallersTakeTurns) {
  ThreadCountGuard guard;
  kernels::set_thread_count(2);
  std::atomic<int64_t> total{0};
  auto caller = [&] {
    for (int job = 0; job < 5000; ++job)
      kernels::parallel_for(8, 2, [&](int64_t item, int) { total.fetch_add(item, std::memory_order_relaxed); });
  };
  std::thread a(caller), b(caller);
  a.join();
  b.join();
  EXPECT_EQ(total.load(), int64_t(2) * 5000 * 28);
}

TEST(ThreadPool, RejectsBadThreadCounts) {
  ThreadCountGuard guard;
  EXPECT_THROW(kernels::set_thread_count(-1), Error);
  EXPECT_THROW(kernels::set_thread_count(100000), Error);
}

}  // namespace
}  // namespace inkling::test
