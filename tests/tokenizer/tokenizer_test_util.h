// Shared fixtures for the tokenizer tests: the project tokenizer, loaded once,
// and the golden files written by tools/tokenizer_goldens.py.
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/tokenizer/tokenizer.h"

namespace inkling::test {

inline std::string data_path(const std::string& name) {
  return std::string(INKLING_SOURCE_DIR) + "/tests/data/tokenizer/" + name;
}

inline const Tokenizer& project_tokenizer() {
  static const Tokenizer tokenizer = Tokenizer::from_file(std::string(INKLING_SOURCE_DIR) + "/data/tokenizer.json");
  return tokenizer;
}

inline std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

inline const std::vector<std::string>& corpus() {
  static const std::vector<std::string> records = [] {
    std::vector<std::string> out;
    for (const auto& line : read_lines(data_path("corpus.jsonl"))) out.push_back(nlohmann::json::parse(line));
    return out;
  }();
  return records;
}

inline std::vector<int32_t> parse_ids(const std::string& line) {
  std::vector<int32_t> ids;
  std::istringstream in(line);
  int32_t id;
  while (in >> id) ids.push_back(id);
  return ids;
}

}  // namespace inkling::test
