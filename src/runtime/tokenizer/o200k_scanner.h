// Hand-written matcher for exactly the o200k pre-tokenizer regex (below); it
// reproduces Oniguruma's leftmost-first backtracking result for each
// alternative without a regex engine.
#pragma once

#include <string_view>
#include <vector>

namespace inkling::tok_detail {

// The pattern string as it appears in tokenizer.json (Split, Isolated).
extern const std::string_view kO200kPattern;

// Appends the pieces of `text` (valid UTF-8, non-empty) in order; together they cover it.
void o200k_split(std::string_view text, std::vector<std::string_view>& out);

}  // namespace inkling::tok_detail
