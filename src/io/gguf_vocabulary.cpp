#include "io/gguf_vocabulary.h"

#include <map>

#include <nlohmann/json.hpp>

#include "tensor/error.h"

namespace inkling {

GgufVocabulary gguf_vocabulary(const nlohmann::json& root, int64_t rows) {
  if (!root.is_object() || !root.contains("model") || !root["model"].contains("vocab") ||
      !root["model"]["vocab"].is_object() || !root["model"].contains("merges") || !root["model"]["merges"].is_array())
    throw Error("tokenizer.json has no BPE vocabulary (model.vocab, model.merges) to write as GGUF metadata");
  std::map<int64_t, std::string> normal;
  for (const auto& [text, id] : root["model"]["vocab"].items()) normal[id.get<int64_t>()] = text;
  std::map<int64_t, std::pair<std::string, bool>> added;  // id -> (content, special)
  for (const auto& token : root.value("added_tokens", nlohmann::json::array()))
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

void add_vocabulary_metadata(GgufMetadata& meta, const GgufVocabulary& vocabulary, uint32_t eos_id,
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

}  // namespace inkling
