// ggml block encoders: floats into the blocks GGUF files store, as ggml's reference quantizers
// (quantize_row_*_ref, what llama-quantize runs without an importance matrix) write them.
#pragma once

#include <cstdint>

#include "tensor/ggml_types.h"

namespace inkling {

// Whether quantize_ggml_row encodes `type`: F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q5_1,
// Q4_K, Q5_K and Q6_K.
bool ggml_quantizable(GgmlType type);

// Encodes `elements` values (a whole number of blocks) into out[ggml_row_bytes(type, elements)],
// bit for bit as ggml's reference quantizers do. Throws inkling::Error for a type
// ggml_quantizable refuses or a partial block.
void quantize_ggml_row(GgmlType type, const float* values, uint8_t* out, int64_t elements);

}  // namespace inkling
