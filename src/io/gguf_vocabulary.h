// A tokenizer.json (and a chat template) as GGUF tokenizer metadata, with the keys, types and
// layout llama.cpp's Inkling converter gives them (convert_hf_to_gguf.py's gpt2 vocabulary,
// gguf-py's SpecialVocab, conversion/inkling.py): one token per embedding row, added tokens
// taking their ids' places, "[PADn]" rows typed UNUSED, merges as "left right" lines, the EOS id
// also written as BOS with add_bos_token false.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "io/gguf_writer.h"

namespace inkling {

// ggml's token types.
enum class GgufTokenType : int32_t { Normal = 1, Control = 3, UserDefined = 4, Unused = 5 };

struct GgufVocabulary {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<std::string> merges;
};

// tokenizer.json's vocabulary (`root`, the parsed file) laid out over `rows` ids, as the
// converter lays it out. Throws inkling::Error for a tokenizer.json without a BPE vocabulary.
GgufVocabulary gguf_vocabulary(const nlohmann::json& root, int64_t rows);

// The tokenizer.ggml.* keys (and tokenizer.chat_template when `chat_template` is not empty).
void add_vocabulary_metadata(GgufMetadata& meta, const GgufVocabulary& vocabulary, uint32_t eos_id,
                             std::optional<uint32_t> padding_id, const std::string& chat_template);

}  // namespace inkling
