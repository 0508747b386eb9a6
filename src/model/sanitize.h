// The seed's sanitize rules 1-7 as a name mapping: checkpoint key -> canonical names.
// Binding reads canonical names only, so every layout goes through the same rules, and a
// checkpoint already written with canonical names maps to itself (idempotence).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace inkling {

enum class RowSelect { All, Even, Odd };  // w13 interleave: gate = even rows, up = odd rows

struct SanitizedEntry {
  std::string source;  // the checkpoint key holding the data
  RowSelect rows = RowSelect::All;
};

struct SanitizeResult {
  std::map<std::string, SanitizedEntry> tensors;  // canonical name -> source
  std::vector<std::string> dropped;               // keys removed by rule 1
  std::vector<std::string> unknown;               // keys no rule recognises (kept out, reported)
};

SanitizeResult sanitize_names(const std::vector<std::string>& keys);

// Rule 1: model.mtp., model.visual., model.audio., training_args, .input_amax, .original_shape.
bool is_dropped_key(const std::string& key);

}  // namespace inkling
