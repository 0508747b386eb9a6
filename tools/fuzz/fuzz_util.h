// What the fuzz targets share: an invariant check that aborts (so libFuzzer records the input),
// and Inkling's own tokenizer and chat template from the source tree's data/.
#pragma once

#include <cstdio>
#include <cstdlib>
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

inline std::string data_path(const char* name) { return std::string(INKLING_SOURCE_DIR) + "/data/" + name; }

inline std::string inkling_template_source() {
  return read_text_file(data_path("inkling_chat_template.jinja"), kMaxTemplateFileBytes);
}

inline const Tokenizer& inkling_tokenizer() {
  static const Tokenizer t = Tokenizer::from_file(data_path("tokenizer.json"));
  return t;
}

}  // namespace inkling::fuzz
