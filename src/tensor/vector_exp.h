// exp over GCC vector-extension values, for code that weighs many scores at once (the sampler's
// vocabulary, attention's softmax). std::exp is a call per element and never vectorises.
#pragma once

#include <cstdint>
#include <cstring>

namespace inkling {

// exp(x) lane by lane for x <= 0 (x below -87 gives exp(-87) ~ 1.6e-38): x = k ln2 + r with
// |r| <= ln2 / 2 (ln2 split in two, so k ln2 is exact), exp(r) by its Taylor series to r^7
// (error < 1e-8), times 2^k built in the exponent; within 3e-7 relative of std::exp. NaN stays NaN.
// Floats: a float vector type; Ints: the int32_t vector type of the same lane count.
template <class Floats, class Ints>
[[gnu::always_inline]] inline Floats exp_nonpositive(Floats x) {
  x = x < -87.0f ? Floats{} - 87.0f : x;
  const Floats k = (x * 1.44269504f + 12582912.0f) - 12582912.0f;  // round(x / ln2): 1.5 * 2^23
  const Floats r = (x - k * 0.693145752f) - k * 1.42860677e-6f;
  Floats p = r * (1.0f / 5040.0f) + (1.0f / 720.0f);
  p = p * r + (1.0f / 120.0f);
  p = p * r + (1.0f / 24.0f);
  p = p * r + (1.0f / 6.0f);
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const Ints bits = (__builtin_convertvector(k, Ints) + 127) << 23;
  Floats scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

}  // namespace inkling
