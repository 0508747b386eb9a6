// Shared fixtures for the chat tests: the project tokenizer, file helpers.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

#include "runtime/tokenizer/tokenizer.h"

namespace inkling::test {

inline const Tokenizer& chat_tokenizer() {
  static const Tokenizer tokenizer = Tokenizer::from_file(std::string(INKLING_SOURCE_DIR) + "/data/tokenizer.json");
  return tokenizer;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

}  // namespace inkling::test
