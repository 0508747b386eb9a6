#include "runtime/tokenizer/bpe.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <queue>

#include "runtime/tokenizer/json_scan.h"
#include "runtime/tokenizer/utf8.h"
#include "tensor/error.h"

namespace inkling::tok_detail {

namespace {

using Json = nlohmann::json;
constexpr uint32_t kNoRank = std::numeric_limits<uint32_t>::max();

// Byte-level alphabet: printable Latin-1 bytes stand for themselves, the other
// 68 bytes take code points 256.. in byte order.
struct ByteAlphabet {
  uint32_t to_char[256];
  int16_t to_byte[324];
  ByteAlphabet() {
    std::fill(std::begin(to_byte), std::end(to_byte), int16_t{-1});
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      to_char[b] = printable ? static_cast<uint32_t>(b) : next++;
      to_byte[to_char[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteAlphabet& alphabet() {
  static const ByteAlphabet table;
  return table;
}

uint64_t hash_bytes(const char* p, size_t n) {
  // A short-string hash: tokens are mostly under 16 bytes.
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xC2B2AE3D27D4EB4Full);
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 32;
    p += 8;
    n -= 8;
  }
  uint64_t w = 0;
  std::memcpy(&w, p, n);
  h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
  h ^= h >> 29;
  return h;
}

std::string describe(std::string_view text) {
  return "'" + std::string(text.substr(0, 60)) + (text.size() > 60 ? "...'" : "'");
}

}  // namespace

uint32_t byte_to_char(uint8_t byte) { return alphabet().to_char[byte]; }

int char_to_byte(uint32_t cp) { return cp < 324 ? alphabet().to_byte[cp] : -1; }

std::optional<std::string> byte_level_to_bytes(std::string_view text) {
  std::string bytes;
  bytes.reserve(text.size());
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  size_t i = 0;
  while (i < text.size()) {
    const Utf8Step step = utf8_step(p + i, text.size() - i);
    if (step.kind != Utf8Step::kValid) return std::nullopt;
    size_t len;
    const int byte = char_to_byte(decode_utf8(p + i, len));
    if (byte < 0) return std::nullopt;
    bytes.push_back(static_cast<char>(byte));
    i += len;
  }
  return bytes;
}

void BytesMap::reserve(size_t count) {
  size_t size = 16;
  while (size < count * 2) size <<= 1;
  slots_.assign(size, Slot{});
  mask_ = size - 1;
}

bool BytesMap::insert(std::string_view key, int32_t id) {
  if (slots_.empty() || (count_ + 1) * 2 > slots_.size()) {
    // Grow and rehash (only when reserve() was too small).
    std::vector<Slot> old = std::move(slots_);
    reserve(std::max<size_t>(count_ + 1, old.size()));
    for (const Slot& s : old) {
      if (s.id < 0) continue;
      size_t slot = hash_bytes(arena_.data() + s.offset, s.length) & mask_;
      while (slots_[slot].id >= 0) slot = (slot + 1) & mask_;
      slots_[slot] = s;
    }
  }
  size_t slot = hash_bytes(key.data(), key.size()) & mask_;
  while (slots_[slot].id >= 0) {
    if (key_of_slot(slot) == key) return false;
    slot = (slot + 1) & mask_;
  }
  slots_[slot] = Slot{static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(key.size()), id};
  arena_.append(key);
  ++count_;
  return true;
}

int32_t BytesMap::find(std::string_view key) const {
  if (slots_.empty()) return -1;
  size_t slot = hash_bytes(key.data(), key.size()) & mask_;
  for (;;) {
    const Slot& s = slots_[slot];
    if (s.id < 0) return -1;
    if (s.length == key.size() && std::memcmp(arena_.data() + s.offset, key.data(), key.size()) == 0) return s.id;
    slot = (slot + 1) & mask_;
  }
}

std::string_view BytesMap::key_of_slot(size_t slot) const {
  return std::string_view(arena_).substr(slots_[slot].offset, slots_[slot].length);
}

void BpeModel::insert_merge(int32_t left, int32_t right, uint32_t rank, int32_t merged) {
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  size_t slot = static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> merge_shift_);
  while (merges_[slot].merged >= 0) {
    if (merges_[slot].key == key) return;  // a repeated merge keeps its first (lowest) rank
    slot = (slot + 1) & merge_mask_;
  }
  merges_[slot] = MergeSlot{key, rank, merged};
}

void BpeModel::check_options(const Json& model) {
  if (!model.is_object()) throw Error("tokenizer.json: no 'model' object");
  const std::string type = model.value("type", std::string("BPE"));
  if (type != "BPE") throw Error("tokenizer.json: unsupported model type '" + type + "' (only BPE)");
  for (const char* field : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (auto it = model.find(field); it != model.end() && !it->is_null() && !(it->is_string() && it->empty()))
      throw Error(std::string("tokenizer.json: BPE '") + field + "' is not supported");
  }
  if (auto it = model.find("dropout"); it != model.end() && it->is_number() && it->get<double>() > 0.0)
    throw Error("tokenizer.json: BPE dropout is not supported");
  ignore_merges_ = model.value("ignore_merges", false);
}

void BpeModel::add_token(std::string_view text, long long id) {
  if (id < 0 || id > std::numeric_limits<int32_t>::max())
    throw Error(source_ + ": vocab entry " + describe(text) + " has an invalid id");
  if (static_cast<size_t>(id) >= id_ceiling_)
    throw Error(source_ + ": vocab entry " + describe(text) + " has id " + std::to_string(id) +
                ", out of range for a vocab of at most " + std::to_string(id_ceiling_) + " ids");
  if (static_cast<size_t>(id) >= texts_.size()) {
    texts_.resize(static_cast<size_t>(id) + 1);
    bytes_of_.resize(static_cast<size_t>(id) + 1, {0, 0});
  }
  if (!texts_[id].empty()) throw Error(source_ + ": vocab id " + std::to_string(id) + " is used twice");
  if (text.empty()) throw Error(source_ + ": vocab has an empty token");
  texts_[id] = text;
  ++vocab_count_;
  const std::optional<std::string> bytes = byte_level_to_bytes(text);
  // The ByteLevel decoder gives a token outside the alphabet its UTF-8 text unchanged.
  const std::string_view raw = bytes ? std::string_view(*bytes) : text;
  bytes_of_[id] = {static_cast<uint32_t>(bytes_arena_.size()), static_cast<uint32_t>(raw.size())};
  bytes_arena_.append(raw);
  if (bytes) {
    if (!by_bytes_.insert(*bytes, static_cast<int32_t>(id)))
      throw Error(source_ + ": vocab token " + describe(text) + " appears twice");
  } else {
    odd_tokens_.emplace(std::string(text), static_cast<int32_t>(id));
  }
}

void BpeModel::finish_vocab() {
  if (vocab_count_ == 0) throw Error(source_ + ": the vocabulary has no entries");
  // Real vocabs number their entries 0..n-1; a few holes are tolerated, a sparse table is not.
  if (static_cast<size_t>(id_limit()) > static_cast<size_t>(vocab_count_) + kIdHoleAllowance)
    throw Error(source_ + ": vocab ids run to " + std::to_string(id_limit() - 1) + " but it has only " +
                std::to_string(vocab_count_) + " entries");
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    byte_ids_[b] = by_bytes_.find(std::string_view(&c, 1));
  }
}

void BpeModel::add_merge(std::string_view left, std::string_view right, size_t rank) {
  const auto left_id = token_id(left);
  const auto right_id = token_id(right);
  std::string joined;
  joined.reserve(left.size() + right.size());
  joined.append(left).append(right);
  const auto merged_id = token_id(joined);
  if (!left_id || !right_id || !merged_id) {
    const std::string_view missing = !left_id ? left : !right_id ? right : std::string_view(joined);
    throw Error(source_ + ": merge #" + std::to_string(rank) + " uses token " + describe(missing) +
                " which is not in the vocab");
  }
  pending_merges_.push_back({*left_id, *right_id, *merged_id});
}

void BpeModel::add_merge_line(std::string_view line, size_t rank) {
  const size_t space = line.find(' ');
  if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos)
    throw Error(source_ + ": merge #" + std::to_string(rank) + " " + describe(line) +
                " is not two tokens separated by one space");
  add_merge(line.substr(0, space), line.substr(space + 1), rank);
}

void BpeModel::build_merge_table() {
  size_t table = 16;
  int bits = 4;
  while (table < pending_merges_.size() * 5 / 2 + 1) {
    table <<= 1;
    ++bits;
  }
  merges_.assign(table, MergeSlot{});
  merge_mask_ = table - 1;
  merge_shift_ = 64 - bits;
  for (size_t rank = 0; rank < pending_merges_.size(); ++rank) {
    const PendingMerge& m = pending_merges_[rank];
    insert_merge(m.left, m.right, static_cast<uint32_t>(rank), m.merged);
  }
  pending_merges_ = {};
}

BpeModel BpeModel::from_json(const Json& model) {
  BpeModel bpe;
  bpe.check_options(model);
  const auto vocab = model.find("vocab");
  if (vocab == model.end() || !vocab->is_object()) throw Error("tokenizer.json: model has no 'vocab' object");
  bpe.by_bytes_.reserve(vocab->size());
  bpe.id_ceiling_ = vocab->size() + kIdHoleAllowance;
  for (const auto& [text, id] : vocab->items()) {
    if (!id.is_number_integer()) throw Error("tokenizer.json: vocab entry " + describe(text) + " has an invalid id");
    bpe.add_token(text, id.get<long long>());
  }
  bpe.finish_vocab();
  const auto merges = model.find("merges");
  if (merges == model.end() || !merges->is_array()) throw Error("tokenizer.json: model has no 'merges' array");
  size_t rank = 0;
  for (const auto& merge : *merges) {
    if (merge.is_string()) {
      bpe.add_merge_line(merge.get_ref<const std::string&>(), rank);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
      bpe.add_merge(merge[0].get_ref<const std::string&>(), merge[1].get_ref<const std::string&>(), rank);
    } else {
      throw Error("tokenizer.json: merge #" + std::to_string(rank) + " is neither \"a b\" nor [\"a\", \"b\"]");
    }
    ++rank;
  }
  bpe.build_merge_table();
  return bpe;
}

BpeModel BpeModel::from_json(const Json& model, std::string_view vocab_json, std::string_view merges_json) {
  BpeModel bpe;
  bpe.check_options(model);
  // An entry takes at least ~8 characters of JSON ("ab": 12,); over-reserving is cheap.
  bpe.by_bytes_.reserve(vocab_json.size() / 24 + 16);
  // An entry takes at least 6 characters ("a":1,): the file's size bounds its count.
  bpe.id_ceiling_ = vocab_json.size() / 6 + kIdHoleAllowance;
  scan_vocab(vocab_json, [&](std::string_view text, long long id) { bpe.add_token(text, id); });
  bpe.finish_vocab();
  scan_merges(merges_json,
              [&](std::string_view left, std::string_view right, size_t rank) { bpe.add_merge(left, right, rank); });
  bpe.build_merge_table();
  return bpe;
}

BpeModel BpeModel::from_tables(std::span<const std::pair<int32_t, std::string_view>> tokens,
                               std::span<const std::string_view> merges, bool ignore_merges,
                               const std::string& tokens_source, const std::string& merges_source) {
  BpeModel bpe;
  bpe.ignore_merges_ = ignore_merges;
  bpe.source_ = tokens_source;
  bpe.by_bytes_.reserve(tokens.size());
  // The ids are positions in the table, so the table's length bounds them.
  int64_t largest = -1;
  for (const auto& [id, text] : tokens) largest = std::max<int64_t>(largest, id);
  bpe.id_ceiling_ = size_t(largest + 1);
  for (const auto& [id, text] : tokens) bpe.add_token(text, id);
  bpe.finish_vocab();
  bpe.source_ = merges_source;
  for (size_t rank = 0; rank < merges.size(); ++rank) bpe.add_merge_line(merges[rank], rank);
  bpe.build_merge_table();
  return bpe;
}

std::optional<int32_t> BpeModel::token_id(std::string_view token) const {
  const std::optional<std::string> bytes = byte_level_to_bytes(token);
  if (bytes) {
    const int32_t id = by_bytes_.find(*bytes);
    if (id >= 0) return id;
    return std::nullopt;
  }
  const auto it = odd_tokens_.find(std::string(token));
  if (it == odd_tokens_.end()) return std::nullopt;
  return it->second;
}

std::string_view BpeModel::token_text(int32_t id) const {
  if (id < 0 || id >= id_limit()) return {};
  return texts_[id];
}

std::string_view BpeModel::token_bytes(int32_t id) const {
  if (id < 0 || id >= id_limit()) return {};
  return std::string_view(bytes_arena_).substr(bytes_of_[id].first, bytes_of_[id].second);
}

void BpeModel::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (piece.size() == 1) {
    const int32_t id = byte_ids_[static_cast<unsigned char>(piece[0])];
    if (id >= 0) out.push_back(id);
    return;
  }
  if (ignore_merges_) {
    const int32_t id = by_bytes_.find(piece);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  constexpr size_t kSmall = 128;
  int32_t stack_ids[kSmall];
  std::vector<int32_t> heap_ids;
  int32_t* ids = stack_ids;
  if (piece.size() > kSmall) {
    heap_ids.resize(piece.size());
    ids = heap_ids.data();
  }
  size_t n = 0;
  for (const char c : piece) {
    // Without an unknown token HF drops characters the vocab lacks; so do we.
    const int32_t id = byte_ids_[static_cast<unsigned char>(c)];
    if (id >= 0) ids[n++] = id;
  }
  if (n <= kSmall) {
    merge_small(ids, n, out);
  } else {
    merge_large(ids, n, out);
  }
}

// Quadratic in the piece length but allocation-free; pieces are short.
void BpeModel::merge_small(const int32_t* initial, size_t n, std::vector<int32_t>& out) const {
  int32_t ids[128];
  uint32_t ranks[128];
  int32_t merged[128];
  std::copy(initial, initial + n, ids);
  for (size_t i = 0; i + 1 < n; ++i) {
    const MergeSlot m = find_merge(ids[i], ids[i + 1]);
    ranks[i] = m.merged >= 0 ? m.rank : kNoRank;
    merged[i] = m.merged;
  }
  while (n > 1) {
    size_t best = 0;
    uint32_t best_rank = ranks[0];
    for (size_t i = 1; i + 1 < n; ++i) {
      if (ranks[i] < best_rank) {
        best_rank = ranks[i];
        best = i;
      }
    }
    if (best_rank == kNoRank) break;
    ids[best] = merged[best];
    // Remove symbol best+1 and the pair that started there.
    for (size_t i = best + 1; i + 1 < n; ++i) {
      ids[i] = ids[i + 1];
      ranks[i] = ranks[i + 1];
      merged[i] = merged[i + 1];
    }
    --n;
    if (best > 0) {
      const MergeSlot m = find_merge(ids[best - 1], ids[best]);
      ranks[best - 1] = m.merged >= 0 ? m.rank : kNoRank;
      merged[best - 1] = m.merged;
    }
    if (best + 1 < n) {
      const MergeSlot m = find_merge(ids[best], ids[best + 1]);
      ranks[best] = m.merged >= 0 ? m.rank : kNoRank;
      merged[best] = m.merged;
    }
  }
  out.insert(out.end(), ids, ids + n);
}

// Linked symbols and a priority queue of candidate pairs: O(n log n) for long pieces.
void BpeModel::merge_large(const int32_t* initial, size_t n, std::vector<int32_t>& out) const {
  struct Candidate {
    uint32_t rank;
    uint32_t pos;
    int32_t left;
    int32_t right;
    bool operator>(const Candidate& other) const {
      return rank != other.rank ? rank > other.rank : pos > other.pos;
    }
  };
  std::vector<int32_t> ids(initial, initial + n);
  std::vector<int32_t> prev(n), next(n);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto push = [&](int32_t pos) {
    if (pos < 0 || next[pos] < 0) return;
    const MergeSlot m = find_merge(ids[pos], ids[next[pos]]);
    if (m.merged >= 0) queue.push({m.rank, static_cast<uint32_t>(pos), ids[pos], ids[next[pos]]});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int32_t>(i));
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    const int32_t pos = static_cast<int32_t>(c.pos);
    const int32_t right = next[pos];
    // Stale entries: the symbol was merged away or either side changed since.
    if (ids[pos] != c.left || right < 0 || ids[right] != c.right) continue;
    ids[pos] = find_merge(c.left, c.right).merged;
    ids[right] = -1;
    next[pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = pos;
    push(prev[pos]);
    push(pos);
  }
  for (int32_t i = 0; i >= 0; i = next[i]) out.push_back(ids[i]);
}

}  // namespace inkling::tok_detail
