// Code-point classes the o200k pre-tokenizer regex needs, as the reference
// regex engine (Oniguruma, used by HF tokenizers) defines them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace inkling::tok_detail {

enum CharClass : uint8_t {
  kLetter = 1,     // \p{L}
  kNumber = 2,     // \p{N}
  kUpperish = 4,   // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
  kLowerish = 8,   // [\p{Ll}\p{Lm}\p{Lo}\p{M}]
  kSpace = 16,     // \s
};

struct ClassRun {
  uint32_t start;  // the run lasts until the next run's start
  uint8_t flags;
};

struct CaseFold {
  uint32_t cp;
  char letter;  // the lowercase ASCII letter (?i) matches it against
};

extern const ClassRun kClassRuns[];
extern const size_t kClassRunCount;
extern const CaseFold kContractionFolds[];
extern const size_t kContractionFoldCount;

// Two-stage lookup built once from the runs: 256-entry blocks, deduplicated.
struct ClassTable {
  uint16_t block_of[0x110000 >> 8];
  const uint8_t* blocks;

  uint8_t operator()(uint32_t cp) const {
    return cp < 0x110000 ? blocks[(static_cast<size_t>(block_of[cp >> 8]) << 8) | (cp & 0xFF)] : 0;
  }
};

const ClassTable& class_table();

// The ASCII letter `cp` matches case-insensitively in the contraction suffix
// ('s, 't, 're, 've, 'm, 'll, 'd), or 0.
char contraction_letter(uint32_t cp);

}  // namespace inkling::tok_detail
