// A checkpoint directory: one model.safetensors, index-listed shards, or loose .safetensors files.
#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <system_error>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "io/text_file.h"

namespace inkling {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";

std::string in_quotes(std::string_view text) {
  std::string out = "\"";
  out += text;
  out += '"';
  return out;
}

bool is_regular(const fs::path& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

// A shard name from the index must be a plain relative path that stays inside the directory.
bool is_safe_shard_name(const std::string& name) {
  if (name.empty()) return false;
  fs::path path(name);
  if (path.is_absolute() || path.has_root_name()) return false;
  for (const fs::path& part : path)
    if (part == "..") return false;
  return true;
}

}  // namespace

TensorStore TensorStore::open_dir(const fs::path& dir) {
  TensorStore store;
  store.dir_ = dir;
  const std::string dir_label = dir.string();
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw Error(dir_label + ": not a directory");

  const fs::path index_path = dir / kIndexName;
  if (fs::exists(index_path, ec)) {
    const std::string index_label = index_path.string();
    const std::string text = read_text_file(index_path, kMaxTokenizerFileBytes, "a safetensors index");
    json index;
    try {
      index = json::parse(text);
    } catch (const json::exception& error) {
      std::string detail = error.what();
      size_t at = detail.find("] ");
      if (at != std::string::npos) detail = detail.substr(at + 2);
      throw Error(index_label + ": not valid JSON: " + detail);
    }
    if (!index.is_object()) throw Error(index_label + ": not a JSON object");
    auto weight_map_it = index.find("weight_map");
    if (weight_map_it == index.end()) throw Error(index_label + ": missing \"weight_map\"");
    if (!weight_map_it->is_object()) {
      throw Error(index_label + ": \"weight_map\" must be an object of tensor name -> shard file");
    }
    // shard file -> tensors the index puts there (sorted for deterministic errors)
    std::map<std::string, std::vector<std::string>> shard_tensors;
    for (auto& [tensor, shard] : weight_map_it->items()) {
      if (!shard.is_string()) {
        throw Error(index_label + ": \"weight_map\" entry for tensor " + in_quotes(tensor) +
                    " must be a shard file name (string), not a " + shard.type_name());
      }
      const std::string shard_name = shard.get<std::string>();
      if (!is_safe_shard_name(shard_name)) {
        throw Error(index_label + ": \"weight_map\" maps tensor " + in_quotes(tensor) +
                    " to shard " + in_quotes(shard_name) +
                    ", which is not a relative file name inside the directory");
      }
      shard_tensors[shard_name].push_back(tensor);
    }
    const json& weight_map = *weight_map_it;
    for (const auto& [shard_name, tensors] : shard_tensors) {
      const fs::path shard_path = dir / shard_name;
      if (!is_regular(shard_path)) {
        std::string holding = "tensor " + in_quotes(tensors.front());
        if (tensors.size() > 1) holding += " and " + std::to_string(tensors.size() - 1) + " more";
        throw Error(index_label + ": shard " + in_quotes(shard_name) + " (holding " + holding +
                    ") is missing from " + dir_label);
      }
      auto file = std::make_unique<SafetensorsFile>(SafetensorsFile::open(shard_path));
      for (const std::string& tensor : tensors) {
        if (!file->contains(tensor)) {
          throw Error(index_label + ": tensor " + in_quotes(tensor) + " is listed in shard " +
                      in_quotes(shard_name) + " but that shard does not contain it");
        }
      }
      for (const TensorEntry& entry : file->entries()) {
        auto listed = weight_map.find(entry.name);
        if (listed == weight_map.end()) {
          throw Error(index_label + ": shard " + in_quotes(shard_name) + " contains tensor " +
                      in_quotes(entry.name) + ", which the index does not list");
        }
        if (listed->get<std::string>() != shard_name) {
          throw Error(index_label + ": tensor " + in_quotes(entry.name) + " is found in shard " +
                      in_quotes(shard_name) + " but the index maps it to " +
                      in_quotes(listed->get<std::string>()) +
                      " (a tensor must live in exactly one shard)");
        }
      }
      const size_t file_index = store.files_.size();
      for (const std::string& tensor : tensors) store.tensor_file_.emplace(tensor, file_index);
      store.files_.push_back(std::move(file));
    }
    return store;
  }

  std::vector<fs::path> paths;
  if (is_regular(dir / kSingleName)) {
    paths.push_back(dir / kSingleName);
  } else {
    for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
      if (entry.path().extension() == ".safetensors" && is_regular(entry.path()))
        paths.push_back(entry.path());
    }
    if (ec) throw Error(dir_label + ": cannot list directory: " + ec.message());
    std::sort(paths.begin(), paths.end());
  }
  if (paths.empty()) throw Error("no .safetensors files in " + dir_label);
  for (const fs::path& path : paths) {
    auto file = std::make_unique<SafetensorsFile>(SafetensorsFile::open(path));
    const size_t file_index = store.files_.size();
    for (const TensorEntry& entry : file->entries()) {
      auto [it, inserted] = store.tensor_file_.emplace(entry.name, file_index);
      if (!inserted) {
        throw Error(dir_label + ": tensor " + in_quotes(entry.name) + " appears in both " +
                    store.files_[it->second]->path().filename().string() + " and " +
                    path.filename().string());
      }
    }
    store.files_.push_back(std::move(file));
  }
  return store;
}

std::vector<std::string> TensorStore::names() const {
  std::vector<std::string> out;
  out.reserve(tensor_file_.size());
  for (const auto& [name, file_index] : tensor_file_) out.push_back(name);
  return out;  // std::map iteration is already sorted
}

bool TensorStore::contains(std::string_view name) const {
  return tensor_file_.find(name) != tensor_file_.end();
}

std::optional<TensorView> TensorStore::find(std::string_view name) const {
  auto it = tensor_file_.find(name);
  if (it == tensor_file_.end()) return std::nullopt;
  std::optional<TensorView> view = files_[it->second]->find(name);
  if (auto copy = resident_.find(name); copy != resident_.end()) view->data = copy->second;
  return view;
}

uint64_t TensorStore::make_resident(const std::vector<std::string>& names,
                                    const std::function<void(uint64_t, uint64_t)>& progress) {
  return make_resident(names, {}, progress);
}

uint64_t TensorStore::make_resident(const std::vector<std::string>& names, const std::vector<RowPair>& row_pairs,
                                    const std::function<void(uint64_t, uint64_t)>& progress) {
  struct Pending {
    size_t file;
    const uint8_t* at;  // position in the file, for reading in order
    std::string name;
    uint64_t bytes;  // of the copy (both tensors, for a pair)
    uint8_t* copy = nullptr;
    // A RowPair: `name` is its first tensor, its rows are row_bytes long.
    std::string second;
    size_t second_file = 0;
    uint64_t row_bytes = 0;
  };
  std::vector<Pending> pending;
  std::set<std::string_view> seen;
  uint64_t total = 0, capacity = 0;
  auto tensor_file = [&](const std::string& name) {
    auto it = tensor_file_.find(name);
    if (it == tensor_file_.end()) throw Error("no tensor " + in_quotes(name) + " in checkpoint " + dir_.string());
    return it->second;
  };
  auto add = [&](Pending item) {
    total += item.bytes;
    capacity += (item.bytes + 63) / 64 * 64;  // ResidentArena aligns every copy to 64 bytes
    pending.push_back(std::move(item));
  };
  for (const RowPair& pair : row_pairs) {
    auto it = interleaved_.find(pair.first);
    if (it != interleaved_.end() && !it->second.odd && it->second.partner == pair.second) continue;  // copied already
    if (pair.first == pair.second)
      throw Error("make_resident: tensor " + in_quotes(pair.first) + " cannot be interleaved with itself");
    for (const std::string* name : {&pair.first, &pair.second})
      if (resident_.count(*name) || interleaved_.count(*name) || !seen.insert(*name).second)
        throw Error("make_resident: tensor " + in_quotes(*name) + " is in more than one copy");
    const size_t first_file = tensor_file(pair.first), second_file = tensor_file(pair.second);
    const TensorView first = files_[first_file]->get(pair.first), second = files_[second_file]->get(pair.second);
    if (first.dtype != second.dtype || first.shape != second.shape || first.shape.empty() || first.nbytes == 0)
      throw Error("make_resident: cannot interleave the rows of " + in_quotes(pair.first) + " (" +
                  std::string(dtype_name(first.dtype)) + " " + shape_to_string(first.shape) + ") and " +
                  in_quotes(pair.second) + " (" + std::string(dtype_name(second.dtype)) + " " + shape_to_string(second.shape) +
                  "): they need one dtype and one non-empty shape");
    const uint64_t row_bytes = uint64_t(first.shape.back()) * dtype_size(first.dtype);
    add({first_file, first.data, pair.first, 2 * first.nbytes, nullptr, pair.second, second_file, row_bytes});
  }
  for (const std::string& name : names) {
    if (resident_.count(name) || interleaved_.count(name) || !seen.insert(name).second) continue;
    const size_t file = tensor_file(name);
    const TensorView view = files_[file]->get(name);
    add({file, view.data, name, view.nbytes, nullptr, {}, 0, 0});
  }
  std::sort(pending.begin(), pending.end(),
            [](const Pending& a, const Pending& b) { return a.file != b.file ? a.file < b.file : a.at < b.at; });
  if (pending.empty()) return 0;
  if (arena_) throw Error("make_resident: the tensors of " + dir_.string() + " were already copied once");
  auto arena = std::make_unique<ResidentArena>(capacity);
  for (Pending& item : pending) item.copy = arena->allocate(item.bytes);

  // Pieces read by several threads (copy_pieces_in_parallel); a pair's pieces are whole rows,
  // read into place.
  constexpr uint64_t kPiece = kResidentCopyPieceBytes;
  struct Piece {
    const Pending* item;
    uint64_t begin, count;  // bytes of the tensor; for a pair, of each of its two tensors
  };
  std::vector<Piece> pieces;
  for (const Pending& item : pending) {
    if (item.row_bytes) {
      const uint64_t half = item.bytes / 2, step = std::max<uint64_t>(1, kPiece / 2 / item.row_bytes) * item.row_bytes;
      for (uint64_t begin = 0; begin < half; begin += step) pieces.push_back({&item, begin, std::min(step, half - begin)});
      continue;
    }
    for (uint64_t begin = 0; begin < item.bytes || (begin == 0 && item.bytes == 0); begin += kPiece)
      pieces.push_back({&item, begin, std::min(kPiece, item.bytes - begin)});
  }
  auto copy_piece = [&](size_t index) {
    const Piece& piece = pieces[index];
    const Pending& item = *piece.item;
    if (!item.row_bytes) {
      files_[item.file]->read_tensor(item.name, piece.begin, piece.count, item.copy + piece.begin);
      return piece.count;
    }
    const uint64_t row = piece.begin / item.row_bytes, rows = piece.count / item.row_bytes;
    uint8_t* out = item.copy + 2 * piece.begin;
    files_[item.file]->read_tensor_rows(item.name, row, rows, item.row_bytes, out, 2 * item.row_bytes);
    files_[item.second_file]->read_tensor_rows(item.second, row, rows, item.row_bytes, out + item.row_bytes,
                                               2 * item.row_bytes);
    return 2 * piece.count;
  };
  const uint64_t done = copy_pieces_in_parallel(pieces.size(), total, copy_piece, progress);
  for (const Pending& item : pending) {
    if (item.row_bytes) {
      interleaved_.emplace(item.name, InterleavedRows{item.copy, item.row_bytes, false, item.second});
      interleaved_.emplace(item.second, InterleavedRows{item.copy, item.row_bytes, true, item.name});
    } else {
      resident_.emplace(item.name, item.copy);
    }
  }
  arena_ = std::move(arena);
  return done;
}

std::optional<TensorStore::InterleavedRows> TensorStore::interleaved_rows(std::string_view name) const {
  auto it = interleaved_.find(name);
  if (it == interleaved_.end()) return std::nullopt;
  return it->second;
}

bool TensorStore::read_ahead(std::string_view name) const {
  auto it = tensor_file_.find(name);
  if (it == tensor_file_.end()) throw Error("no tensor " + in_quotes(name) + " in checkpoint " + dir_.string());
  if (is_resident(name)) return false;
  return files_[it->second]->read_ahead(name);
}

uint64_t TensorStore::resident_bytes() const { return arena_ ? arena_->used() : 0; }

std::span<const uint8_t> TensorStore::resident_memory() const {
  if (!arena_) return {};
  return {arena_->data(), size_t(arena_->used())};
}

uint64_t TensorStore::resident_huge_page_bytes() const { return arena_ ? arena_->huge_page_bytes() : 0; }

TensorView TensorStore::get(std::string_view name) const {
  std::optional<TensorView> view = find(name);
  if (!view) throw Error("no tensor " + in_quotes(name) + " in checkpoint " + dir_.string());
  return *view;
}

uint64_t TensorStore::total_file_bytes() const {
  uint64_t total = 0;
  for (const auto& file : files_) total += file->file_bytes();
  return total;
}

}  // namespace inkling
