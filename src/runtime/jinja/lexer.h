// Splits template source into data and tag tokens, applying Jinja2's whitespace
// rules as HF configures them (trim_blocks, lstrip_blocks, no trailing newline).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace inkling::jinja {

enum class TokenType { kData, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };

struct Token {
  TokenType type;
  std::string text;  // data text, name, decoded string literal, number text or operator
  int line;
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// Where a template error is: "FILE:LINE" for a template file; a template that is a value inside a
// JSON file is named FILE["key"] and reads "FILE["key"] line LINE", since LINE counts the
// template's own lines, not the file's.
std::string source_location(const std::string& name, int line);

// Throws inkling::Error naming `name` and the line on malformed input.
std::vector<Token> tokenize(std::string_view source, const std::string& name, const LexOptions& options = {});

}  // namespace inkling::jinja
