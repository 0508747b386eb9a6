#include "runtime/tokenizer/pre_tokenizer.h"

#include <nlohmann/json.hpp>
#include <algorithm>
#include <optional>
#include <utility>

#include "runtime/tokenizer/o200k_scanner.h"
#include "runtime/tokenizer/regex.h"
#include "tensor/error.h"

namespace inkling::tok_detail {

namespace {

using Json = nlohmann::json;
using Span = std::pair<size_t, size_t>;

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

Behavior parse_behavior(const Json& config) {
  const auto it = config.find("behavior");
  if (it == config.end() || !it->is_string()) throw Error("tokenizer.json: Split pre-tokenizer has no 'behavior'");
  const std::string name = it->get<std::string>();
  if (name == "Removed") return Behavior::kRemoved;
  if (name == "Isolated") return Behavior::kIsolated;
  if (name == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::kMergedWithNext;
  if (name == "Contiguous") return Behavior::kContiguous;
  throw Error("tokenizer.json: unknown Split behavior '" + name + "'");
}

// Turns the list of (span, is_match) segments covering a piece into the pieces
// each behaviour keeps, the way HF's NormalizedString::split combines them.
void combine(std::string_view piece, const std::vector<std::pair<Span, bool>>& segments, Behavior behavior,
             std::vector<std::string_view>& out) {
  std::vector<Span> kept;
  kept.reserve(segments.size());
  switch (behavior) {
    case Behavior::kRemoved:
      for (const auto& [span, is_match] : segments)
        if (!is_match) kept.push_back(span);
      break;
    case Behavior::kIsolated:
      for (const auto& segment : segments) kept.push_back(segment.first);
      break;
    case Behavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const auto& [span, is_match] : segments) {
        if (is_match && !previous_match && !kept.empty()) {
          kept.back().second = span.second;
        } else {
          kept.push_back(span);
        }
        previous_match = is_match;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool previous_match = false;
      for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
        const auto& [span, is_match] = *it;
        if (is_match && !previous_match && !kept.empty()) {
          kept.back().first = span.first;
        } else {
          kept.push_back(span);
        }
        previous_match = is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    }
    case Behavior::kContiguous: {
      bool previous_match = false;
      for (const auto& [span, is_match] : segments) {
        if (is_match == previous_match && !kept.empty()) {
          kept.back().second = span.second;
        } else {
          kept.push_back(span);
        }
        previous_match = is_match;
      }
      break;
    }
  }
  for (const auto& [b, e] : kept)
    if (b != e) out.push_back(piece.substr(b, e - b));
}

void segments_from_matches(size_t size, const std::vector<Span>& matches, bool invert,
                           std::vector<std::pair<Span, bool>>& segments) {
  segments.clear();
  size_t previous = 0;
  for (const auto& [b, e] : matches) {
    if (previous != b) segments.push_back({{previous, b}, invert});
    segments.push_back({{b, e}, !invert});
    previous = e;
  }
  if (previous != size) segments.push_back({{previous, size}, invert});
}

class SplitStep : public PreTokenizerStep {
 public:
  explicit SplitStep(const Json& config) : behavior_(parse_behavior(config)) {
    invert_ = config.value("invert", false);
    const auto pattern = config.find("pattern");
    if (pattern == config.end() || !pattern->is_object())
      throw Error("tokenizer.json: Split pre-tokenizer has no 'pattern' object");
    if (auto it = pattern->find("Regex"); it != pattern->end() && it->is_string()) {
      const std::string text = it->get<std::string>();
      o200k_ = text == kO200kPattern;
      if (!o200k_) regex_.emplace(text);
    } else if (auto lit = pattern->find("String"); lit != pattern->end() && lit->is_string()) {
      literal_ = lit->get<std::string>();
      if (literal_.empty()) throw Error("tokenizer.json: Split pre-tokenizer has an empty String pattern");
    } else {
      throw Error("tokenizer.json: Split pattern must be {\"Regex\": ...} or {\"String\": ...}");
    }
  }

  bool is_plain_o200k() const { return o200k_ && !invert_ && behavior_ == Behavior::kIsolated; }

  void apply(const std::vector<std::string_view>& in, std::vector<std::string_view>& out,
             PieceArena& /*arena*/) const override {
    out.clear();
    std::vector<Span> matches;
    std::vector<std::pair<Span, bool>> segments;
    std::vector<std::string_view> o200k_pieces;
    for (const std::string_view piece : in) {
      matches.clear();
      if (o200k_) {
        o200k_pieces.clear();
        o200k_split(piece, o200k_pieces);
        for (const auto sub : o200k_pieces) {
          const size_t b = static_cast<size_t>(sub.data() - piece.data());
          matches.emplace_back(b, b + sub.size());
        }
      } else if (regex_) {
        regex_->find_all(piece, matches);
      } else {
        for (size_t at = piece.find(literal_); at != std::string_view::npos; at = piece.find(literal_, at)) {
          matches.emplace_back(at, at + literal_.size());
          at += literal_.size();
        }
      }
      segments_from_matches(piece.size(), matches, invert_, segments);
      combine(piece, segments, behavior_, out);
    }
  }

 private:
  Behavior behavior_;
  bool invert_ = false;
  bool o200k_ = false;
  std::optional<Regex> regex_;
  std::string literal_;
};

// GPT-2's pattern, which ByteLevel applies when use_regex is true.
constexpr const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

class ByteLevelStep : public PreTokenizerStep {
 public:
  explicit ByteLevelStep(const Json& config) {
    add_prefix_space_ = config.value("add_prefix_space", true);
    if (config.value("use_regex", true)) regex_.emplace(kGpt2Pattern);
  }

  bool is_passthrough() const { return !add_prefix_space_ && !regex_; }

  void apply(const std::vector<std::string_view>& in, std::vector<std::string_view>& out,
             PieceArena& arena) const override {
    out.clear();
    std::vector<Span> matches;
    std::vector<std::pair<Span, bool>> segments;
    for (std::string_view piece : in) {
      if (add_prefix_space_ && piece.front() != ' ') {
        std::string& spaced = arena.texts.emplace_back();
        spaced.reserve(piece.size() + 1);
        spaced.push_back(' ');
        spaced.append(piece);
        piece = spaced;
      }
      if (!regex_) {
        out.push_back(piece);
        continue;
      }
      matches.clear();
      regex_->find_all(piece, matches);
      segments_from_matches(piece.size(), matches, false, segments);
      combine(piece, segments, Behavior::kIsolated, out);
    }
  }

 private:
  bool add_prefix_space_ = true;
  std::optional<Regex> regex_;
};

void add_steps(const Json& config, std::vector<std::shared_ptr<const PreTokenizerStep>>& steps,
               bool& has_byte_level) {
  if (!config.is_object()) throw Error("tokenizer.json: pre_tokenizer must be an object");
  const auto type_it = config.find("type");
  if (type_it == config.end() || !type_it->is_string()) throw Error("tokenizer.json: pre_tokenizer has no 'type'");
  const std::string type = type_it->get<std::string>();
  if (type == "Sequence") {
    const auto list = config.find("pretokenizers");
    if (list == config.end() || !list->is_array())
      throw Error("tokenizer.json: Sequence pre-tokenizer has no 'pretokenizers' array");
    for (const auto& child : *list) add_steps(child, steps, has_byte_level);
  } else if (type == "Split") {
    if (has_byte_level) {
      // After ByteLevel the text is in the byte-to-char alphabet; we split raw bytes.
      throw Error("tokenizer.json: a Split pre-tokenizer after ByteLevel is not supported");
    }
    steps.push_back(std::make_shared<SplitStep>(config));
  } else if (type == "ByteLevel") {
    has_byte_level = true;
    steps.push_back(std::make_shared<ByteLevelStep>(config));
  } else {
    throw Error("tokenizer.json: unsupported pre_tokenizer type '" + type + "'");
  }
}

}  // namespace

PreTokenizer PreTokenizer::from_json(const Json& config) {
  PreTokenizer result;
  if (config.is_null()) return result;
  add_steps(config, result.steps_, result.has_byte_level_);
  // Drop steps that change nothing (ByteLevel without prefix space or regex: the
  // byte-to-char mapping is implicit because the BPE works on raw bytes).
  std::vector<std::shared_ptr<const PreTokenizerStep>> effective;
  for (const auto& step : result.steps_) {
    const auto* byte_level = dynamic_cast<const ByteLevelStep*>(step.get());
    if (byte_level == nullptr || !byte_level->is_passthrough()) effective.push_back(step);
  }
  result.steps_ = std::move(effective);
  if (result.steps_.size() == 1) {
    const auto* split = dynamic_cast<const SplitStep*>(result.steps_.front().get());
    result.o200k_only_ = split != nullptr && split->is_plain_o200k();
  }
  return result;
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& out, PieceArena& arena) const {
  if (o200k_only_) {
    o200k_split(text, out);
    return;
  }
  std::vector<std::string_view> current{text};
  std::vector<std::string_view> next;
  for (const auto& step : steps_) {
    step->apply(current, next, arena);
    current.swap(next);
  }
  out.insert(out.end(), current.begin(), current.end());
}

}  // namespace inkling::tok_detail
