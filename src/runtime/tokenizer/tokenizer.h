// Tokenizer for HF tokenizer.json files with a byte-level BPE model (the
// Inkling / o200k tokenizer and the GPT-2 family), plus the few fields of
// tokenizer_config.json that matter at inference time; or the same tokenizer from a GGUF
// model's tokenizer.ggml.* metadata.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace inkling {

class GgufModelFiles;

// Throws an Error when `text` is not valid UTF-8, naming `what` ("--prompt", "your message") and
// the byte offset in `text` itself: checked before a template embeds the text, where the
// tokenizer could only give an offset into the rendered prompt.
void require_utf8(std::string_view text, const std::string& what);

class Tokenizer {
 public:
  // Loads tokenizer.json; throws inkling::Error naming the problem.
  static Tokenizer from_file(const std::string& path);
  // tokenizer.json plus, when present, tokenizer_config.json (added_tokens_decoder,
  // bos_token, eos_token, add_bos_token) from the same directory.
  static Tokenizer from_dir(const std::string& dir);
  // tokenizer.json content (and optionally tokenizer_config.json content).
  static Tokenizer from_json(std::string_view tokenizer_json, std::string_view config_json = {});

  // The vocabulary a GGUF model carries, as llama.cpp's Inkling converter writes it (see
  // gguf_tokenizer.cpp): tokenizer.ggml.model "gpt2", .pre "inkling", .tokens and .token_type
  // (one per embedding row), .merges, .eos_token_id / .bos_token_id / .padding_token_id and
  // .add_bos_token. Throws inkling::Error naming the file and key when one is missing or
  // malformed (a merge of non-tokens, more or fewer tokens than token_embd.weight has rows).
  static Tokenizer from_gguf(const GgufModelFiles& model);
  // Whether the model's metadata carries a vocabulary (tokenizer.ggml.tokens).
  static bool gguf_has_vocabulary(const GgufModelFiles& model);

  // Ids of `text` (valid UTF-8, else inkling::Error). With parse_special, special-token
  // strings such as "<|message_user|>" become their ids; otherwise they are plain text.
  // Never adds BOS; see add_bos_token().
  std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const;
  // Text of the ids; bytes that do not form UTF-8 become U+FFFD. Throws on an unknown id.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  std::optional<int32_t> token_id(std::string_view token) const;
  // tokenizer.json spelling (byte-level characters for BPE tokens); throws on an unknown id.
  std::string token_text(int32_t id) const;
  // Raw bytes the id decodes to; throws on an unknown id.
  std::string_view token_bytes(int32_t id) const;
  bool is_special(int32_t id) const;
  // One past the largest id (BPE vocab and added tokens).
  int32_t vocab_size() const;

  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  // tokenizer_config.json's add_bos_token (false when absent or when there is no BOS).
  bool add_bos_token() const;

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  static Tokenizer build(std::string_view tokenizer_json, std::string_view config_json);
  std::unique_ptr<Impl> impl_;
};

// Streams decoded text: feed ids one at a time; returns only complete UTF-8, holding
// back an unfinished multi-byte character until its last byte arrives. The
// concatenation of all push() results and flush() equals decode() of the same ids.
class IncrementalDecoder {
 public:
  explicit IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special = false);

  std::string push(int32_t id);
  // The held-back tail (an unfinished character becomes U+FFFD); resets the decoder.
  std::string flush();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace inkling
