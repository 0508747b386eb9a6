// Recursion that follows the shape of untrusted input (a template's nesting, a JSON document's
// depth) must end in an Error, not a stack overflow. A count of levels cannot promise that: a
// level's frame size depends on the build (sanitizer frames are several times larger), and the
// thread's stack may be far smaller than the main thread's 8 MiB. So the guard measures the stack
// itself: the outermost StackScope on a thread grants at most kStackScopeBytes below its own
// frame, and never more than the thread's real stack leaves above a reserve for the error path.
#pragma once

#include <pthread.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace inkling {

// Sanitizer builds get three times the room, since their frames are about that much larger: the
// same templates then meet the same counted limits (macro depth, recursive loops) in every build.
#if defined(INKLING_SANITIZED)
inline constexpr size_t kStackScopeBytes = size_t{6} << 20;
#else
inline constexpr size_t kStackScopeBytes = size_t{2} << 20;
#endif
inline constexpr size_t kStackReserveBytes = size_t{256} << 10;

namespace stack_detail {

inline uintptr_t current_frame() { return reinterpret_cast<uintptr_t>(__builtin_frame_address(0)); }

// The lowest address this thread's recursion may reach: the stack's end plus a reserve (a quarter
// of the stack when it is small), 0 when the bounds are unknown.
inline uintptr_t thread_floor() {
  thread_local uintptr_t floor = [] {
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) != 0) return uintptr_t{0};
    void* low = nullptr;
    size_t size = 0;
    int rc = pthread_attr_getstack(&attr, &low, &size);
    pthread_attr_destroy(&attr);
    if (rc != 0 || low == nullptr) return uintptr_t{0};
    return reinterpret_cast<uintptr_t>(low) + std::min(kStackReserveBytes, size / 4);
  }();
  return floor;
}

inline uintptr_t& scope_limit() {
  thread_local uintptr_t limit = 0;
  return limit;
}

}  // namespace stack_detail

// Bounds the recursion below it; nested scopes keep the outermost bound.
class StackScope {
 public:
  StackScope() : saved_(stack_detail::scope_limit()) {
    if (saved_ != 0) return;
    uintptr_t here = stack_detail::current_frame();
    uintptr_t granted = here > kStackScopeBytes ? here - kStackScopeBytes : 0;
    stack_detail::scope_limit() = std::max(granted, stack_detail::thread_floor());
  }
  ~StackScope() { stack_detail::scope_limit() = saved_; }
  StackScope(const StackScope&) = delete;
  StackScope& operator=(const StackScope&) = delete;

 private:
  uintptr_t saved_;
};

// True when the caller's frame is past its scope's bound (or, outside any scope, past the
// thread's floor); the caller throws an Error naming what was nested too deeply.
inline bool stack_exhausted() {
  uintptr_t limit = stack_detail::scope_limit();
  if (limit == 0) limit = stack_detail::thread_floor();
  return stack_detail::current_frame() < limit;
}

}  // namespace inkling
