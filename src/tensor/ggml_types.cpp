// Block geometry of the ggml types (ggml.c's type_traits table, restated from the block layouts).
#include "tensor/ggml_types.h"

#include <array>

namespace inkling {
namespace {

constexpr int64_t kSuperBlock = 256;  // QK_K: the "K" and "IQ" types' block

struct Entry {
  uint32_t code;
  GgmlTypeInfo info;
};

// name, elements per block, bytes per block, dequantizable. The byte counts spell out each
// block's fields so the layouts in ggml_dequantize.cpp can be checked against them.
constexpr std::array kTypes = {
    Entry{0, {"F32", 1, 4, true}},
    Entry{1, {"F16", 1, 2, true}},
    Entry{2, {"Q4_0", 32, 2 + 16, true}},
    Entry{3, {"Q4_1", 32, 2 + 2 + 16, true}},
    Entry{6, {"Q5_0", 32, 2 + 4 + 16, true}},
    Entry{7, {"Q5_1", 32, 2 + 2 + 4 + 16, true}},
    Entry{8, {"Q8_0", 32, 2 + 32, true}},
    Entry{9, {"Q8_1", 32, 4 + 4 + 32, false}},
    Entry{10, {"Q2_K", kSuperBlock, 2 + 2 + kSuperBlock / 16 + kSuperBlock / 4, true}},
    Entry{11, {"Q3_K", kSuperBlock, 2 + kSuperBlock / 4 + kSuperBlock / 8 + 12, true}},
    Entry{12, {"Q4_K", kSuperBlock, 2 + 2 + kSuperBlock / 2 + 12, true}},
    Entry{13, {"Q5_K", kSuperBlock, 2 + 2 + kSuperBlock / 2 + kSuperBlock / 8 + 12, true}},
    Entry{14, {"Q6_K", kSuperBlock, 2 + kSuperBlock / 2 + kSuperBlock / 4 + kSuperBlock / 16, true}},
    Entry{15, {"Q8_K", kSuperBlock, 4 + kSuperBlock + kSuperBlock / 8, false}},
    Entry{16, {"IQ2_XXS", kSuperBlock, 2 + kSuperBlock / 4, true}},
    Entry{17, {"IQ2_XS", kSuperBlock, 2 + kSuperBlock / 4 + kSuperBlock / 32, true}},
    Entry{18, {"IQ3_XXS", kSuperBlock, 2 + kSuperBlock / 4 + kSuperBlock / 8, true}},
    Entry{19, {"IQ1_S", kSuperBlock, 2 + kSuperBlock / 8 + kSuperBlock / 16, true}},
    Entry{20, {"IQ4_NL", 32, 2 + 16, true}},
    Entry{21, {"IQ3_S", kSuperBlock, 2 + kSuperBlock / 4 + kSuperBlock / 8 + kSuperBlock / 32 + 4, true}},
    Entry{22, {"IQ2_S", kSuperBlock, 2 + kSuperBlock / 4 + kSuperBlock / 16, true}},
    Entry{23, {"IQ4_XS", kSuperBlock, 2 + 2 + kSuperBlock / 2 + kSuperBlock / 64, true}},
    Entry{24, {"I8", 1, 1, false}},
    Entry{25, {"I16", 1, 2, false}},
    Entry{26, {"I32", 1, 4, false}},
    Entry{27, {"I64", 1, 8, false}},
    Entry{28, {"F64", 1, 8, false}},
    Entry{29, {"IQ1_M", kSuperBlock, kSuperBlock / 8 + kSuperBlock / 16 + kSuperBlock / 32, true}},
    Entry{30, {"BF16", 1, 2, true}},
    Entry{34, {"TQ1_0", kSuperBlock, 2 + 4 * 13, false}},
    Entry{35, {"TQ2_0", kSuperBlock, 2 + 64, false}},
    Entry{39, {"MXFP4", 32, 1 + 16, false}},
};

const Entry* find_entry(uint32_t code) {
  for (const Entry& entry : kTypes)
    if (entry.code == code) return &entry;
  return nullptr;
}

}  // namespace

std::optional<GgmlType> ggml_type_from_code(uint32_t code) {
  if (!find_entry(code)) return std::nullopt;
  return GgmlType(code);
}

const GgmlTypeInfo& ggml_type_info(GgmlType type) {
  static const GgmlTypeInfo kUnknown{"?", 0, 0, false};
  const Entry* entry = find_entry(uint32_t(type));
  return entry ? entry->info : kUnknown;
}

std::optional<uint64_t> ggml_row_bytes(GgmlType type, int64_t elements) {
  const GgmlTypeInfo& info = ggml_type_info(type);
  if (info.block_elements <= 0 || elements < 0 || elements % info.block_elements != 0) return std::nullopt;
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(uint64_t(elements / info.block_elements), uint64_t(info.block_bytes), &bytes))
    return std::nullopt;
  return bytes;
}

}  // namespace inkling
