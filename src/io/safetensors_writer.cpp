// Streaming safetensors writer: header first (all shapes are known), then each tensor's bytes
// as the filler produces them, so a multi-GB checkpoint never sits in memory at once.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"

namespace inkling {

size_t TensorSpec::nbytes() const {
  size_t count = 1;
  for (int64_t dim : shape) count *= size_t(dim);
  return count * dtype_size(dtype);
}

namespace {

std::string build_header(const std::vector<TensorSpec>& specs,
                         const std::map<std::string, std::string>& metadata) {
  // nlohmann's ordered_json keeps the file order visible to readers that print the header.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const TensorSpec& spec : specs) {
    uint64_t bytes = spec.nbytes();
    header[spec.name] = {{"dtype", std::string(dtype_name(spec.dtype))},
                         {"shape", spec.shape},
                         {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  // Pad with spaces to a multiple of 8 so the data section stays aligned (as the reference does).
  while ((text.size() + 8) % 8 != 0) text.push_back(' ');
  return text;
}

}  // namespace

void write_safetensors(const std::filesystem::path& path, const std::vector<TensorSpec>& specs,
                       const TensorFiller& fill, const std::map<std::string, std::string>& metadata) {
  std::string header = build_header(specs, metadata);
  std::filesystem::path partial = path;
  partial += ".partial";
  std::ofstream out(partial, std::ios::binary | std::ios::trunc);
  if (!out) throw Error("cannot create " + partial.string());
  uint64_t header_size = header.size();
  uint8_t prefix[8];
  for (int i = 0; i < 8; ++i) prefix[i] = uint8_t(header_size >> (8 * i));
  out.write(reinterpret_cast<const char*>(prefix), 8);
  out.write(header.data(), std::streamsize(header.size()));
  std::vector<uint8_t> buffer;
  for (const TensorSpec& spec : specs) {
    buffer.assign(spec.nbytes(), 0);
    fill(spec, std::span<uint8_t>(buffer));
    out.write(reinterpret_cast<const char*>(buffer.data()), std::streamsize(buffer.size()));
  }
  out.close();
  if (!out) throw Error("write failed for " + partial.string() + " (disk full?)");
  // Rename last so an interrupted write never leaves a plausible-looking file behind.
  std::filesystem::rename(partial, path);
}

void write_sharded(const std::filesystem::path& dir, const std::vector<TensorSpec>& specs,
                   const TensorFiller& fill, uint64_t max_shard_bytes,
                   const std::function<void(uint64_t, uint64_t)>& progress,
                   const std::map<std::string, std::string>& metadata) {
  std::filesystem::create_directories(dir);
  std::vector<std::vector<TensorSpec>> shards(1);
  uint64_t shard_bytes = 0;
  uint64_t total_bytes = 0;
  for (const TensorSpec& spec : specs) {
    uint64_t bytes = spec.nbytes();
    if (shard_bytes > 0 && shard_bytes + bytes > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(spec);
    shard_bytes += bytes;
    total_bytes += bytes;
  }
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  uint64_t done_bytes = 0;
  char name[64];
  for (size_t s = 0; s < shards.size(); ++s) {
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
    TensorFiller counting_fill = [&](const TensorSpec& spec, std::span<uint8_t> out) {
      fill(spec, out);
      done_bytes += out.size();
      if (progress) progress(done_bytes, total_bytes);
    };
    write_safetensors(dir / name, shards[s], counting_fill, metadata);
    for (const TensorSpec& spec : shards[s]) weight_map[spec.name] = name;
  }
  nlohmann::ordered_json index = {{"metadata", {{"total_size", total_bytes}}},
                                  {"weight_map", weight_map}};
  std::ofstream out(dir / "model.safetensors.index.json", std::ios::trunc);
  out << index.dump(2) << "\n";
  if (!out) throw Error("cannot write " + (dir / "model.safetensors.index.json").string());
}

}  // namespace inkling
