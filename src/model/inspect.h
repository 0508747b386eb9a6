// A description of a bound checkpoint for `inkling inspect` and the quantize report.
#pragma once

#include <nlohmann/json.hpp>

#include "model/weights.h"

namespace inkling {

struct ParameterCounts {
  int64_t total = 0;       // every bound parameter (logical elements, not bytes)
  int64_t active = 0;      // read per token: embedding row, attention, dense, k routed + shared, head
};
ParameterCounts count_parameters(const Checkpoint& checkpoint);

// Everything `inspect --json` prints.
nlohmann::ordered_json describe_checkpoint(const Checkpoint& checkpoint);

// Relative RMS difference between the dequantized weights of two checkpoints of the same
// model, per tensor family ("attention", "dense_mlp", "routed_experts", "shared_experts",
// "router", "embed", "lm_head"); used to report quantization error.
std::map<std::string, double> weight_difference(const Checkpoint& a, const Checkpoint& b);

}  // namespace inkling
