// Per-sequence state: KV caches (global and sliding) and the four f32 conv states per layer.
// Copyable: a copy is a snapshot (prompt caching and speculative decoding restore from it).
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"
#include "tensor/aligned_vector.h"
#include "tensor/dtype.h"

namespace inkling {

// Keys/values of one layer, laid out [n_kv, slot, d] in `kv_dtype` (F32 or BF16): a KV head's
// rows are contiguous, so decode attention (one KV head per work item) reads one sequential
// stream per head. With [slot, n_kv, d], a head's rows were d elements out of every n_kv * d and
// a cold group of 256 keys took 30 us instead of 16 (two rows of 256 bytes per key, 4 KV heads,
// after 96 MiB of other reads; the key pass alone 21 us instead of 6.5).
// Global layers keep every position (slot = position). Sliding layers keep a ring of
// `capacity` = window - 1 + max_chunk slots (slot = position % capacity): the bias needs true
// distances, which the absolute positions give, so no rotation tricks are involved.
struct KvCache {
  DType dtype = DType::BF16;
  int64_t capacity = 0;  // slots
  int64_t heads = 0;     // n_kv
  int64_t head_dim = 0;  // d
  bool ring = false;
  AlignedVector<uint8_t> keys, values;  // rows are read as 64-byte vectors

  int64_t slot(int64_t position) const { return ring ? position % capacity : position; }
  int64_t row_bytes() const { return head_dim * int64_t(dtype_size(dtype)); }
  int64_t head_bytes() const { return capacity * row_bytes(); }
  int64_t offset(int64_t head, int64_t position) const {
    return head * head_bytes() + slot(position) * row_bytes();
  }
  uint8_t* key_row(int64_t head, int64_t position) { return keys.data() + offset(head, position); }
  uint8_t* value_row(int64_t head, int64_t position) { return values.data() + offset(head, position); }
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

// What a sequence needs to go on exactly from `position`: the four convolution states of every
// layer, every key and value of the global layers, and only the last window - 1 of the sliding
// ones (the next query reaches no further back). A prefix restored without the convolution
// states, or without the ring, would give silently different logits.
struct StateSnapshot {
  struct Layer {
    int64_t first = 0;                    // first position whose rows are held
    std::vector<uint8_t> keys, values;    // [heads, position - first, head_dim] in the cache dtype
    std::vector<float> conv[4];
  };
  int64_t position = 0;
  std::vector<int32_t> tokens;  // the tokens that led here
  std::vector<Layer> layers;
  int64_t bytes() const;
};

}  // namespace inkling
