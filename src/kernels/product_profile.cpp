#include "kernels/product_profile.h"

#include <atomic>
#include <chrono>
#include <mutex>

namespace inkling::kernels {
namespace {

std::atomic<bool> profiling{false};
thread_local const char* current_label = nullptr;
thread_local bool timing = false;

struct Totals {
  std::mutex mutex;
  std::vector<const char*> keys;  // first-seen order
  std::vector<ProductTimes> times;
};
Totals& totals() {
  static Totals instance;
  return instance;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void set_product_profiling(bool on) { profiling.store(on, std::memory_order_relaxed); }
bool product_profiling() { return profiling.load(std::memory_order_relaxed); }

ProductLabel::ProductLabel(const char* label) : saved_(current_label) { current_label = label; }
ProductLabel::~ProductLabel() { current_label = saved_; }

std::vector<ProductTimes> product_profile() {
  Totals& t = totals();
  std::lock_guard lock(t.mutex);
  return t.times;
}

void reset_product_profile() {
  Totals& t = totals();
  std::lock_guard lock(t.mutex);
  t.keys.clear();
  t.times.clear();
}

namespace detail {

ProductTimer::ProductTimer(int64_t weight_bytes) {
  if (!profiling.load(std::memory_order_relaxed) || timing) return;
  timing = true;
  bytes_ = weight_bytes;
  start_ns_ = now_ns();
}

ProductTimer::~ProductTimer() {
  if (bytes_ < 0) return;
  const double seconds = double(now_ns() - start_ns_) * 1e-9;
  timing = false;
  const char* key = current_label;
  Totals& t = totals();
  std::lock_guard lock(t.mutex);
  size_t i = 0;
  while (i < t.keys.size() && t.keys[i] != key) ++i;
  if (i == t.keys.size()) {
    t.keys.push_back(key);
    t.times.push_back({key ? key : "other products"});
  }
  ProductTimes& entry = t.times[i];
  ++entry.calls;
  entry.weight_bytes += bytes_;
  entry.seconds += seconds;
}

}  // namespace detail
}  // namespace inkling::kernels
