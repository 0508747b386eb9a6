// Snapshots of sequence states, found by the longest token prefix of a new prompt (the prompt
// cache). Bounded by bytes; the least recently used snapshot goes first. Only the inference
// loop's thread uses it; stats() may be read from any thread.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>

#include "model/state.h"

namespace inkling::serve {

struct PromptCacheStats {
  int64_t entries = 0, bytes = 0, budget = 0;
  int64_t insertions = 0, evictions = 0, hits = 0, misses = 0;
};

class PromptCache {
 public:
  explicit PromptCache(int64_t budget_bytes) : budget_(budget_bytes) {}

  bool enabled() const { return budget_ > 0; }
  // Keeps `snapshot` unless one of the same tokens is held (that one becomes the most recent);
  // evicts the least recently used past the budget. A snapshot larger than the whole budget is
  // not kept.
  void insert(std::shared_ptr<const StateSnapshot> snapshot);
  // The longest held snapshot whose tokens are a proper prefix of `prompt` (at least one token of
  // the prompt is left to compute), or null. A hit becomes the most recent.
  std::shared_ptr<const StateSnapshot> longest_prefix(std::span<const int32_t> prompt);
  // Whether a snapshot of exactly these tokens is held (no recency change).
  bool holds(std::span<const int32_t> tokens) const;
  PromptCacheStats stats() const;

 private:
  void evict_to(int64_t budget);

  int64_t budget_;
  mutable std::mutex mutex_;
  std::list<std::shared_ptr<const StateSnapshot>> entries_;  // most recently used first
  PromptCacheStats stats_;
};

}  // namespace inkling::serve
