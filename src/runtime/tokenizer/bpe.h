// Byte-level BPE: vocabulary keyed by raw bytes, merges as a rank table on id
// pairs. Encoding a piece: whole-piece lookup when ignore_merges is set, else
// lowest-rank-first merging (leftmost on ties), as HF tokenizers does.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace inkling::tok_detail {

// Byte-level alphabet (GPT-2): every byte has a printable stand-in character.
uint32_t byte_to_char(uint8_t byte);
// The byte a stand-in character represents, or -1.
int char_to_byte(uint32_t cp);
// Byte-level text -> raw bytes; nullopt if a character is outside the alphabet.
std::optional<std::string> byte_level_to_bytes(std::string_view text);

// Open-addressing map from byte strings (stored in one arena) to ids.
class BytesMap {
 public:
  void reserve(size_t count);
  // Returns false if the key already exists.
  bool insert(std::string_view key, int32_t id);
  int32_t find(std::string_view key) const;  // -1 if absent
  std::string_view key_of_slot(size_t slot) const;

 private:
  struct Slot {
    uint32_t offset = 0;
    uint32_t length = 0;
    int32_t id = -1;
  };
  std::vector<Slot> slots_;
  std::string arena_;
  size_t mask_ = 0;
  size_t count_ = 0;
};

// Ids a vocab may skip before its table counts as sparse (and so as hostile).
inline constexpr size_t kIdHoleAllowance = 1024;

class BpeModel {
 public:
  // `model` is tokenizer.json's "model" object; throws inkling::Error naming the problem.
  static BpeModel from_json(const nlohmann::json& model);
  // Same, with model.vocab and model.merges given as raw JSON text (streamed, fast);
  // the corresponding members of `model` are ignored.
  static BpeModel from_json(const nlohmann::json& model, std::string_view vocab_json, std::string_view merges_json);

  // A vocabulary given as tables (a GGUF file's tokenizer.ggml.tokens and .merges): `tokens` are
  // (id, spelling) pairs, spelled as tokenizer.json spells them (byte-level characters), and
  // `merges` are "left right" lines, highest priority first. `tokens_source` and
  // `merges_source` begin the errors about each table ("FILE: key \"tokenizer.ggml.merges\"").
  static BpeModel from_tables(std::span<const std::pair<int32_t, std::string_view>> tokens,
                              std::span<const std::string_view> merges, bool ignore_merges,
                              const std::string& tokens_source, const std::string& merges_source);

  // Appends the ids of one pre-tokenized piece (raw bytes).
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;

  // Id of a token given in its tokenizer.json spelling (byte-level characters).
  std::optional<int32_t> token_id(std::string_view token) const;
  // The tokenizer.json spelling of an id, empty if the id is unused.
  std::string_view token_text(int32_t id) const;
  // The raw bytes an id decodes to (ByteLevel decoder rule).
  std::string_view token_bytes(int32_t id) const;
  // One past the largest id.
  int32_t id_limit() const { return static_cast<int32_t>(texts_.size()); }
  int32_t vocab_size() const { return vocab_count_; }

 private:
  struct MergeSlot {
    uint64_t key = ~0ull;  // (left << 32) | right
    uint32_t rank = 0;
    int32_t merged = -1;
  };

  // Rank and result of merging (left, right); rank = UINT32_MAX when there is no merge.
  MergeSlot find_merge(int32_t left, int32_t right) const {
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
    size_t slot = static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> merge_shift_);
    for (;;) {
      const MergeSlot& s = merges_[slot];
      if (s.key == key) return s;
      if (s.merged < 0) return MergeSlot{};
      slot = (slot + 1) & merge_mask_;
    }
  }
  void insert_merge(int32_t left, int32_t right, uint32_t rank, int32_t merged);
  void check_options(const nlohmann::json& model);
  void add_token(std::string_view text, long long id);
  void finish_vocab();
  void add_merge(std::string_view left, std::string_view right, size_t rank);
  void add_merge_line(std::string_view line, size_t rank);  // "left right"
  void build_merge_table();

  struct PendingMerge {
    int32_t left, right, merged;
  };
  std::vector<PendingMerge> pending_merges_;
  void merge_small(const int32_t* initial, size_t n, std::vector<int32_t>& out) const;
  void merge_large(const int32_t* initial, size_t n, std::vector<int32_t>& out) const;

  BytesMap by_bytes_;
  std::unordered_map<std::string, int32_t> odd_tokens_;  // spellings outside the byte alphabet
  std::vector<std::string> texts_;                       // id -> spelling
  std::string bytes_arena_;
  std::vector<std::pair<uint32_t, uint32_t>> bytes_of_;  // id -> (offset, length) in bytes_arena_
  int32_t byte_ids_[256];
  std::vector<MergeSlot> merges_;
  size_t merge_mask_ = 0;
  int merge_shift_ = 64;
  bool ignore_merges_ = false;
  int32_t vocab_count_ = 0;
  // Ids may not exceed what a vocab of the file's size could hold: tables are indexed by id, and
  // one entry "x": 100000000 must not allocate gigabytes.
  size_t id_ceiling_ = 0;
  // What the errors about the table being read start with.
  std::string source_ = "tokenizer.json";
};

}  // namespace inkling::tok_detail
