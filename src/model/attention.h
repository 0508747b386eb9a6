// Attention of the query heads that share one KV head, over a layer's KV cache, with the banded
// relative-position bias computed per key (never materialised as [L, S]). Used by forward.cpp.
#pragma once

#include <cstdint>

namespace inkling {

// One KV head of a layer's cache, as raw rows.
struct KvHeadView {
  const uint8_t* keys;
  const uint8_t* values;
  int64_t row_bytes;  // bytes from one position's row to the next (this head's d values, KvCache)
  int64_t capacity;
  bool ring;
  bool bf16;
  const uint8_t* key(int64_t position) const { return keys + (ring ? position % capacity : position) * row_bytes; }
  const uint8_t* value(int64_t position) const { return values + (ring ? position % capacity : position) * row_bytes; }
};

// Decode and short chunks: the group of `group` query heads (q, r, out hold them back to back:
// [group, d], [group, d_rel], [group, d]) attends to keys lo..p, reading each K and V row once.
// rel_proj is [d_rel, R], as stored; scores is scratch of 2 * group * (p - lo + 1) floats.
void attend_kv_group(int64_t group, const float* q, const float* r, const float* rel_proj, int64_t d, int64_t dr,
                     int64_t extent, float tau, float inv_d, int64_t lo, int64_t p, const KvHeadView& kv,
                     float* scores, float* out);

// Prefill: the same with the keys given transposed, keys_t[i * ld + j] = k_(lo + j)[i] (f32), and
// rel_proj as stored, [d_rel, R]. bias_by_dist is scratch of R floats.
void attend_kv_group_transposed(int64_t group, const float* q, const float* r, const float* rel_proj, int64_t d,
                                int64_t dr, int64_t extent, float tau, float inv_d, int64_t lo, int64_t p,
                                const float* keys_t, int64_t ld, const KvHeadView& kv, float* bias_by_dist,
                                float* scores, float* out);

}  // namespace inkling
