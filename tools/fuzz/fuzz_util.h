// What the fuzz targets share: an invariant check that aborts (so libFuzzer records the input),
// the `-seed_corpus=1 DIR` switch that writes a target's seeds, and Inkling's own tokenizer and
// chat template from the source tree's data/.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "io/text_file.h"
#include "runtime/tokenizer/tokenizer.h"

namespace inkling::fuzz {

inline void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "invariant broken: %s\n", what);
    std::abort();
  }
}

// For LLVMFuzzerInitialize: when the arguments hold `-seed_corpus=1 DIR`, calls
// write_seeds(DIR) and exits (a seed-writing run, not a fuzzing one; libFuzzer itself ignores
// the unknown flag). Otherwise returns and fuzzing starts.
template <class WriteSeeds>
void write_seeds_if_asked(int argc, char** argv, const WriteSeeds& write_seeds) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "-seed_corpus=1") == 0) {
      write_seeds(argv[i + 1]);
      std::exit(0);
    }
  }
}

inline std::string data_path(const char* name) { return std::string(INKLING_SOURCE_DIR) + "/data/" + name; }

inline std::string inkling_template_source() {
  return read_text_file(data_path("inkling_chat_template.jinja"), kMaxTemplateFileBytes);
}

inline const Tokenizer& inkling_tokenizer() {
  static const Tokenizer t = Tokenizer::from_file(data_path("tokenizer.json"));
  return t;
}

}  // namespace inkling::fuzz
