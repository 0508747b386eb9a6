// nlohmann parses iteratively, but copying, dumping and converting a document recurse once per
// level: untrusted JSON (request bodies, model-written tool arguments) is measured before it is
// parsed, and refused when it nests deeper than its caller allows.
#pragma once

#include <algorithm>
#include <string_view>

namespace inkling {

// Deepest bracket nesting outside strings (malformed text gives some number; the parser that
// follows reports the malformation).
inline int json_nesting_depth(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false, escape = false;
  for (char c : text) {
    if (in_string) {
      if (escape) escape = false;
      else if (c == '\\') escape = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '{' || c == '[') deepest = std::max(deepest, ++depth);
    else if (c == '}' || c == ']') --depth;
  }
  return deepest;
}

}  // namespace inkling
