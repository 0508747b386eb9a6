// The project's tokenizer.json and chat template as GGUF tokenizer metadata, through the library's
// writer of the converter's layout (io/gguf_vocabulary.h), so the GGUF tokenizer tests need no
// llama.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gguf_test_util.h"
#include "io/gguf_vocabulary.h"
#include "io/text_file.h"

namespace inkling::testing {

using inkling::add_vocabulary_metadata;
using inkling::gguf_vocabulary;
using inkling::GgufTokenType;
using inkling::GgufVocabulary;

inline std::string project_data_file(const std::string& name) {
  return std::string(INKLING_SOURCE_DIR) + "/data/" + name;
}

// The project's tokenizer (data/tokenizer.json, parsed once) and chat template, over `rows`
// embedding rows; the padding id is <|endoftext|>'s, as the checkpoints' tokenizer_config.json says.
inline void add_project_vocabulary_metadata(GgufBuilder& meta, int64_t rows, uint32_t eos_id) {
  static const nlohmann::json root =
      nlohmann::json::parse(read_text_file(project_data_file("tokenizer.json"), kMaxTokenizerFileBytes));
  static const std::string chat_template =
      read_text_file(project_data_file("inkling_chat_template.jinja"), kMaxTemplateFileBytes);
  std::optional<uint32_t> padding;
  for (const auto& token : root["added_tokens"])
    if (token["content"] == "<|endoftext|>") padding = token["id"].get<uint32_t>();
  add_vocabulary_metadata(meta, gguf_vocabulary(root, rows), eos_id, padding, chat_template);
}

}  // namespace inkling::testing
