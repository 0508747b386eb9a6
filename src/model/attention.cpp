#include "model/attention.h"

// This file passes 64-byte GCC vector values (Floats16 below, tensor/vector_exp.h) between
// inline functions; GCC warns that such values change the ABI of functions built without
// AVX-512, which matters only across translation units, and these never leave this one.
#pragma GCC diagnostic ignored "-Wpsabi"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/prefetch.h"
#include "tensor/dtype.h"
#include "tensor/vector_exp.h"

namespace inkling {
namespace {

// Decode reads each layer's K and V rows after the whole model's weights have streamed through
// the caches since the last token, so they come from memory. Their addresses are known ahead (a
// row per key, a fixed stride apart), but the strided, short rows do not train the hardware
// prefetchers: without this, decode attention stalls on every row.
constexpr int64_t kRowsAhead = 8;

// 16 floats as one value (GCC vector extension): one zmm in the x86-64-v4 clone, two ymm or four
// xmm in the others. Accumulators declared as arrays of floats lived on the stack: every
// multiply-add went through a store and a reload.
typedef float Floats16 __attribute__((vector_size(64)));
typedef uint16_t Halves16 __attribute__((vector_size(32)));
typedef uint32_t Words16 __attribute__((vector_size(64)));

[[gnu::always_inline]] inline Floats16 load16(const float* p) {
  Floats16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
[[gnu::always_inline]] inline void store16(float* p, Floats16 v) { std::memcpy(p, &v, sizeof(v)); }
// 16 bf16 values widened exactly, as bf16_to_f32 does one.
[[gnu::always_inline]] inline Floats16 load16_bf16(const uint16_t* p) {
  Halves16 raw;
  std::memcpy(&raw, p, sizeof(raw));
  const Words16 wide = __builtin_convertvector(raw, Words16) << 16;
  Floats16 v;
  std::memcpy(&v, &wide, sizeof(v));
  return v;
}
// The lanes' sum in a fixed order, halves folded onto each other (lane l + 8 onto l, then
// l + 4, ...), whatever vector width the clone uses.
[[gnu::always_inline]] inline float sum16(Floats16 v) {
  typedef float Floats8 __attribute__((vector_size(32)));
  typedef float Floats4 __attribute__((vector_size(16)));
  const Floats8 eight = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
                        __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
  const Floats4 four = __builtin_shufflevector(eight, eight, 0, 1, 2, 3) +
                       __builtin_shufflevector(eight, eight, 4, 5, 6, 7);
  const float two[2] = {four[0] + four[2], four[1] + four[3]};
  return two[0] + two[1];
}

// exp(row[j] - best) / sum, in place; best is the row's maximum. 16 at a time with the vector
// exp (within 3e-7 of std::exp, tensor/vector_exp.h): std::exp, one call per score, was ~30% of
// decode attention and ran for every score of the prefill.
[[gnu::always_inline]] inline void softmax_in_place(float* row, int64_t n, float best) {
  typedef int32_t Ints16 __attribute__((vector_size(64)));
  Floats16 totals = {};
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const Floats16 e = exp_nonpositive<Floats16, Ints16>(load16(row + j) - best);
    store16(row + j, e);
    totals += e;
  }
  float total = sum16(totals);
  for (; j < n; ++j) {
    Floats16 one = {};
    one[0] = row[j] - best;
    const float e = exp_nonpositive<Floats16, Ints16>(one)[0];
    row[j] = e;
    total += e;
  }
  const float inv_total = 1.0f / total;
  for (j = 0; j < n; ++j) row[j] *= inv_total;
}

// out_h = sum_j p_hj v_(lo + j) for the `heads` (<= H) heads whose probabilities are rows of
// `probs` ([heads, keys]); out rows are d apart. Column blocks are sized so the H partial sums
// stay in registers across all keys, and each V row is converted once for every head.
template <int H>
[[gnu::always_inline]] inline void weighted_values(const float* probs, int64_t keys, int64_t heads, int64_t lo,
                                                   int64_t d, const KvHeadView& kv, float* out) {
  constexpr int64_t kColumns = H >= 8 ? 32 : H >= 4 ? 64 : 128;
  const int64_t elem = kv.bf16 ? 2 : 4;
  constexpr int64_t kVectors = kColumns / 16;
  const int64_t whole = d / kColumns * kColumns;
  for (int64_t c0 = 0; c0 < whole; c0 += kColumns) {  // accumulators in registers
    Floats16 acc[H][kVectors] = {};
    for (int64_t j = 0; j < keys; ++j) {
      if (j + kRowsAhead < keys) kernels::prefetch_lines(kv.value(lo + j + kRowsAhead) + c0 * elem, kColumns * elem);
      Floats16 v[kVectors];
      for (int64_t k = 0; k < kVectors; ++k)
        v[k] = kv.bf16 ? load16_bf16(reinterpret_cast<const uint16_t*>(kv.value(lo + j)) + c0 + 16 * k)
                       : load16(reinterpret_cast<const float*>(kv.value(lo + j)) + c0 + 16 * k);
      for (int64_t h = 0; h < heads; ++h) {
        const float a = probs[h * keys + j];
        for (int64_t k = 0; k < kVectors; ++k) acc[h][k] += a * v[k];
      }
    }
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t k = 0; k < kVectors; ++k) store16(out + h * d + c0 + 16 * k, acc[h][k]);
  }
  for (int64_t c0 = whole; c0 < d; c0 += kColumns) {  // a last partial block of columns
    const int64_t width = d - c0;
    float acc[H][kColumns] = {};
    for (int64_t j = 0; j < keys; ++j) {
      if (j + kRowsAhead < keys) kernels::prefetch_lines(kv.value(lo + j + kRowsAhead) + c0 * elem, width * elem);
      float v[kColumns];
      if (kv.bf16) {
        const auto* src = reinterpret_cast<const uint16_t*>(kv.value(lo + j)) + c0;
        for (int64_t i = 0; i < width; ++i) v[i] = bf16_to_f32(src[i]);
      } else {
        const auto* src = reinterpret_cast<const float*>(kv.value(lo + j)) + c0;
        std::copy(src, src + width, v);
      }
      for (int64_t h = 0; h < heads; ++h) {
        const float a = probs[h * keys + j];
        for (int64_t i = 0; i < width; ++i) acc[h][i] += a * v[i];
      }
    }
    for (int64_t h = 0; h < heads; ++h) std::copy(acc[h], acc[h] + width, out + h * d + c0);
  }
}

// Attention of the `G` query heads that share one KV head, over keys lo..p: score = tau * (q.k / d +
// bias(dist)), the bias from rel_proj ([d_rel, R], as stored) for dist < extent; softmax; out =
// sum p_j v_j. The group walks K once and V once (each row serves all G heads while it is in L1),
// so decode reads the cache once per KV head, not once per query head. q / r / out hold the
// group's heads back to back; scores is scratch of G * (p - lo + 1 + min(extent, p - lo + 1)).
//
// The dot products are summed in 16 lanes, then in a fixed tree: a plain `dot += q[i] * k[i]`
// is one serial chain of adds (the compiler may not reorder float sums), which made decode
// attention ~95 cycles per head and key.
template <int G>
[[gnu::always_inline]] inline void attend_group(const float* q, const float* r, const float* rel_proj, int64_t d,
                                                int64_t dr, int64_t extent, float tau, float inv_d, int64_t lo,
                                                int64_t p, const KvHeadView& kv, float* scores, float* out) {
  constexpr int64_t kLanes = 16;
  const int64_t keys = p - lo + 1;
  const int64_t near = std::min(extent, keys);  // distances that carry a bias
  // bias[h * near + dist], built along the distances (vectorised), in the order of e.
  float* bias = scores + G * keys;
  for (int h = 0; h < G; ++h) {
    float* row = bias + h * near;
    std::fill(row, row + near, 0.0f);
    for (int64_t e = 0; e < dr; ++e) {
      const float re = r[h * dr + e];
      const float* rel = rel_proj + e * extent;
      for (int64_t dist = 0; dist < near; ++dist) row[dist] += re * rel[dist];
    }
  }
  float best[G];
  for (int h = 0; h < G; ++h) best[h] = -INFINITY;
  const int64_t key_bytes = d * (kv.bf16 ? 2 : 4);
  const int64_t full = d / kLanes * kLanes;
  for (int64_t j = lo; j <= p; ++j) {
    if (j + kRowsAhead <= p) kernels::prefetch_lines(kv.key(j + kRowsAhead), key_bytes);
    const uint8_t* key = kv.key(j);
    Floats16 part[G] = {};
    for (int64_t i0 = 0; i0 < full; i0 += kLanes) {
      const Floats16 k = kv.bf16 ? load16_bf16(reinterpret_cast<const uint16_t*>(key) + i0)
                                 : load16(reinterpret_cast<const float*>(key) + i0);
      for (int h = 0; h < G; ++h) part[h] += load16(q + h * d + i0) * k;
    }
    float dot[G];
    for (int h = 0; h < G; ++h) dot[h] = sum16(part[h]);
    for (int64_t i = full; i < d; ++i) {  // head dims that are not a multiple of 16
      const float k = kv.bf16 ? bf16_to_f32(reinterpret_cast<const uint16_t*>(key)[i])
                              : reinterpret_cast<const float*>(key)[i];
      for (int h = 0; h < G; ++h) dot[h] += q[h * d + i] * k;
    }
    const int64_t dist = p - j;
    for (int h = 0; h < G; ++h) {
      const float score = tau * (dot[h] * inv_d + (dist < near ? bias[h * near + dist] : 0.0f));
      scores[h * keys + (j - lo)] = score;
      best[h] = std::max(best[h], score);
    }
  }
  for (int h = 0; h < G; ++h) softmax_in_place(scores + h * keys, keys, best[h]);
  weighted_values<G>(scores, keys, G, lo, d, kv, out);
}

// q . k_j for the `width` (<= 32) keys of one block of keys_t, each summed in the order
// attend_group sums it, so a prefilled position and a decoded one get the same bits (and a cached
// prefix the logits of a cold run): 16 lanes, lane l over i = l, l + 16, ...; the lanes folded as
// sum16 folds them; then the head dimensions past the last multiple of 16, one by one. Here a
// lane is a vector along the keys, two lanes at a time in registers. Width is a constant for
// whole blocks (kWidth > 0) and `width` for the last one.
template <int64_t kWidth>
[[gnu::always_inline]] inline void key_block_scores(const float* q, int64_t d, const float* keys_t, int64_t ld,
                                                    int64_t width, float* out) {
  constexpr int64_t kLanes = 16, kMax = 32;
  const int64_t n = kWidth > 0 ? kWidth : width;
  const int64_t full = d / kLanes * kLanes;
  alignas(64) float lanes[kLanes][kMax];
  for (int64_t l = 0; l < kLanes; l += 2) {
    alignas(64) float even[kMax] = {}, odd[kMax] = {};
    for (int64_t i0 = 0; i0 < full; i0 += kLanes) {
      const float qe = q[i0 + l], qo = q[i0 + l + 1];
      const float* ke = keys_t + (i0 + l) * ld;
      const float* ko = ke + ld;
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) {
        even[j] += qe * ke[j];
        odd[j] += qo * ko[j];
      }
    }
    std::copy(even, even + n, lanes[l]);
    std::copy(odd, odd + n, lanes[l + 1]);
  }
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) {
    float eight[8], four[4];
    for (int64_t l = 0; l < 8; ++l) eight[l] = lanes[l][j] + lanes[l + 8][j];
    for (int64_t l = 0; l < 4; ++l) four[l] = eight[l] + eight[l + 4];
    out[j] = (four[0] + four[2]) + (four[1] + four[3]);
  }
  for (int64_t i = full; i < d; ++i) {
    const float qi = q[i];
    const float* k = keys_t + i * ld;
    for (int64_t j = 0; j < n; ++j) out[j] += qi * k[j];
  }
}

}  // namespace

// ThreadSanitizer's runtime is not up yet when the dynamic loader runs the clones' ifunc resolver,
// and an instrumented resolver crashes the binary at start; that build runs the baseline body.
#if defined(INKLING_TSAN_BUILD)
#define INKLING_CLONE_PER_ISA
#else
#define INKLING_CLONE_PER_ISA __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif

// Cloned per ISA (the library is built for baseline x86-64; these loops are the prefill's
// attention cost). Group sizes of the released models (4, 8) and 1 / 2 get unrolled bodies;
// others run head by head.
INKLING_CLONE_PER_ISA
void attend_kv_group(int64_t group, const float* q, const float* r, const float* rel_proj, int64_t d, int64_t dr,
                     int64_t extent, float tau, float inv_d, int64_t lo, int64_t p, const KvHeadView& kv,
                     float* scores, float* out) {
  switch (group) {
    case 1: return attend_group<1>(q, r, rel_proj, d, dr, extent, tau, inv_d, lo, p, kv, scores, out);
    case 2: return attend_group<2>(q, r, rel_proj, d, dr, extent, tau, inv_d, lo, p, kv, scores, out);
    case 4: return attend_group<4>(q, r, rel_proj, d, dr, extent, tau, inv_d, lo, p, kv, scores, out);
    case 8: return attend_group<8>(q, r, rel_proj, d, dr, extent, tau, inv_d, lo, p, kv, scores, out);
    default:
      for (int64_t h = 0; h < group; ++h)
        attend_group<1>(q + h * d, r + h * dr, rel_proj, d, dr, extent, tau, inv_d, lo, p, kv, scores, out + h * d);
  }
}

// Prefill form of attend_group for one query position: the keys come transposed, keys_t[i * ld +
// j] = k_(lo + j)[i] (f32), so scores for all keys build up as axpys over the head dimension and
// vectorise along the keys with no per-key horizontal sums; the bias likewise, per distance, from
// rel_proj in its stored [d_rel, R] layout. bias_by_dist holds R floats of scratch.
INKLING_CLONE_PER_ISA
void attend_kv_group_transposed(int64_t group, const float* q, const float* r, const float* rel_proj, int64_t d,
                                int64_t dr, int64_t extent, float tau, float inv_d, int64_t lo, int64_t p,
                                const float* keys_t, int64_t ld, const KvHeadView& kv, float* bias_by_dist,
                                float* scores, float* out) {
  const int64_t keys = p - lo + 1;
  const int64_t near = std::min(extent, keys);  // distances that carry a bias
  for (int64_t h = 0; h < group; ++h) {
    float* row = scores + h * keys;
    const float* qh = q + h * d;
    constexpr int64_t kKeys = 32;
    int64_t j0 = 0;
    for (; j0 + kKeys <= keys; j0 += kKeys) key_block_scores<kKeys>(qh, d, keys_t + j0, ld, kKeys, row + j0);
    if (j0 < keys) key_block_scores<0>(qh, d, keys_t + j0, ld, keys - j0, row + j0);
    std::fill(bias_by_dist, bias_by_dist + near, 0.0f);
    const float* rh = r + h * dr;
    for (int64_t e = 0; e < dr; ++e) {
      const float re = rh[e];
      const float* rel = rel_proj + e * extent;
#pragma omp simd
      for (int64_t dist = 0; dist < near; ++dist) bias_by_dist[dist] += re * rel[dist];
    }
    float best = -INFINITY;
    for (int64_t j = 0; j < keys; ++j) {
      const int64_t dist = keys - 1 - j;
      const float score = tau * (row[j] * inv_d + (dist < near ? bias_by_dist[dist] : 0.0f));
      row[j] = score;
      best = std::max(best, score);
    }
    softmax_in_place(row, keys, best);
  }
  for (int64_t h0 = 0; h0 < group; h0 += 4)
    weighted_values<4>(scores + h0 * keys, keys, std::min<int64_t>(4, group - h0), lo, d, kv, out + h0 * d);
}

}  // namespace inkling
