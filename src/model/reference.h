// The reference forward pass: written straight from the spec with plain loops in double, no
// caches (the whole sequence is recomputed), weights dequantized row by row. For tests only.
#pragma once

#include <span>
#include <vector>

#include "model/weights.h"

namespace inkling::reference {

// Logits [tokens, unpadded_vocab] for every position of `tokens`.
std::vector<float> forward(const Checkpoint& checkpoint, std::span<const int32_t> tokens);

// The banded relative-position bias of one head, [L, S] row-major, exactly as the spec's graph
// form builds it: dist = (i + offset) - j; -1e30 where dist < 0 or (sliding and dist >= W);
// rl[i][dist] = sum_d r[i][d] * P[d][dist] where dist < R; 0 otherwise. r is [L, d_rel],
// P is [d_rel, R]. When tau is given (global layers), unmasked entries are multiplied by tau[i].
std::vector<double> banded_bias(const std::vector<double>& r, const std::vector<double>& P, int64_t L, int64_t S,
                                int64_t offset, int64_t d_rel, int64_t R, bool sliding, int64_t W,
                                const std::vector<double>* tau = nullptr);

constexpr double kMasked = -1e30;

}  // namespace inkling::reference
