// Writes a tokenizer.json and a chat template as GGUF tokenizer metadata, with the keys, types and
// layout llama.cpp's Inkling converter gives them (convert_hf_to_gguf.py's gpt2 vocabulary,
// gguf-py's SpecialVocab, conversion/inkling.py): one token per embedding row, added tokens
// taking their ids' places, "[PADn]" rows typed UNUSED, merges as "left right" lines, the EOS id
// also written as BOS with add_bos_token false. Our own writer, so the GGUF tokenizer tests need
// no llama.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gguf_test_util.h"
#include "io/text_file.h"

namespace inkling::testing {

// ggml's token types.
enum class GgufTokenType : int32_t { Normal = 1, Control = 3, UserDefined = 4, Unused = 5 };

struct GgufVocabulary {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<std::string> merges;
};

// tokenizer.json's vocabulary laid out over `rows` ids, as the converter lays it out.
inline GgufVocabulary gguf_vocabulary(const nlohmann::json& root, int64_t rows) {
  std::map<int64_t, std::string> normal;
  for (const auto& [text, id] : root["model"]["vocab"].items()) normal[id.get<int64_t>()] = text;
  std::map<int64_t, std::pair<std::string, bool>> added;  // id -> (content, special)
  for (const auto& token : root["added_tokens"])
    added[token["id"].get<int64_t>()] = {token["content"].get<std::string>(), token.value("special", false)};
  GgufVocabulary out;
  for (int64_t id = 0; id < rows; ++id) {
    if (auto it = added.find(id); it != added.end()) {
      out.tokens.push_back(it->second.first);
      out.types.push_back(int32_t(it->second.second ? GgufTokenType::Control : GgufTokenType::UserDefined));
    } else if (auto jt = normal.find(id); jt != normal.end()) {
      out.tokens.push_back(jt->second);
      out.types.push_back(int32_t(GgufTokenType::Normal));
    } else {
      out.tokens.push_back("[PAD" + std::to_string(id) + "]");
      out.types.push_back(int32_t(GgufTokenType::Unused));
    }
  }
  for (const auto& merge : root["model"]["merges"]) {
    if (merge.is_string()) {
      out.merges.push_back(merge.get<std::string>());
      continue;
    }
    // The pair form may hold spaces; the line form spells them U+0120 ("Ġ").
    std::string line;
    for (int part = 0; part < 2; ++part) {
      if (part) line += ' ';
      for (char c : merge[size_t(part)].get<std::string>()) line += c == ' ' ? std::string("\xc4\xa0") : std::string(1, c);
    }
    out.merges.push_back(line);
  }
  return out;
}

inline void add_vocabulary_metadata(GgufBuilder& meta, const GgufVocabulary& vocabulary, uint32_t eos_id,
                                    std::optional<uint32_t> padding_id, const std::string& chat_template) {
  meta.add_string("tokenizer.ggml.model", "gpt2");
  meta.add_string("tokenizer.ggml.pre", "inkling");
  meta.add_string_array("tokenizer.ggml.tokens", vocabulary.tokens);
  meta.add_array<int32_t>("tokenizer.ggml.token_type", GgufValueType::I32, vocabulary.types);
  meta.add_string_array("tokenizer.ggml.merges", vocabulary.merges);
  meta.add_u32("tokenizer.ggml.eos_token_id", eos_id);
  if (padding_id) meta.add_u32("tokenizer.ggml.padding_token_id", *padding_id);
  meta.add_bool("tokenizer.ggml.add_bos_token", false);
  meta.add_bool("tokenizer.ggml.add_eos_token", false);
  if (!chat_template.empty()) meta.add_string("tokenizer.chat_template", chat_template);
  meta.add_u32("tokenizer.ggml.bos_token_id", eos_id);
}

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
