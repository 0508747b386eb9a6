// Test helper for tests/gguf/test_dequantize.py and test_quantize.py: dequantizes ggml blocks read
// from stdin with the engine's scalar references and writes the floats to stdout (or, with
// --quantize, encodes floats into blocks), so Python can compare them with another
// implementation bit for bit.
//
//   dequantize_rows TYPE ELEMENTS < blocks > floats     (TYPE as ggml names it: Q4_K, IQ2_XXS, ...)
//   dequantize_rows --quantize TYPE ELEMENTS < floats > blocks
//
// Blocks are ELEMENTS / block_elements blocks; floats ELEMENTS little-endian float32.
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "tensor/ggml_quantize.h"
#include "tensor/ggml_types.h"

int main(int argc, char** argv) {
  using namespace inkling;
  const bool quantize = argc == 4 && std::string(argv[1]) == "--quantize";
  if (quantize) ++argv, --argc;
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s [--quantize] TYPE ELEMENTS < input > output\n", argv[0]);
    return 2;
  }
  std::optional<GgmlType> type;
  for (uint32_t code = 0; code < 64 && !type; ++code)
    if (auto candidate = ggml_type_from_code(code); candidate && ggml_type_name(*candidate) == argv[1]) type = candidate;
  if (!type || !(quantize ? ggml_quantizable(*type) : ggml_type_info(*type).dequantizable)) {
    std::fprintf(stderr, "no %s for type %s\n", quantize ? "quantizer" : "dequantizer", argv[1]);
    return 2;
  }
  const int64_t elements = std::strtoll(argv[2], nullptr, 10);
  const std::optional<uint64_t> bytes = ggml_row_bytes(*type, elements);
  if (elements <= 0 || !bytes) {
    std::fprintf(stderr, "%s elements are not a whole number of %s blocks\n", argv[2], argv[1]);
    return 2;
  }
  std::vector<uint8_t> blocks(static_cast<size_t>(*bytes));
  if (quantize) {
    std::vector<float> in(static_cast<size_t>(elements));
    if (std::fread(in.data(), sizeof(float), in.size(), stdin) != in.size()) {
      std::fprintf(stderr, "expected %lld floats on stdin\n", static_cast<long long>(elements));
      return 2;
    }
    quantize_ggml_row(*type, in.data(), blocks.data(), elements);
    return std::fwrite(blocks.data(), 1, blocks.size(), stdout) == blocks.size() ? 0 : 1;
  }
  if (std::fread(blocks.data(), 1, blocks.size(), stdin) != blocks.size()) {
    std::fprintf(stderr, "expected %llu bytes of blocks on stdin\n", static_cast<unsigned long long>(*bytes));
    return 2;
  }
  std::vector<float> out(static_cast<size_t>(elements));
  dequantize_ggml_row(*type, blocks.data(), out.data(), elements);
  return std::fwrite(out.data(), sizeof(float), out.size(), stdout) == out.size() ? 0 : 1;
}
