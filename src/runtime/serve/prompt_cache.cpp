#include "runtime/serve/prompt_cache.h"

#include <algorithm>

namespace inkling::serve {

namespace {

bool same_tokens(const StateSnapshot& s, std::span<const int32_t> tokens) {
  return s.tokens.size() == tokens.size() && std::equal(tokens.begin(), tokens.end(), s.tokens.begin());
}

}  // namespace

void PromptCache::insert(std::shared_ptr<const StateSnapshot> snapshot) {
  if (!snapshot || !enabled()) return;
  std::lock_guard lock(mutex_);
  for (auto it = entries_.begin(); it != entries_.end(); ++it)
    if (same_tokens(**it, snapshot->tokens)) {
      entries_.splice(entries_.begin(), entries_, it);
      return;
    }
  const int64_t bytes = snapshot->bytes();
  if (bytes > budget_) return;
  evict_to(budget_ - bytes);
  entries_.push_front(std::move(snapshot));
  stats_.bytes += bytes;
  ++stats_.entries;
  ++stats_.insertions;
}

void PromptCache::evict_to(int64_t budget) {
  while (!entries_.empty() && stats_.bytes > budget) {
    stats_.bytes -= entries_.back()->bytes();
    --stats_.entries;
    ++stats_.evictions;
    entries_.pop_back();
  }
}

std::shared_ptr<const StateSnapshot> PromptCache::longest_prefix(std::span<const int32_t> prompt) {
  std::lock_guard lock(mutex_);
  auto best = entries_.end();
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    const std::vector<int32_t>& held = (*it)->tokens;
    if (held.empty() || held.size() >= prompt.size()) continue;
    if (best != entries_.end() && held.size() <= (*best)->tokens.size()) continue;
    if (std::equal(held.begin(), held.end(), prompt.begin())) best = it;
  }
  if (best == entries_.end()) {
    ++stats_.misses;
    return nullptr;
  }
  ++stats_.hits;
  entries_.splice(entries_.begin(), entries_, best);
  return entries_.front();
}

bool PromptCache::holds(std::span<const int32_t> tokens) const {
  std::lock_guard lock(mutex_);
  for (const auto& entry : entries_)
    if (same_tokens(*entry, tokens)) return true;
  return false;
}

PromptCacheStats PromptCache::stats() const {
  std::lock_guard lock(mutex_);
  PromptCacheStats out = stats_;
  out.budget = budget_;
  return out;
}

}  // namespace inkling::serve
