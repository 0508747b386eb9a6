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

// Everything `inspect --json` prints (for a GGUF model, with describe_gguf under "gguf").
nlohmann::ordered_json describe_checkpoint(const Checkpoint& checkpoint);

// A GGUF model's container and metadata: version, alignment, key and tensor counts, split
// files, architecture, context length, file type, the tokenizer (model, pre-tokenizer, token
// and merge counts, special ids, whether a chat template is there), and the ggml types per
// tensor family ("attn_q": {"Q8_0": 8}: the name less "blk.N." and ".weight").
nlohmann::ordered_json describe_gguf(const GgufModelFiles& model);

// Relative RMS difference between the dequantized weights of two checkpoints of the same
// model, per tensor family ("attention", "dense_mlp", "routed_experts", "shared_experts",
// "router", "embed", "lm_head"); used to report quantization error.
std::map<std::string, double> weight_difference(const Checkpoint& a, const Checkpoint& b);

}  // namespace inkling
