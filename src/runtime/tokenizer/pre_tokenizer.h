// The pre-tokenizer pipeline of tokenizer.json: Split (regex or literal, five
// behaviours, invert), ByteLevel (optional prefix space, optional GPT-2 regex)
// and Sequence. Pieces are views into the input or into a per-call arena
// (a prefix space makes new text).
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace inkling::tok_detail {

struct PieceArena {
  std::deque<std::string> texts;  // deque: growing it never moves earlier strings
};

class PreTokenizerStep {
 public:
  virtual ~PreTokenizerStep() = default;
  // Splits every piece of `in` into `out` (cleared first).
  virtual void apply(const std::vector<std::string_view>& in, std::vector<std::string_view>& out,
                     PieceArena& arena) const = 0;
};

class PreTokenizer {
 public:
  // `config` is tokenizer.json's "pre_tokenizer" (null: the whole text is one piece).
  static PreTokenizer from_json(const nlohmann::json& config);

  // Appends the pieces of one text segment (valid UTF-8, non-empty) to out.
  void split(std::string_view text, std::vector<std::string_view>& out, PieceArena& arena) const;

  // True when the pipeline includes a ByteLevel step (required by the byte-level BPE).
  bool has_byte_level() const { return has_byte_level_; }

 private:
  std::vector<std::shared_ptr<const PreTokenizerStep>> steps_;
  bool has_byte_level_ = false;
  bool o200k_only_ = false;  // the single step is the o200k Split: skip the generic machinery
};

}  // namespace inkling::tok_detail
