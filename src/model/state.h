// Per-sequence state: KV caches (global and sliding) and the four f32 conv states per layer.
// Copyable: a copy is a snapshot (prompt caching and speculative decoding restore from it).
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"
#include "tensor/aligned_vector.h"
#include "tensor/dtype.h"

namespace inkling {

// Keys/values of one layer, laid out [slot, n_kv, d] in `kv_dtype` (F32 or BF16).
// Global layers keep every position (slot = position). Sliding layers keep a ring of
// `capacity` = window - 1 + max_chunk slots (slot = position % capacity): the bias needs true
// distances, which the absolute positions give, so no rotation tricks are involved.
struct KvCache {
  DType dtype = DType::BF16;
  int64_t capacity = 0;   // slots
  int64_t row_elems = 0;  // n_kv * d
  bool ring = false;
  AlignedVector<uint8_t> keys, values;  // rows are read as 64-byte vectors

  int64_t slot(int64_t position) const { return ring ? position % capacity : position; }
  uint8_t* key_row(int64_t position) { return keys.data() + slot(position) * row_elems * dtype_size(dtype); }
  uint8_t* value_row(int64_t position) { return values.data() + slot(position) * row_elems * dtype_size(dtype); }
  const uint8_t* key_row(int64_t position) const { return keys.data() + slot(position) * row_elems * dtype_size(dtype); }
  const uint8_t* value_row(int64_t position) const { return values.data() + slot(position) * row_elems * dtype_size(dtype); }
};

struct LayerState {
  KvCache kv;
  // Conv states [K-1, C] f32: 0 = k, 1 = v, 2 = attention residual, 3 = MLP residual.
  std::vector<float> conv[4];
};

struct SequenceState {
  int64_t position = 0;  // tokens consumed so far
  int64_t context_limit = 0;
  std::vector<LayerState> layers;
  std::vector<int32_t> tokens;  // every token fed, for penalties and inspection
};

}  // namespace inkling
