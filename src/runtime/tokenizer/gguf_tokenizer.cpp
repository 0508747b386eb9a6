// The tokenizer a GGUF model carries, read the way llama.cpp's Inkling converter writes it
// (convert_hf_to_gguf.py's gpt2 vocabulary and conversion/inkling.py):
//
//   tokenizer.ggml.model       "gpt2": byte-level BPE
//   tokenizer.ggml.pre         "inkling": the checkpoint's pre-tokenizer, the o200k-family Split
//                              with \p{M} in its letter classes, then ByteLevel without a regex
//   tokenizer.ggml.tokens      one per embedding row, spelled as tokenizer.json spells them; the
//                              rows tokenizer.json has no token for are "[PADn]"
//   tokenizer.ggml.token_type  per token: NORMAL the BPE vocabulary, CONTROL the special added
//                              tokens, USER_DEFINED other added tokens, UNUSED the padding rows
//   tokenizer.ggml.merges      "left right" (a space inside a part written as U+0120, which is
//                              how the byte-level alphabet spells a space anyway), highest first
//   tokenizer.ggml.{eos,bos,padding}_token_id, tokenizer.ggml.add_bos_token
#include <nlohmann/json.hpp>

#include "io/gguf.h"
#include "runtime/tokenizer/o200k_scanner.h"
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/tokenizer/tokenizer_impl.h"

namespace inkling {
namespace {

// ggml's token types (gguf-py's TokenType).
enum GgmlTokenType : int64_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

constexpr std::string_view kModelKey = "tokenizer.ggml.model";
constexpr std::string_view kPreKey = "tokenizer.ggml.pre";
constexpr std::string_view kTokensKey = "tokenizer.ggml.tokens";
constexpr std::string_view kTypesKey = "tokenizer.ggml.token_type";
constexpr std::string_view kMergesKey = "tokenizer.ggml.merges";
constexpr std::string_view kBosKey = "tokenizer.ggml.bos_token_id";
constexpr std::string_view kEosKey = "tokenizer.ggml.eos_token_id";
constexpr std::string_view kPaddingKey = "tokenizer.ggml.padding_token_id";
constexpr std::string_view kAddBosKey = "tokenizer.ggml.add_bos_token";

std::string key_source(const GgufFile& file, std::string_view key) {
  return file.label() + ": key \"" + std::string(key) + "\"";
}

// Built by appending: GCC 12's -Wrestrict misfires on "\"" + std::string(...) at -O3.
std::string quoted(std::string_view text) {
  std::string out(1, '"');
  out.append(text.substr(0, 60));
  out.append(text.size() > 60 ? "...\"" : "\"");
  return out;
}

// The pre-tokenizer a tokenizer.ggml.pre name stands for, as tokenizer.json would spell it.
nlohmann::json pre_tokenizer_config(const GgufFile& file) {
  const std::string_view pre = file.string(kPreKey);
  if (pre != "inkling")
    file.fail_key(kPreKey, "is " + quoted(pre) + "; only \"inkling\" (the Inkling checkpoints' pre-tokenizer) is supported");
  nlohmann::json split = {{"type", "Split"},
                          {"pattern", {{"Regex", std::string(tok_detail::kO200kPattern)}}},
                          {"behavior", "Isolated"},
                          {"invert", false}};
  nlohmann::json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
  return {{"type", "Sequence"}, {"pretokenizers", nlohmann::json::array({split, byte_level})}};
}

// A token id key, checked to name a used token; nullopt when the key is absent.
std::optional<int32_t> token_id_key(const GgufFile& file, std::string_view key, const std::vector<int64_t>& types) {
  if (!file.find(key)) return std::nullopt;
  const uint64_t id = file.unsigned_integer(key);
  if (id >= types.size())
    file.fail_key(key, "is " + std::to_string(id) + ", past the " + std::to_string(types.size()) + " tokens");
  if (types[id] == kUnused) file.fail_key(key, "is " + std::to_string(id) + ", an unused (padding) token");
  return int32_t(id);
}

std::string type_name(int64_t type) {
  switch (type) {
    case kNormal: return "NORMAL";
    case kUnknown: return "UNKNOWN";
    case kControl: return "CONTROL";
    case kUserDefined: return "USER_DEFINED";
    case kUnused: return "UNUSED";
    case kByte: return "BYTE";
    default: return "unknown type " + std::to_string(type);
  }
}

}  // namespace

bool Tokenizer::gguf_has_vocabulary(const GgufModelFiles& model) { return model.first().find(kTokensKey) != nullptr; }

Tokenizer Tokenizer::from_gguf(const GgufModelFiles& model) {
  const GgufFile& file = model.first();
  const std::string_view kind = file.string(kModelKey);
  if (kind != "gpt2")
    file.fail_key(kModelKey, "is " + quoted(kind) + "; only \"gpt2\" (byte-level BPE) vocabularies are supported");
  const nlohmann::json pre_config = pre_tokenizer_config(file);

  const std::vector<std::string_view>& tokens = file.string_array(kTokensKey);
  const std::vector<int64_t> types = file.integer_array(kTypesKey);
  if (types.size() != tokens.size())
    file.fail_key(kTypesKey, "has " + std::to_string(types.size()) + " entries but " + std::string(kTokensKey) +
                                 " has " + std::to_string(tokens.size()));
  // The logits have one row per token: a vocabulary of another size belongs to another model.
  if (const GgufTensor* embedding = model.find("token_embd.weight"); embedding && embedding->rows() != int64_t(tokens.size()))
    file.fail_key(kTokensKey, "has " + std::to_string(tokens.size()) + " tokens but token_embd.weight has " +
                                  std::to_string(embedding->rows()) + " rows (one per token)");

  std::vector<std::pair<int32_t, std::string_view>> vocabulary;
  vocabulary.reserve(tokens.size());
  auto impl = std::make_unique<Impl>();
  for (size_t id = 0; id < tokens.size(); ++id) {
    const int64_t type = types[id];
    if (type == kNormal) {
      vocabulary.emplace_back(int32_t(id), tokens[id]);
    } else if (type == kControl || type == kUserDefined) {
      if (tokens[id].empty()) file.fail_key(kTokensKey, "token " + std::to_string(id) + " is empty");
      tok_detail::AddedToken added;
      added.id = int32_t(id);
      added.content = std::string(tokens[id]);
      added.special = type == kControl;
      added.normalized = !added.special;  // tokenizer.json's default for each kind
      impl->added.push_back(std::move(added));
    } else if (type != kUnused) {
      file.fail_key(kTypesKey, "token " + std::to_string(id) + " " + quoted(tokens[id]) + " has type " + type_name(type) +
                                   ", which a byte-level BPE vocabulary does not use");
    }
  }
  // The Inkling tokenizer.json sets ignore_merges (a piece that is itself a token is that token);
  // the GGUF keys have no place for the flag, and the HF tokenizer is the reference.
  impl->bpe = tok_detail::BpeModel::from_tables(vocabulary, file.string_array(kMergesKey), /*ignore_merges=*/true,
                                                key_source(file, kTokensKey), key_source(file, kMergesKey));
  impl->pre_tokenizer = tok_detail::PreTokenizer::from_json(pre_config);
  impl->finish_added();

  impl->eos = token_id_key(file, kEosKey, types);
  token_id_key(file, kPaddingKey, types);  // checked: nothing here pads
  // The Inkling converter writes the EOS id as BOS with add_bos_token false, to say "no BOS":
  // the BOS id counts only where it is to be added.
  const bool add_bos = file.find(kAddBosKey) && file.boolean(kAddBosKey);
  const std::optional<int32_t> bos = token_id_key(file, kBosKey, types);
  if (add_bos) {
    if (!bos) file.fail_key(kBosKey, "is missing but " + std::string(kAddBosKey) + " is true");
    impl->bos = bos;
    impl->add_bos = true;
  }
  return Tokenizer(std::move(impl));
}

}  // namespace inkling
