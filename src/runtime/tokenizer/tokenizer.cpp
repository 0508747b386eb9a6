#include "runtime/tokenizer/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/text_file.h"
#include "runtime/tokenizer/added_tokens.h"
#include "runtime/tokenizer/bpe.h"
#include "runtime/tokenizer/json_scan.h"
#include "runtime/tokenizer/pre_tokenizer.h"
#include "runtime/tokenizer/tokenizer_impl.h"
#include "runtime/tokenizer/utf8.h"
#include "tensor/error.h"

namespace inkling {

namespace {

using Json = nlohmann::json;
using tok_detail::AddedToken;

std::string read_file(const std::string& path) { return read_text_file(path, kMaxTokenizerFileBytes); }

// Every nlohmann exception, not only parse errors: a number like 1e999 is out_of_range.
Json parse_json(std::string_view text, const char* what) {
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {
    throw Error(std::string(what) + ": invalid JSON: " + e.what());
  }
}

AddedToken parse_added_token(const Json& entry, int64_t id, const char* where) {
  if (!entry.is_object()) throw Error(std::string(where) + ": an added token is not an object");
  const auto content = entry.find("content");
  if (content == entry.end() || !content->is_string())
    throw Error(std::string(where) + ": added token " + std::to_string(id) + " has no 'content' string");
  if (id < 0 || id > std::numeric_limits<int32_t>::max())
    throw Error(std::string(where) + ": added token '" + content->get<std::string>() + "' has an invalid id");
  AddedToken token;
  token.id = static_cast<int32_t>(id);
  token.content = content->get<std::string>();
  token.special = entry.value("special", false);
  token.lstrip = entry.value("lstrip", false);
  token.rstrip = entry.value("rstrip", false);
  token.single_word = entry.value("single_word", false);
  token.normalized = entry.value("normalized", !token.special);
  return token;
}

void check_decoder(const Json& decoder) {
  if (decoder.is_null()) return;
  const std::string type = decoder.is_object() ? decoder.value("type", std::string()) : std::string();
  if (type == "ByteLevel") return;
  if (type == "Sequence" && decoder.contains("decoders") && decoder["decoders"].is_array()) {
    for (const auto& child : decoder["decoders"]) check_decoder(child);
    return;
  }
  throw Error("tokenizer.json: unsupported decoder type '" + type + "' (only ByteLevel)");
}

// A token name from tokenizer_config.json: "text", {"content": "text"}, or null.
std::optional<std::string> config_token(const Json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  throw Error(std::string("tokenizer_config.json: '") + key + "' must be a string or {\"content\": ...}");
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json, std::string_view config_json) {
  try {
    return build(tokenizer_json, config_json);
  } catch (const nlohmann::json::exception& e) {
    // A field of the wrong type (e.g. "special": "yes"); nlohmann's message names the type.
    throw Error(std::string(config_json.empty() ? "tokenizer.json" : "tokenizer.json / tokenizer_config.json") +
                ": a field has the wrong type: " + e.what());
  } catch (const std::length_error& e) {
    throw Error(std::string("tokenizer.json: a table grew too large (") + e.what() + ")");
  }
}

Tokenizer Tokenizer::build(std::string_view tokenizer_json, std::string_view config_json) {
  // Stream the two big tables and DOM-parse only the rest (see json_scan.h).
  const auto tables = tok_detail::find_model_tables(tokenizer_json);
  Json root;
  if (tables) {
    const auto [first, second] = tables->vocab.begin < tables->merges.begin
                                     ? std::pair{tables->vocab, tables->merges}
                                     : std::pair{tables->merges, tables->vocab};
    std::string rest;
    rest.reserve(tokenizer_json.size() - (first.end - first.begin) - (second.end - second.begin) + 4);
    rest.append(tokenizer_json.substr(0, first.begin)).append("null");
    rest.append(tokenizer_json.substr(first.end, second.begin - first.end)).append("null");
    rest.append(tokenizer_json.substr(second.end));
    root = parse_json(rest, "tokenizer.json");
  } else {
    root = parse_json(tokenizer_json, "tokenizer.json");
  }
  if (!root.is_object()) throw Error("tokenizer.json: the top level is not an object");
  auto impl = std::make_unique<Impl>();

  if (auto it = root.find("normalizer"); it != root.end() && !it->is_null()) {
    const std::string type = it->is_object() ? it->value("type", std::string()) : std::string();
    throw Error("tokenizer.json: unsupported normalizer type '" + type + "'");
  }
  const auto model = root.find("model");
  if (model == root.end() || model->is_null()) throw Error("tokenizer.json: missing 'model'");
  if (tables) {
    const auto span = [&](tok_detail::JsonSpan x) { return tokenizer_json.substr(x.begin, x.end - x.begin); };
    impl->bpe = tok_detail::BpeModel::from_json(*model, span(tables->vocab), span(tables->merges));
  } else {
    impl->bpe = tok_detail::BpeModel::from_json(*model);
  }

  const auto pre = root.find("pre_tokenizer");
  impl->pre_tokenizer = tok_detail::PreTokenizer::from_json(pre == root.end() ? Json() : *pre);
  if (!impl->pre_tokenizer.has_byte_level())
    throw Error("tokenizer.json: no ByteLevel pre-tokenizer (only byte-level BPE is supported)");
  const auto decoder = root.find("decoder");
  check_decoder(decoder == root.end() ? Json() : *decoder);

  if (auto it = root.find("added_tokens"); it != root.end() && !it->is_null()) {
    if (!it->is_array()) throw Error("tokenizer.json: 'added_tokens' is not an array");
    for (const auto& entry : *it) {
      if (!entry.is_object() || !entry.contains("id") || !entry["id"].is_number_integer())
        throw Error("tokenizer.json: an added token has no integer 'id'");
      impl->added.push_back(parse_added_token(entry, entry["id"].get<int64_t>(), "tokenizer.json"));
    }
  }

  Json config = Json::object();
  if (!config_json.empty()) {
    config = parse_json(config_json, "tokenizer_config.json");
    if (!config.is_object()) throw Error("tokenizer_config.json: the top level is not an object");
    if (auto it = config.find("added_tokens_decoder"); it != config.end() && it->is_object()) {
      for (const auto& [key, entry] : it->items()) {
        int64_t id = -1;
        try {
          size_t used = 0;
          id = std::stoll(key, &used);
          if (used != key.size()) id = -1;
        } catch (const std::exception&) {
        }
        if (id < 0) throw Error("tokenizer_config.json: added_tokens_decoder key '" + key + "' is not an id");
        impl->added.push_back(parse_added_token(entry, id, "tokenizer_config.json"));
      }
    }
  }
  impl->finish_added();

  for (const auto& [key, slot] : {std::pair{"bos_token", &impl->bos}, std::pair{"eos_token", &impl->eos}}) {
    if (const auto name = config_token(config, key)) {
      *slot = impl->lookup(*name);
      if (!*slot) throw Error(std::string("tokenizer_config.json: ") + key + " '" + *name + "' is not a token");
    }
  }
  if (auto it = config.find("add_bos_token"); it != config.end() && it->is_boolean())
    impl->add_bos = it->get<bool>() && impl->bos.has_value();
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_file(const std::string& path) { return from_json(read_file(path)); }

Tokenizer Tokenizer::from_dir(const std::string& dir) {
  const std::filesystem::path base(dir);
  const auto config_path = base / "tokenizer_config.json";
  const std::string config = std::filesystem::exists(config_path) ? read_file(config_path.string()) : std::string();
  return from_json(read_file((base / "tokenizer.json").string()), config);
}

void require_utf8(std::string_view text, const std::string& what) {
  const size_t bad = tok_detail::first_invalid_utf8(text);
  if (bad != text.size()) throw Error(what + " is not valid UTF-8 (byte offset " + std::to_string(bad) + ")");
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
  const size_t bad = tok_detail::first_invalid_utf8(text);
  if (bad != text.size())
    throw Error("tokenizer: input is not valid UTF-8 (byte offset " + std::to_string(bad) + ")");
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 4 + 4);
  std::vector<tok_detail::Segment> segments;
  impl_->matcher.split(text, parse_special, segments);
  std::vector<std::string_view> pieces;
  tok_detail::PieceArena arena;
  for (const auto& segment : segments) {
    if (segment.id >= 0) {
      ids.push_back(segment.id);
      continue;
    }
    pieces.clear();
    impl_->pre_tokenizer.split(segment.text, pieces, arena);
    for (const std::string_view piece : pieces) impl_->bpe.encode_piece(piece, ids);
  }
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (const int32_t id : ids) {
    if (skip_special && is_special(id)) continue;
    bytes.append(impl_->bytes(id));
  }
  std::string text;
  text.reserve(bytes.size());
  tok_detail::append_utf8_lossy(text, bytes);
  return text;
}

std::optional<int32_t> Tokenizer::token_id(std::string_view token) const { return impl_->lookup(token); }

std::string Tokenizer::token_text(int32_t id) const {
  if (const AddedToken* token = impl_->added_token(id)) return token->content;
  const std::string_view text = impl_->bpe.token_text(id);
  if (text.empty()) throw Error("tokenizer: unknown token id " + std::to_string(id));
  return std::string(text);
}

std::string_view Tokenizer::token_bytes(int32_t id) const { return impl_->bytes(id); }

bool Tokenizer::is_special(int32_t id) const {
  const AddedToken* token = impl_->added_token(id);
  return token != nullptr && token->special;
}

int32_t Tokenizer::vocab_size() const { return impl_->id_limit; }
std::optional<int32_t> Tokenizer::bos_id() const { return impl_->bos; }
std::optional<int32_t> Tokenizer::eos_id() const { return impl_->eos; }
bool Tokenizer::add_bos_token() const { return impl_->add_bos; }

IncrementalDecoder::IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(&tokenizer), skip_special_(skip_special) {}

std::string IncrementalDecoder::push(int32_t id) {
  if (skip_special_ && tokenizer_->is_special(id)) return {};
  pending_.append(tokenizer_->token_bytes(id));
  const auto* p = reinterpret_cast<const unsigned char*>(pending_.data());
  const size_t n = pending_.size();
  // Everything up to an unfinished character at the very end is final; invalid
  // bytes in between can never become valid, so they are replaced now.
  size_t complete = n;
  size_t i = 0;
  while (i < n) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    const tok_detail::Utf8Step step = tok_detail::utf8_step(p + i, n - i);
    if (step.kind == tok_detail::Utf8Step::kTruncated) {
      complete = i;
      break;
    }
    i += step.len;
  }
  std::string out;
  tok_detail::append_utf8_lossy(out, std::string_view(pending_).substr(0, complete));
  pending_.erase(0, complete);
  return out;
}

std::string IncrementalDecoder::flush() {
  std::string out;
  tok_detail::append_utf8_lossy(out, pending_);
  pending_.clear();
  return out;
}

}  // namespace inkling
