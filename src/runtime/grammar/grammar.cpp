#include "runtime/grammar/grammar.h"

#include <algorithm>
#include <functional>

#include "common/utf8.h"
#include "tensor/error.h"

namespace inkling::grammar {

uint32_t GrammarBuilder::rule(std::string_view name) {
  for (uint32_t i = 0; i < grammar_.rule_names.size(); ++i)
    if (grammar_.rule_names[i] == name) return i;
  if (grammar_.rule_names.size() >= kMaxGrammarRules)
    throw Error("grammar: more than " + std::to_string(kMaxGrammarRules) + " rules");
  grammar_.rule_names.emplace_back(name);
  alternatives_.emplace_back();
  defined_.push_back(false);
  return uint32_t(grammar_.rule_names.size() - 1);
}

uint32_t GrammarBuilder::helper_rule(std::string_view base) {
  // Helper names carry a '#', which GBNF names cannot, so they never collide with user rules.
  std::string name = std::string(base) + "#" + std::to_string(grammar_.rule_names.size());
  uint32_t id = rule(name);
  defined_[id] = true;
  return id;
}

void GrammarBuilder::begin_alternative(uint32_t rule) {
  pending_.emplace_back();
  pending_rule_.push_back(rule);
  defined_[rule] = true;
}

void GrammarBuilder::append_bytes(const ByteSet& set) {
  if (++element_count_ > kMaxGrammarElements)
    throw Error("grammar: more than " + std::to_string(kMaxGrammarElements) + " elements");
  auto found = std::find(grammar_.byte_sets.begin(), grammar_.byte_sets.end(), set);
  uint32_t index = uint32_t(found - grammar_.byte_sets.begin());
  if (found == grammar_.byte_sets.end()) grammar_.byte_sets.push_back(set);
  pending_.back().push_back({ElementKind::kBytes, index});
}

void GrammarBuilder::append_byte(uint8_t b) {
  ByteSet set;
  set.add(b);
  append_bytes(set);
}

void GrammarBuilder::append_rule(uint32_t rule) {
  if (++element_count_ > kMaxGrammarElements)
    throw Error("grammar: more than " + std::to_string(kMaxGrammarElements) + " elements");
  pending_.back().push_back({ElementKind::kRule, rule});
}

void GrammarBuilder::end_alternative() {
  alternatives_[pending_rule_.back()].push_back(std::move(pending_.back()));
  pending_.pop_back();
  pending_rule_.pop_back();
}

Grammar GrammarBuilder::finish(std::string_view root_name) {
  const size_t rules = grammar_.rule_names.size();
  uint32_t root = uint32_t(rules);
  for (uint32_t i = 0; i < rules; ++i)
    if (grammar_.rule_names[i] == root_name) root = i;
  if (root == rules || !defined_[root])
    throw Error("grammar: no rule named '" + std::string(root_name) + "' (the start rule)");
  for (uint32_t i = 0; i < rules; ++i)
    if (!defined_[i]) throw Error("grammar: rule '" + grammar_.rule_names[i] + "' is used but never defined");

  // Productive rules (those with a finite derivation), by fixpoint; an alternative that names
  // an unproductive rule can never finish, so it is dropped and the matcher never enters it.
  std::vector<bool> productive(rules, false);
  auto element_productive = [&](const Element& e) { return e.kind != ElementKind::kRule || productive[e.value]; };
  for (bool changed = true; changed;) {
    changed = false;
    for (uint32_t r = 0; r < rules; ++r) {
      if (productive[r]) continue;
      for (const auto& alt : alternatives_[r]) {
        if (std::all_of(alt.begin(), alt.end(), element_productive)) {
          productive[r] = changed = true;
          break;
        }
      }
    }
  }
  if (!productive[root])
    throw Error("grammar: it cannot terminate: rule '" + grammar_.rule_names[root] + "' has no finite derivation");
  for (uint32_t r = 0; r < rules; ++r) {
    auto& alts = alternatives_[r];
    alts.erase(std::remove_if(alts.begin(), alts.end(),
                              [&](const std::vector<Element>& alt) {
                                return !std::all_of(alt.begin(), alt.end(), element_productive);
                              }),
               alts.end());
  }

  // Left recursion (a rule reaching itself before consuming a byte) would make the matcher's
  // expansion loop; refuse it with the cycle named.
  std::vector<bool> nullable(rules, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (uint32_t r = 0; r < rules; ++r) {
      if (nullable[r]) continue;
      for (const auto& alt : alternatives_[r]) {
        bool all = std::all_of(alt.begin(), alt.end(),
                               [&](const Element& e) { return e.kind == ElementKind::kRule && nullable[e.value]; });
        if (all) {
          nullable[r] = changed = true;
          break;
        }
      }
    }
  }
  std::vector<std::vector<uint32_t>> left_calls(rules);
  for (uint32_t r = 0; r < rules; ++r) {
    for (const auto& alt : alternatives_[r]) {
      for (const Element& e : alt) {
        if (e.kind != ElementKind::kRule) break;
        left_calls[r].push_back(e.value);
        if (!nullable[e.value]) break;
      }
    }
  }
  std::vector<uint8_t> color(rules, 0);  // 0 unvisited, 1 on the path, 2 done
  std::vector<uint32_t> path;
  // Iterative DFS: rule graphs from schemas can be deep.
  for (uint32_t start = 0; start < rules; ++start) {
    if (color[start]) continue;
    std::vector<std::pair<uint32_t, size_t>> stack{{start, 0}};
    color[start] = 1;
    path.assign(1, start);
    while (!stack.empty()) {
      auto& [r, next] = stack.back();
      if (next < left_calls[r].size()) {
        uint32_t callee = left_calls[r][next++];
        if (color[callee] == 1) {
          std::string cycle;
          auto at = std::find(path.begin(), path.end(), callee);
          for (; at != path.end(); ++at) cycle += grammar_.rule_names[*at] + " -> ";
          cycle += grammar_.rule_names[callee];
          throw Error("grammar: left recursion is not supported (" + cycle + ")");
        }
        if (color[callee] == 0) {
          color[callee] = 1;
          path.push_back(callee);
          stack.push_back({callee, 0});
        }
      } else {
        color[r] = 2;
        path.pop_back();
        stack.pop_back();
      }
    }
  }

  grammar_.rule_alternatives.assign(rules, {});
  for (uint32_t r = 0; r < rules; ++r) {
    for (const auto& alt : alternatives_[r]) {
      grammar_.rule_alternatives[r].push_back(uint32_t(grammar_.elements.size()));
      grammar_.elements.insert(grammar_.elements.end(), alt.begin(), alt.end());
      grammar_.elements.push_back({ElementKind::kEnd, 0});
    }
  }
  grammar_.root = root;
  alternatives_.clear();
  return std::move(grammar_);
}

void utf8_range_sequences(uint32_t lo, uint32_t hi, std::vector<std::vector<std::pair<uint8_t, uint8_t>>>& out) {
  hi = std::min<uint32_t>(hi, 0x10FFFF);
  std::vector<std::pair<uint32_t, uint32_t>> work;
  if (lo <= hi) work.push_back({lo, hi});
  while (!work.empty()) {
    auto [a, b] = work.back();
    work.pop_back();
    // Surrogates have no UTF-8 form.
    if (a <= 0xDFFF && b >= 0xD800) {
      if (a < 0xD800) work.push_back({a, 0xD7FF});
      if (b > 0xDFFF) work.push_back({0xE000, b});
      continue;
    }
    // One encoded length per range.
    static constexpr uint32_t kLengthEnds[] = {0x7F, 0x7FF, 0xFFFF};
    bool split = false;
    for (uint32_t end : kLengthEnds) {
      if (a <= end && b > end) {
        work.push_back({a, end});
        work.push_back({end + 1, b});
        split = true;
        break;
      }
    }
    if (split) continue;
    // Split until every continuation byte spans its full range or a single value, so the
    // range is a product of per-byte ranges.
    const int n = utf8_length(a);
    for (int i = 1; i < n && !split; ++i) {
      uint32_t mask = (uint32_t(1) << (6 * i)) - 1;
      if ((a & ~mask) != (b & ~mask)) {
        if ((a & mask) != 0) {
          work.push_back({a, a | mask});
          work.push_back({(a | mask) + 1, b});
          split = true;
        } else if ((b & mask) != mask) {
          work.push_back({a, (b & ~mask) - 1});
          work.push_back({b & ~mask, b});
          split = true;
        }
      }
    }
    if (split) continue;
    unsigned char ea[4], eb[4];
    encode_utf8(a, ea);
    encode_utf8(b, eb);
    std::vector<std::pair<uint8_t, uint8_t>> seq;
    for (int i = 0; i < n; ++i) seq.push_back({ea[i], eb[i]});
    out.push_back(std::move(seq));
  }
}

}  // namespace inkling::grammar
