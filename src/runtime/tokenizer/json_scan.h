// A minimal JSON scanner for the two large tables of tokenizer.json
// (model.vocab, model.merges): locating and streaming them directly is several
// times faster than building nlohmann's DOM for 400k small values, and the CLI
// loads the tokenizer on every run.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace inkling::tok_detail {

struct JsonSpan {
  size_t begin = 0;
  size_t end = 0;
};

struct ModelTables {
  JsonSpan vocab;   // the object value of model.vocab
  JsonSpan merges;  // the array value of model.merges
};

// Finds model.vocab and model.merges; nullopt if the document does not have the
// expected shape (the caller then falls back to the full parser for a precise error).
std::optional<ModelTables> find_model_tables(std::string_view text);

// Streams {"token": id, ...}; throws inkling::Error on malformed content.
void scan_vocab(std::string_view object, const std::function<void(std::string_view, long long)>& entry);

// Streams ["a b", ...] or [["a", "b"], ...] as (left, right, rank); throws inkling::Error.
void scan_merges(std::string_view array,
                 const std::function<void(std::string_view, std::string_view, size_t)>& merge);

}  // namespace inkling::tok_detail
