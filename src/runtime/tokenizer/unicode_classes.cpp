#include "runtime/tokenizer/unicode_classes.h"

#include <string>
#include <unordered_map>
#include <vector>

namespace inkling::tok_detail {

namespace {

struct BuiltTable {
  ClassTable table;
  std::vector<uint8_t> storage;

  BuiltTable() {
    std::vector<uint8_t> flat(0x110000);
    for (size_t r = 0; r < kClassRunCount; ++r) {
      const uint32_t end = r + 1 < kClassRunCount ? kClassRuns[r + 1].start : 0x110000;
      for (uint32_t cp = kClassRuns[r].start; cp < end; ++cp) flat[cp] = kClassRuns[r].flags;
    }
    std::unordered_map<std::string, uint16_t> seen;
    for (uint32_t block = 0; block < (0x110000 >> 8); ++block) {
      const std::string content(reinterpret_cast<const char*>(flat.data()) + (block << 8), 256);
      auto [it, inserted] = seen.emplace(content, static_cast<uint16_t>(seen.size()));
      if (inserted) storage.insert(storage.end(), content.begin(), content.end());
      table.block_of[block] = it->second;
    }
    table.blocks = storage.data();
  }
};

}  // namespace

const ClassTable& class_table() {
  static const BuiltTable built;
  return built.table;
}

char contraction_letter(uint32_t cp) {
  if (cp < 0x80) {
    const char c = static_cast<char>(cp | 0x20);  // ASCII lower-casing; only letters survive below
    return (c >= 'a' && c <= 'z' && ((cp >= 'A' && cp <= 'Z') || (cp >= 'a' && cp <= 'z'))) ? c : 0;
  }
  for (size_t i = 0; i < kContractionFoldCount; ++i) {
    if (kContractionFolds[i].cp == cp) return kContractionFolds[i].letter;
  }
  return 0;
}

}  // namespace inkling::tok_detail
