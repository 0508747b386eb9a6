#include "runtime/grammar/matcher.h"

#include <algorithm>
#include <array>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "tensor/error.h"

namespace inkling::grammar {

namespace {

constexpr uint32_t kComplete = 0;  // the empty stack: the root rule has finished
constexpr uint32_t kBottom = 1;    // stands for the frames cut off a truncated stack
constexpr uint32_t kNone = 0xFFFFFFFFu;
// Frames kept in a cache key. Deep enough that the common loops (a string's characters, a
// number's digits) finish inside the key, shallow enough that the key does not depend on where
// in the document they are.
constexpr int kKeyFrames = 3;
constexpr size_t kMaxStackNodes = size_t(1) << 23;
constexpr size_t kMaxStacksPerState = 1u << 14;
// Cache budgets in bytes: a dense mask of the 200k vocabulary is 25 KB, a sparse one 4 bytes a
// token. Past a budget the cache starts over.
constexpr size_t kWalkCacheBytes = size_t(48) << 20;
constexpr size_t kStateCacheBytes = size_t(16) << 20;
constexpr size_t kWalkStateBytes = size_t(32) << 20;  // the transition tables of trie walks

struct StackNode {
  uint32_t pos;     // element index in the grammar
  uint32_t parent;  // node id
};

}  // namespace

class MatchEngine {
 public:
  MatchEngine(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocabulary> vocabulary)
      : grammar_(std::move(grammar)), vocabulary_(std::move(vocabulary)) {
    nodes_.push_back({kNone, kNone});  // kComplete
    nodes_.push_back({kNone, kNone});  // kBottom
    per_node_.resize(2);
    top_set_.assign(2, 0);
  }

  std::vector<uint32_t> initial_state() {
    std::vector<uint32_t> out;
    std::vector<std::pair<uint32_t, uint32_t>> starts;
    for (uint32_t alt : grammar_->rule_alternatives[grammar_->root]) starts.push_back({alt, kComplete});
    closure(starts, out);
    std::sort(out.begin(), out.end());
    return out;
  }

  // The state after one byte (sorted; empty when the byte is not allowed).
  void advance(const std::vector<uint32_t>& state, uint8_t b, std::vector<uint32_t>& out) {
    out.clear();
    next_stamp();
    for (uint32_t s : state) {
      if (s < 2 || !byte_set(s).contains(b)) continue;
      for (uint32_t t : successors(s)) {
        if (stamp_[t] == stamp_now_) continue;
        stamp_[t] = stamp_now_;
        out.push_back(t);
      }
    }
    if (out.size() > kMaxStacksPerState) throw Error("grammar: too ambiguous (more than 16384 parses at once)");
    std::sort(out.begin(), out.end());
  }

  void allowed_tokens(const std::vector<uint32_t>& state, TokenMask& mask) {
    const TokenVocabulary& vocab = *vocabulary_;
    auto cached = state_cache_.find(state);
    if (cached != state_cache_.end()) {
      mask = cached->second;
      ++stats_.state_hits;
      return;
    }
    mask = TokenMask(vocab.mask_size());
    for (uint32_t s : state) {
      if (s == kComplete) {
        for (int32_t id : vocab.end_tokens()) mask.allow(id);
        continue;
      }
      auto [key, lower] = truncation(s);
      const Walk& walk = cached_walk(key);
      auto& words = mask.words();
      if (walk.dense) {
        const auto& from = walk.accepted.words();
        for (size_t w = 0; w < words.size(); ++w) words[w] |= from[w];
      } else {
        for (int32_t id : walk.sparse) mask.allow(id);
      }
      if (lower == kNone || walk.bottom_nodes.empty()) continue;
      // Tokens that finish the key's frames mid-token go on in the real stack below them.
      const std::vector<uint32_t>& below = closure_at(lower);
      for (uint32_t node : walk.bottom_nodes) {
        ++stats_.resolutions;
        trie_walk(below, node + 1, vocab.subtree_end(node), vocab.node_depth(node), mask, nullptr);
      }
    }
    state_cache_bytes_ += mask.words().size() * 8 + state.size() * 4 + 64;
    if (state_cache_bytes_ > kStateCacheBytes) {
      state_cache_.clear();
      state_cache_bytes_ = 0;
    }
    state_cache_.emplace(state, mask);
  }

  MatcherStats stats() const {
    MatcherStats out = stats_;
    out.stack_nodes = nodes_.size();
    out.cached_walks = walks_.size();
    return out;
  }

  const TokenVocabulary* vocabulary() const { return vocabulary_.get(); }

  // The shortest completion over the stacks of `state`.
  std::string shortest_completion(const std::vector<uint32_t>& state) {
    if (state.empty()) return {};
    if (state.front() == kComplete) return {};
    shortest_lengths();
    std::string best;
    bool have = false;
    for (uint32_t s : state) {
      if (s < 2) continue;
      std::string text = completion_of(s);
      if (!have || text.size() < best.size()) best = std::move(text), have = true;
    }
    return best;
  }

 private:
  // Per rule, the length of its shortest derivation and the alternative that gives it.
  void shortest_lengths() {
    if (!min_length_.empty()) return;
    const Grammar& g = *grammar_;
    constexpr uint64_t kInfinite = ~uint64_t(0) >> 2;
    min_length_.assign(g.rule_count(), kInfinite);
    best_alternative_.assign(g.rule_count(), kNone);
    for (bool changed = true; changed;) {
      changed = false;
      for (uint32_t r = 0; r < g.rule_count(); ++r) {
        for (uint32_t alt : g.rule_alternatives[r]) {
          uint64_t length = 0;
          for (uint32_t p = alt; g.elements[p].kind != ElementKind::kEnd && length < kInfinite; ++p)
            length += g.elements[p].kind == ElementKind::kBytes ? 1 : min_length_[g.elements[p].value];
          if (length < min_length_[r]) {
            min_length_[r] = length;
            best_alternative_[r] = alt;
            changed = true;
          }
        }
      }
    }
  }

  // The rest of stack `node` (its alternative from its position, then each caller's), each rule
  // by its shortest alternative; the smallest byte of each byte set.
  std::string completion_of(uint32_t node) {
    const Grammar& g = *grammar_;
    std::string out;
    std::vector<uint32_t> positions;  // a stack of element positions still to expand
    for (uint32_t at = node; at >= 2; at = nodes_[at].parent) positions.push_back(nodes_[at].pos);
    std::reverse(positions.begin(), positions.end());
    while (!positions.empty()) {
      uint32_t p = positions.back();
      positions.pop_back();
      const Element& e = g.elements[p];
      if (e.kind == ElementKind::kEnd) continue;
      positions.push_back(p + 1);
      if (e.kind == ElementKind::kBytes) {
        const ByteSet& set = g.byte_sets[e.value];
        for (unsigned b = 0; b < 256; ++b) {
          if (set.contains(uint8_t(b))) {
            out += char(b);
            break;
          }
        }
      } else {
        positions.push_back(best_alternative_[e.value]);
      }
    }
    return out;
  }

  struct PerNode {
    uint32_t succ_begin = kNone, succ_end = 0;          // successors after the top byte set
    uint32_t closure_begin = kNone, closure_end = 0;    // closure of the node as a return position
    uint32_t key = kNone, lower = kNone;                // truncation
  };
  struct Walk {
    bool dense = true;
    TokenMask accepted;         // when dense
    std::vector<int32_t> sparse;  // otherwise
    std::vector<uint32_t> bottom_nodes;  // trie nodes where a path reached kBottom with bytes to go
  };

  const ByteSet& byte_set(uint32_t node) const { return grammar_->byte_sets[top_set_[node]]; }

  void next_stamp() {
    if (stamp_.size() < nodes_.size()) stamp_.resize(nodes_.size() + nodes_.size() / 2 + 16, 0);
    if (++stamp_now_ == 0) {
      std::fill(stamp_.begin(), stamp_.end(), 0);
      stamp_now_ = 1;
    }
  }

  uint32_t intern(uint32_t pos, uint32_t parent) {
    uint64_t key = (uint64_t(pos) << 32) | parent;
    auto [it, inserted] = index_.try_emplace(key, uint32_t(nodes_.size()));
    if (inserted) {
      if (nodes_.size() >= kMaxStackNodes) throw Error("grammar: parser state grew past its limit");
      nodes_.push_back({pos, parent});
      per_node_.emplace_back();
      const Element& e = grammar_->elements[pos];
      top_set_.push_back(e.kind == ElementKind::kBytes ? e.value : 0);
    }
    return it->second;
  }

  // Expands (position, parent) pairs until every stack's top is a byte set, or the stack is
  // empty (kComplete) or cut (kBottom); appends those stacks to `out`, without duplicates.
  void closure(std::vector<std::pair<uint32_t, uint32_t>> work, std::vector<uint32_t>& out) {
    const auto& elements = grammar_->elements;
    std::unordered_set<uint64_t> visited;
    std::unordered_set<uint32_t> emitted(out.begin(), out.end());
    while (!work.empty()) {
      auto [pos, parent] = work.back();
      work.pop_back();
      if (!visited.insert((uint64_t(pos) << 32) | parent).second) continue;
      const Element& e = elements[pos];
      if (e.kind == ElementKind::kEnd) {
        if (parent == kComplete || parent == kBottom) {
          if (emitted.insert(parent).second) out.push_back(parent);
        } else {
          work.push_back({nodes_[parent].pos, nodes_[parent].parent});
        }
      } else if (e.kind == ElementKind::kBytes) {
        uint32_t node = intern(pos, parent);
        if (emitted.insert(node).second) out.push_back(node);
      } else {
        // A call in tail position returns straight to the caller's caller: loops written as
        // right recursion keep the stack flat.
        uint32_t ret = elements[pos + 1].kind == ElementKind::kEnd ? parent : intern(pos + 1, parent);
        for (uint32_t alt : grammar_->rule_alternatives[e.value]) work.push_back({alt, ret});
      }
      if (out.size() > kMaxStacksPerState) throw Error("grammar: too ambiguous (more than 16384 parses at once)");
    }
  }

  struct Span {
    const uint32_t* b;
    const uint32_t* e;
    const uint32_t* begin() const { return b; }
    const uint32_t* end() const { return e; }
  };

  Span successors(uint32_t node) {
    if (per_node_[node].succ_begin == kNone) {
      std::vector<uint32_t> out;
      closure({{nodes_[node].pos + 1, nodes_[node].parent}}, out);
      per_node_[node].succ_begin = uint32_t(pool_.size());
      pool_.insert(pool_.end(), out.begin(), out.end());
      per_node_[node].succ_end = uint32_t(pool_.size());
      if (stamp_.size() < nodes_.size()) stamp_.resize(nodes_.size() + nodes_.size() / 2 + 16, 0);
    }
    const PerNode& p = per_node_[node];
    return {pool_.data() + p.succ_begin, pool_.data() + p.succ_end};
  }

  const std::vector<uint32_t>& closure_at(uint32_t node) {
    auto it = closure_memo_.find(node);
    if (it != closure_memo_.end()) return it->second;
    std::vector<uint32_t> out;
    closure({{nodes_[node].pos, nodes_[node].parent}}, out);
    std::sort(out.begin(), out.end());
    return closure_memo_.emplace(node, std::move(out)).first->second;
  }

  // The node cut to its top kKeyFrames frames over kBottom, and the real frame below the cut
  // (kNone when the stack is no deeper than that).
  std::pair<uint32_t, uint32_t> truncation(uint32_t node) {
    if (per_node_[node].key != kNone) return {per_node_[node].key, per_node_[node].lower};
    uint32_t frames[kKeyFrames];
    uint32_t at = node;
    int depth = 0;
    while (depth < kKeyFrames && at != kComplete && at != kBottom) {
      frames[depth++] = at;
      at = nodes_[at].parent;
    }
    uint32_t key = node, lower = kNone;
    if (at != kComplete && at != kBottom) {
      lower = at;
      key = kBottom;
      for (int i = depth - 1; i >= 0; --i) key = intern(nodes_[frames[i]].pos, key);
    }
    per_node_[node].key = key;
    per_node_[node].lower = lower;
    return {key, lower};
  }

  const Walk& cached_walk(uint32_t key) {
    auto it = walks_.find(key);
    if (it != walks_.end()) return it->second;
    if (walk_cache_bytes_ > kWalkCacheBytes) {
      walks_.clear();
      walk_cache_bytes_ = 0;
    }
    ++stats_.walks;
    Walk walk;
    walk.accepted = TokenMask(vocabulary_->mask_size());
    std::vector<uint32_t> start{key};
    trie_walk(start, 1, uint32_t(vocabulary_->node_count()), 0, walk.accepted, &walk.bottom_nodes);
    if (walk.accepted.count() * 32 < size_t(vocabulary_->mask_size())) {
      walk.sparse = walk.accepted.ids();
      walk.accepted = TokenMask();
      walk.dense = false;
    }
    walk_cache_bytes_ += walk.accepted.words().size() * 8 + walk.sparse.size() * 4 + walk.bottom_nodes.size() * 4 + 64;
    return walks_.emplace(key, std::move(walk)).first->second;
  }

  // Sets of live stacks met in trie walks, interned, with their transitions by byte filled in
  // as they are first needed: the walk then costs one table lookup per trie node, however many
  // stacks a state has (a JSON string's state has one per UTF-8 length and one for escapes).
  struct WalkState {
    std::vector<uint32_t> stacks;  // sorted, without kComplete / kBottom
    bool complete = false, bottom = false;
  };
  static constexpr uint32_t kDeadState = 0;
  static constexpr uint32_t kUnknown = 0xFFFFFFFFu;

  uint32_t intern_walk_state(WalkState state) {
    std::vector<uint32_t> key = state.stacks;
    key.push_back(uint32_t(state.complete) | (uint32_t(state.bottom) << 1));
    auto [it, inserted] = walk_state_ids_.try_emplace(std::move(key), uint32_t(walk_states_.size()));
    if (inserted) {
      walk_states_.push_back(std::move(state));
      transitions_.emplace_back();
      transitions_.back().fill(kUnknown);
    }
    return it->second;
  }

  uint32_t transition(uint32_t from, uint8_t b) {
    uint32_t& cached = transitions_[from][b];
    if (cached != kUnknown) return cached;
    WalkState next;
    next_stamp();
    for (uint32_t s : walk_states_[from].stacks) {
      if (!byte_set(s).contains(b)) continue;
      for (uint32_t t : successors(s)) {
        if (t == kBottom) {
          next.bottom = true;
        } else if (t == kComplete) {
          next.complete = true;
        } else if (stamp_[t] != stamp_now_) {
          stamp_[t] = stamp_now_;
          next.stacks.push_back(t);
        }
      }
    }
    std::sort(next.stacks.begin(), next.stacks.end());
    const bool dead = next.stacks.empty() && !next.bottom && !next.complete;
    const uint32_t id = dead ? kDeadState : intern_walk_state(std::move(next));
    transitions_[from][b] = id;  // `cached` may dangle: interning grows transitions_
    return id;
  }

  // Marks every token in trie nodes [begin, end) (a run of whole subtrees below a node of depth
  // `base_depth`) that `start` can consume entirely.
  void trie_walk(const std::vector<uint32_t>& start, uint32_t begin, uint32_t end, uint32_t base_depth,
                 TokenMask& accepted, std::vector<uint32_t>* bottom_nodes) {
    const TokenVocabulary& vocab = *vocabulary_;
    if (walk_states_.empty() || transitions_.size() * sizeof(transitions_[0]) > kWalkStateBytes) {
      walk_states_.assign(1, WalkState{});  // kDeadState
      transitions_.assign(1, {});
      transitions_[0].fill(kDeadState);
      walk_state_ids_.clear();
    }
    WalkState first;
    for (uint32_t s : start) {
      if (s == kComplete) first.complete = true;
      else if (s == kBottom) first.bottom = true;
      else first.stacks.push_back(s);
    }
    std::sort(first.stacks.begin(), first.stacks.end());
    first.stacks.erase(std::unique(first.stacks.begin(), first.stacks.end()), first.stacks.end());
    level_states_.resize(vocab.max_depth() + 1);
    level_states_[0] = intern_walk_state(std::move(first));
    for (uint32_t i = begin; i < end;) {
      const uint32_t d = vocab.node_depth(i) - base_depth;
      const uint32_t next = transition(level_states_[d - 1], vocab.node_byte(i));
      if (next == kDeadState) {
        i = vocab.subtree_end(i);
        continue;
      }
      for (const int32_t* t = vocab.tokens_begin(i); t != vocab.tokens_end(i); ++t) accepted.allow(*t);
      const bool has_children = vocab.subtree_end(i) > i + 1;
      const WalkState& state = walk_states_[next];
      if (state.bottom && bottom_nodes && has_children) bottom_nodes->push_back(i);
      if (state.stacks.empty() || !has_children) {
        i = vocab.subtree_end(i);
        continue;
      }
      level_states_[d] = next;
      ++i;
    }
  }

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const TokenVocabulary> vocabulary_;
  std::vector<StackNode> nodes_;
  std::vector<PerNode> per_node_;
  std::vector<uint32_t> top_set_;  // per node: the byte set index of its top (kBytes tops only)
  std::unordered_map<uint64_t, uint32_t> index_;
  std::vector<uint32_t> pool_;
  std::unordered_map<uint32_t, std::vector<uint32_t>> closure_memo_;
  std::vector<uint32_t> stamp_;
  uint32_t stamp_now_ = 0;
  std::vector<uint32_t> level_states_;
  std::vector<WalkState> walk_states_;
  std::vector<std::array<uint32_t, 256>> transitions_;
  std::map<std::vector<uint32_t>, uint32_t> walk_state_ids_;
  std::unordered_map<uint32_t, Walk> walks_;
  std::map<std::vector<uint32_t>, TokenMask> state_cache_;
  size_t walk_cache_bytes_ = 0, state_cache_bytes_ = 0;
  MatcherStats stats_;
  std::vector<uint64_t> min_length_;
  std::vector<uint32_t> best_alternative_;
};

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocabulary> vocabulary)
    : engine_(std::make_shared<MatchEngine>(std::move(grammar), vocabulary)), vocabulary_(std::move(vocabulary)) {
  reset();
}

void GrammarMatcher::reset() {
  history_.assign(1, engine_->initial_state());
  finished_history_.assign(1, false);
  state_ = history_.back();
  finished_ = false;
}

bool GrammarMatcher::can_end() const {
  return !finished_ && !state_.empty() && state_.front() == kComplete;
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  if (finished_) return false;
  std::vector<uint32_t> current = state_, next;
  for (char c : bytes) {
    engine_->advance(current, uint8_t(c), next);
    if (next.empty()) return false;
    current.swap(next);
  }
  state_ = std::move(current);
  history_.push_back(state_);
  finished_history_.push_back(false);
  return true;
}

bool GrammarMatcher::accept_token(int32_t id) {
  if (finished_ || !vocabulary_) return false;
  const auto& ends = vocabulary_->end_tokens();
  if (std::find(ends.begin(), ends.end(), id) != ends.end()) {
    if (!can_end()) return false;
    finished_ = true;
    history_.push_back(state_);
    finished_history_.push_back(true);
    return true;
  }
  if (!vocabulary_->in_trie(id)) return false;
  return accept_bytes(vocabulary_->bytes(id));
}

void GrammarMatcher::allowed_tokens(TokenMask& mask) {
  if (!vocabulary_) throw Error("grammar: allowed_tokens needs a vocabulary");
  if (finished_) {
    mask = TokenMask(vocabulary_->mask_size());
    return;
  }
  engine_->allowed_tokens(state_, mask);
}

void GrammarMatcher::rollback(size_t tokens) {
  if (tokens > accepted_count()) throw Error("grammar: rollback past the start");
  history_.resize(history_.size() - tokens);
  finished_history_.resize(history_.size());
  state_ = history_.back();
  finished_ = finished_history_.back();
}

std::string GrammarMatcher::shortest_completion() const {
  if (finished_) return {};
  return engine_->shortest_completion(state_);
}

int32_t GrammarMatcher::closing_token(int64_t remaining) const {
  if (finished_ || !vocabulary_) return -1;
  // A margin: the next free token can lengthen the completion (an opened string or object).
  constexpr int64_t kMargin = 8;
  const std::string rest = shortest_completion();
  if (remaining > int64_t(rest.size()) + 1 + kMargin) return -1;
  if (rest.empty()) return vocabulary_->end_tokens().empty() ? -1 : vocabulary_->end_tokens().front();
  return vocabulary_->byte_token(uint8_t(rest[0]));
}

MatcherStats GrammarMatcher::stats() const { return engine_->stats(); }

bool grammar_accepts(const std::shared_ptr<const Grammar>& grammar, std::string_view text) {
  GrammarMatcher matcher(grammar, nullptr);
  return matcher.accept_bytes(text) && matcher.can_end();
}

}  // namespace inkling::grammar
