// libFuzzer target for the safetensors reader.
//
// Built and run by tools/fuzz/run.sh (seed corpus: tools/fuzz/corpus/safetensors; `-seed_corpus=1 DIR`
// rewrites its seeds into DIR).
//
// Every input must either parse into entries whose views lie inside the image, or throw
// inkling::Error; anything else (a crash, a sanitizer report, another exception type) is a bug.
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "fuzz_util.h"

namespace {

std::vector<uint8_t> image(const std::string& header, size_t data_len) {
  std::vector<uint8_t> out(8);
  for (int i = 0; i < 8; ++i) out[i] = uint8_t(uint64_t(header.size()) >> (8 * i));
  out.insert(out.end(), header.begin(), header.end());
  for (size_t i = 0; i < data_len; ++i) out.push_back(uint8_t(i));
  return out;
}

// `-seed_corpus=1 DIR`: write a few valid files into DIR to start from.
void write_seeds(const char* dir) {
  const std::pair<std::string, size_t> seeds[] = {
      {"{}", 0},
      {R"({"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]},)"
       R"("b":{"dtype":"F32","shape":[],"data_offsets":[12,16]}})", 16},
      {R"({"w":{"dtype":"F8_E4M3","shape":[4,4],"data_offsets":[0,16]},)"
       R"("z":{"dtype":"I64","shape":[0],"data_offsets":[16,16]}})", 16},
      {R"({"u":{"dtype":"U32","shape":[1],"data_offsets":[0,4]}}    )", 4},
  };
  int n = 0;
  for (const auto& [header, data_len] : seeds) {
    std::vector<uint8_t> bytes = image(header, data_len);
    std::ofstream out(std::string(dir) + "/seed" + std::to_string(n++), std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  inkling::fuzz::write_seeds_if_asked(*argc, *argv, write_seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  try {
    auto file = inkling::SafetensorsFile::from_bytes(std::move(bytes), "fuzz.safetensors");
    uint64_t covered = 0;
    for (const inkling::TensorEntry& entry : file.entries()) {
      if (entry.begin != covered || entry.end < entry.begin) std::abort();  // must tile
      covered = entry.end;
      inkling::TensorView view = file.get(entry.name);
      if (view.nbytes != entry.end - entry.begin) std::abort();
      if (uint64_t(view.numel()) * inkling::dtype_size(view.dtype) != view.nbytes) std::abort();
      volatile uint8_t sink = 0;
      for (size_t i = 0; i < view.nbytes; ++i) sink = sink ^ view.data[i];  // ASan checks bounds
    }
  } catch (const inkling::Error&) {
  }
  return 0;
}
