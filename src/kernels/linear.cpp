// Public entry points: argument checks, the per-call activation preparation, and the
// split over output rows (thread_pool.h). The arithmetic lives in the per-ISA backends (backend.h).
#include "kernels/linear.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <initializer_list>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/prefetch.h"
#include "kernels/product_profile.h"
#include "kernels/thread_pool.h"
#include "tensor/aligned_vector.h"
#include "tensor/error.h"

namespace inkling::kernels {

namespace {

using detail::Backend;
using detail::PreparedX;

const Backend& active_backend() { return detail::backend_for(active_isa()); }

// The ggml block types have SIMD kernels on the AVX2 backend only (ggml_dot_avx2.cpp; the types
// without one take the scalar reference there): a call that involves one runs on the AVX2
// backend where the active path is AVX2 or AVX-512, else on the scalar one.
const Backend& ggml_backend() {
  return active_isa() == Isa::Scalar ? detail::scalar_backend() : detail::avx2_backend();
}
const Backend& backend_for_all(std::initializer_list<const WeightMatrix*> matrices) {
  for (const WeightMatrix* w : matrices)
    if (w->format == WeightFormat::Ggml) return ggml_backend();
  return active_backend();
}
template <class Products, class Matrices>
const Backend& backend_for_products(const Products& products, const Matrices& matrices_of) {
  for (const auto& p : products)
    for (const WeightMatrix* w : matrices_of(p))
      if (w->format == WeightFormat::Ggml) return ggml_backend();
  return active_backend();
}

std::atomic<MatmulPrecision>& precision_setting() {
  static std::atomic<MatmulPrecision> precision{[] {
    const char* exact = std::getenv("INKLING_EXACT");
    return exact && std::strcmp(exact, "1") == 0 ? MatmulPrecision::Exact
                                                  : MatmulPrecision::Bf16Activations;
  }()};
  return precision;
}

bool fast_precision() {
  return precision_setting().load(std::memory_order_relaxed) != MatmulPrecision::Exact;
}

detail::GgmlXRounding x_rounding_for(GgmlType type) {
  return precision_setting().load(std::memory_order_relaxed) == MatmulPrecision::LlamaCppActivations
             ? detail::llama_x_rounding(type)
             : detail::GgmlXRounding::Fine32;
}

bool fast_mode(const Backend& backend) { return backend.isa == Isa::Avx512 && fast_precision(); }

// The Bf16Activations prefill (decode batches, up to kDecodeBatchMaxTokens, take the matvec
// kernels instead). f32 / f16 weights stay on the f32 path: rounding both them and X to bf16
// would exceed the 1e-2 budget, and no large matrix of the models is stored that way.
bool use_bf16_matmul(const Backend& backend, const WeightMatrix& w) {
  const bool format_ok = w.format == WeightFormat::BF16 || w.format == WeightFormat::NvFp4 ||
                         w.format == WeightFormat::Affine;
  return format_ok && fast_mode(backend) && detail::cpu_has_avx512_bf16();
}

// X rounded to bf16 for one call; kept between calls to reuse the allocation.
const uint16_t* round_to_bf16(const float* x, int64_t n, int64_t cols) {
  thread_local AlignedVector<uint16_t> buffer;
  buffer.resize(size_t(n * detail::bf16_ldx(cols)));
  detail::bf16_round_rows(x, n, cols, buffer.data());
  return buffer.data();
}

void check(const WeightMatrix& w, const char* what) {
  auto fail = [&](const std::string& why) {
    throw Error(std::string(what) + ": " + weight_format_name(w.format) + " weight [" +
                std::to_string(w.rows) + ", " + std::to_string(w.cols) + "]: " + why);
  };
  if (w.rows < 0 || w.cols <= 0) fail("empty or negative shape");
  if (!w.data) fail("no data");
  if (w.format == WeightFormat::Affine) {
    if (w.bits != 4 && w.bits != 8) fail("affine bits must be 4 or 8");
    if (w.group_size <= 0 || w.cols % w.group_size != 0 || (w.group_size * w.bits) % 8 != 0)
      fail("cols must be a multiple of group_size");
    if (!w.scales || !w.biases) fail("missing scales or biases");
    if (w.scale_dtype != DType::BF16 && w.scale_dtype != DType::F16 &&
        w.scale_dtype != DType::F32)
      fail("affine scales must be bf16, f16 or f32");
  } else if (w.format == WeightFormat::NvFp4) {
    if (w.cols % 16 != 0) fail("nvfp4 cols must be a multiple of 16");
    if (!w.scales) fail("missing block scales");
  } else if (w.format == WeightFormat::Ggml) {
    const GgmlTypeInfo& info = ggml_type_info(w.ggml_type);
    if (!info.dequantizable) fail("ggml type " + std::string(info.name) + " has no kernel");
    if (w.cols % info.block_elements != 0) fail("cols must be a whole number of " + std::string(info.name) + " blocks");
  }
}

// What prepare() derived from one activation vector. Reused across calls (the API is called
// from one thread): a decode step multiplies the same x by several matrices (q/k/v, every
// routed expert's gate and up), and re-deriving it would cost a few microseconds each time.
struct PrepareCache {
  Isa isa = Isa::Scalar;
  const float* x = nullptr;
  int64_t cols = 0;
  std::vector<float> x_copy;  // to notice an x rewritten in place between calls
  bool has_split = false, has_lanes = false, has_q8 = false, q8_ok = false;
  int q8_parts = 0;
  int sums_group = 0, q8_sums_group = 0;
  AlignedVector<float> x_split, x_nibble_lanes, group_sums;
  AlignedVector<int8_t> x_q8;
  AlignedVector<float> x_q8_scale, x_hat, group_sums_q8;
  AlignedVector<int32_t> x_q8_nvfp4_offset;
  bool has_bf16 = false;
  AlignedVector<uint16_t> x_bf16;
  // One x_g8 per rounding: a layer's q / k / v share x but may differ in type (Q4_K_M's Q8_0
  // attn_k and attn_v beside a Q4_K attn_q), and all of a batch's products point into the cache.
  struct G8 {
    bool has = false, ok = false;
    AlignedVector<int8_t> digits;
    AlignedVector<float> scale, sum16, sum32;
    AlignedVector<int8_t> eighths;
    AlignedVector<float> eighths_scale, eighths_scale_high16, eighths_sum32;
    AlignedVector<int32_t> eighths_offsets;
  };
  std::array<G8, size_t(detail::GgmlXRounding::Q8_K) + 1> g8;
};

// PreparedX::x_q8 and friends (see backend.h), with `parts` int8 digits per column. False when x
// is not finite (the f32 paths then propagate inf / NaN as usual).
bool quantize_q8(const float* x, int64_t cols, int parts, const Backend& backend, PrepareCache& cache) {
  const int64_t chunks = cols / 128;
  cache.x_q8.resize(size_t(chunks * 128 * parts));
  cache.x_q8_scale.resize(size_t(chunks * 16));
  cache.x_q8_nvfp4_offset.resize(size_t(chunks * 16));
  cache.x_hat.resize(size_t(cols));
  return backend.quantize_q8(x, chunks, parts,
                             {cache.x_q8.data(), cache.x_q8_scale.data(), cache.x_q8_nvfp4_offset.data(),
                              cache.x_hat.data()});
}

// Eight interleaved partial sums per group (combined pairwise): one sequential chain of adds
// was ~2 us per 2048 columns, a third of preparing x for the 4-bit decode.
void group_sums_of(const float* x, int64_t cols, int group_size, AlignedVector<float>& out) {
  const int64_t groups = cols / group_size;
  out.resize(size_t(groups));
  for (int64_t g = 0; g < groups; ++g) {
    const float* group = x + g * group_size;
    float partial[8] = {};
    int64_t c = 0;
    for (; c + 8 <= group_size; c += 8)
      for (int j = 0; j < 8; ++j) partial[j] += group[c + j];
    for (; c < group_size; ++c) partial[c % 8] += group[c];
    out[size_t(g)] = ((partial[0] + partial[1]) + (partial[2] + partial[3])) +
                     ((partial[4] + partial[5]) + (partial[6] + partial[7]));
  }
}

// Forgets what the cache derived unless it was derived from these very bytes of x. The model
// rewrites its activation buffers in place, so the pointer alone does not tell. Bytewise: a
// float-equal but bytewise different x (-0 for +0) is derived again, which is merely redundant.
void revalidate(PrepareCache& cache, const float* x, int64_t cols, const Backend& backend) {
  const bool same_x = cache.x == x && cache.cols == cols && cache.isa == backend.isa &&
                      std::memcmp(cache.x_copy.data(), x, size_t(cols) * sizeof(float)) == 0;
  if (same_x) return;
  cache.isa = backend.isa;
  cache.x = x;
  cache.cols = cols;
  cache.x_copy.assign(x, x + cols);
  cache.has_split = cache.has_lanes = cache.has_q8 = cache.has_bf16 = false;
  for (PrepareCache::G8& g8 : cache.g8) g8.has = false;
  cache.sums_group = cache.q8_sums_group = 0;
}

// What w's decode kernels need of x, derived once per cache (revalidated for this x).
PreparedX prepare(const WeightMatrix& w, const float* x, const Backend& backend,
                  PrepareCache& cache) {
  const int64_t cols = w.cols;
  PreparedX prepared;
  prepared.x = x;
  // ggml types with an integer decode kernel, fast precision on AVX2: x as int8 per 32 columns
  // (llama.cpp's q8 activations); exact precision keeps the f32 decode kernels.
  if (w.format == WeightFormat::Ggml) {
    if (backend.isa == Isa::Avx2 && fast_precision() && cols % 32 == 0 && detail::ggml_rows_q8_avx2(w.ggml_type)) {
      const detail::GgmlXRounding rounding = x_rounding_for(w.ggml_type);
      PrepareCache::G8& g8 = cache.g8[size_t(rounding)];
      if (!g8.has) {
        g8.digits.resize(size_t(cols));
        g8.scale.resize(size_t(cols / 32));
        g8.sum16.resize(size_t(cols / 16));
        g8.sum32.resize(size_t(cols / 32));
        g8.eighths.resize(size_t(cols / 256 * 256));
        g8.eighths_scale.resize(size_t(cols / 256 * 16));
        g8.eighths_scale_high16.resize(size_t(cols / 256 * 16));
        g8.eighths_sum32.resize(size_t(cols / 256 * 16));
        g8.eighths_offsets.resize(size_t(cols / 256 * 16));
        const detail::GgmlQ8Buffers out{g8.digits.data(),
                                        g8.scale.data(),
                                        g8.sum16.data(),
                                        g8.sum32.data(),
                                        g8.eighths.data(),
                                        g8.eighths_scale.data(),
                                        g8.eighths_scale_high16.data(),
                                        g8.eighths_sum32.data(),
                                        g8.eighths_offsets.data()};
        g8.ok = rounding == detail::GgmlXRounding::Fine32 ? detail::ggml_quantize_x_avx2(x, cols, out)
                                                          : detail::ggml_quantize_x_like_llama(x, cols, rounding, out);
        g8.has = true;
      }
      if (g8.ok) {
        prepared.x_g8 = g8.digits.data();
        prepared.x_g8_scale = g8.scale.data();
        prepared.x_g8_sum16 = g8.sum16.data();
        prepared.x_g8_sum32 = g8.sum32.data();
        prepared.x_g8_eighths = g8.eighths.data();
        prepared.x_g8_eighths_scale = g8.eighths_scale.data();
        prepared.x_g8_eighths_scale_high16 = g8.eighths_scale_high16.data();
        prepared.x_g8_eighths_sum32 = g8.eighths_sum32.data();
        prepared.x_g8_eighths_offsets = g8.eighths_offsets.data();
      }
    }
    return prepared;
  }
  if (w.format == WeightFormat::BF16 && fast_mode(backend) && detail::cpu_has_avx512_bf16()) {
    if (!cache.has_bf16) {
      cache.x_bf16.resize(size_t(detail::bf16_ldx(cols)));
      detail::bf16_round_rows(x, 1, cols, cache.x_bf16.data());
      __atomic_add_fetch(&detail::bf16_x_generation, 1, __ATOMIC_RELEASE);
      cache.has_bf16 = true;
    }
    prepared.x_bf16 = cache.x_bf16.data();
    return prepared;
  }
  // 4-bit decode with VNNI: x as int8 digits, 1 in fast precision (llama.cpp's q8 activations on
  // a finer grid), 3 in exact precision (24-bit integers per 8 columns: within f32 rounding of x,
  // see backend.h). AVX2 takes the same digits (vpmaddubsw).
  const bool vnni = backend.isa == Isa::Avx512 && detail::cpu_has_avx512_vnni();
  const bool avx2_q8 = backend.isa == Isa::Avx2;
  if (detail::vnni_matvec_shape(w) && (vnni || avx2_q8)) {
    const int parts = fast_precision() ? 1 : 3;
    if (!cache.has_q8 || cache.q8_parts != parts) {
      cache.q8_ok = quantize_q8(x, cols, parts, backend, cache);
      cache.has_q8 = true;
      cache.q8_parts = parts;
      cache.q8_sums_group = 0;
    }
    if (cache.q8_ok) {
      prepared.x_q8_parts = parts;
      prepared.x_q8 = cache.x_q8.data();
      prepared.x_q8_scale = cache.x_q8_scale.data();
      prepared.x_q8_nvfp4_offset = cache.x_q8_nvfp4_offset.data();
      if (w.format == WeightFormat::Affine) {
        if (cache.q8_sums_group != w.group_size) {
          group_sums_of(cache.x_hat.data(), cols, w.group_size, cache.group_sums_q8);
          cache.q8_sums_group = w.group_size;
        }
        prepared.group_sums_q8 = cache.group_sums_q8.data();
      }
      return prepared;
    }
  }
  const bool four_bit = w.format == WeightFormat::NvFp4 ||
                        (w.format == WeightFormat::Affine && w.bits == 4);
  const int lanes_chunk = backend.nibble_lanes_chunk;
  if (four_bit && lanes_chunk > 0 && cols % lanes_chunk == 0) {
    if (!cache.has_lanes) {
      cache.x_nibble_lanes.resize(size_t(cols));
      float* out = cache.x_nibble_lanes.data();
      const int lanes = lanes_chunk / 8;
      for (int64_t base = 0; base < cols; base += lanes_chunk)
        for (int lane = 0; lane < lanes; ++lane)
          for (int k = 0; k < 8; ++k) out[base + k * lanes + lane] = x[base + 8 * lane + k];
      cache.has_lanes = true;
    }
    prepared.x_nibble_lanes = cache.x_nibble_lanes.data();
  }
  const int chunk = backend.nibble_chunk;
  // The AVX-512 exact and the AVX2 bf16 decode read x in the same even / odd order
  // (bf16_split_row, bf16_split_tile).
  const bool split_bf16 = w.format == WeightFormat::BF16 && (backend.isa == Isa::Avx512 || backend.isa == Isa::Avx2);
  if ((four_bit || split_bf16) && chunk > 0) {  // the per-chunk path stays the fallback for other shapes
    if (!cache.has_split) {
      const int64_t full = cols / chunk * chunk;
      cache.x_split.resize(size_t(full));
      float* out = cache.x_split.data();
      for (int64_t base = 0; base < full; base += chunk)
        for (int j = 0; j < chunk / 2; ++j) {
          out[base + j] = x[base + 2 * j];
          out[base + chunk / 2 + j] = x[base + 2 * j + 1];
        }
      cache.has_split = true;
    }
    prepared.x_split = cache.x_split.data();
  }
  if (w.format == WeightFormat::Affine) {
    if (cache.sums_group != w.group_size) {
      group_sums_of(x, cols, w.group_size, cache.group_sums);
      cache.sums_group = w.group_size;
    }
    prepared.group_sums = cache.group_sums.data();
  }
  return prepared;
}

// One cache per distinct x of a batch; batch slot 0 also serves single products. Slots keep
// their x between calls, so the same activations met again (q / k / v / r, each expert's gate
// and up) are not re-derived.
PrepareCache& cache_for(size_t slot) {
  thread_local std::vector<std::unique_ptr<PrepareCache>> caches;
  while (caches.size() <= slot) caches.push_back(std::make_unique<PrepareCache>());
  return *caches[slot];
}

// Prepares the x of every product of a batch, one cache per distinct (x, cols, group size): a
// cache holds the group sums of one group size, and all the batch's products point into it (a
// batch mixing group sizes on one x got the last product's sums for all). Checked against
// x once per batch: a decode batch of 8 experts used to compare x with the cache 16 times, and
// preparing took 17 us of every MoE layer's gate / up pass while the other threads waited.
// Batches of several distinct x (a layer's expert down projections: 8 activations, ~15 us
// serial, each written in part by another core) derive them on all threads first.
template <class GetMatrix, class GetX>
std::vector<PreparedX> prepare_batch(size_t count, const GetMatrix& matrix, const GetX& x_of,
                                     const Backend& backend, size_t first_slot) {
  std::vector<PreparedX> prepared(count);
  std::vector<size_t> slot_of(count), first_of_slot;
  for (size_t i = 0; i < count; ++i) {
    size_t slot = first_of_slot.size();
    for (size_t j = 0; j < i; ++j)
      if (x_of(j) == x_of(i) && matrix(j).cols == matrix(i).cols && matrix(j).group_size == matrix(i).group_size)
        slot = slot_of[j];
    if (slot == first_of_slot.size()) first_of_slot.push_back(i);
    slot_of[i] = slot;
  }
  // The caches are the calling thread's (cache_for is thread_local): looked up here, filled by
  // whichever thread takes the slot.
  std::vector<PrepareCache*> caches(first_of_slot.size());
  for (size_t slot = 0; slot < caches.size(); ++slot) caches[slot] = &cache_for(first_slot + slot);
  auto derive = [&](int64_t slot, int) {
    const size_t i = first_of_slot[size_t(slot)];
    revalidate(*caches[size_t(slot)], x_of(i), matrix(i).cols, backend);
    prepared[i] = prepare(matrix(i), x_of(i), backend, *caches[size_t(slot)]);
  };
  constexpr size_t kParallelSlots = 4;
  if (caches.size() >= kParallelSlots) {
    parallel_for(int64_t(caches.size()), thread_count(), derive);
  } else {
    for (size_t slot = 0; slot < caches.size(); ++slot) derive(int64_t(slot), 0);
  }
  // The other products of each slot, from its cache.
  for (size_t i = 0; i < count; ++i)
    if (first_of_slot[slot_of[i]] != i) prepared[i] = prepare(matrix(i), x_of(i), backend, *caches[slot_of[i]]);
  return prepared;
}

// Below this many weight bytes a fork/join costs more than it saves.
constexpr int64_t kMinParallelBytes = 96 * 1024;

int threads_for_bytes(int64_t bytes, int64_t rows) {
  if (bytes < kMinParallelBytes || rows < 2) return 1;
  return int(std::min<int64_t>(thread_count(), rows));
}

int threads_for(const WeightMatrix& w, int64_t n) {
  return threads_for_bytes(w.bytes_read() * std::max<int64_t>(n, 1), w.rows);
}

// Thread `index` of `count` gets a contiguous share of [0, rows), in whole multiples of
// `align` rows except at the end.
struct RowRange {
  int64_t begin, end;
};
RowRange row_range(int64_t rows, int index, int count, int64_t align) {
  const int64_t blocks = (rows + align - 1) / align;
  const int64_t b0 = blocks * index / count, b1 = blocks * (index + 1) / count;
  return {std::min(rows, b0 * align), std::min(rows, b1 * align)};
}

// Rows [begin, end) of product `task`: the unit of work decode threads claim. Decode streams
// weights from memory, so a batch is split by bytes into one share per thread, and each share
// into chunks its thread takes front to back (parallel_for_shares): one ascending stream per
// thread. Chunks are small enough (~8 per share) that a thread slowed by anything else hands
// the back of its share to the others, and large enough that claiming one (a CAS on the share's
// cache line) costs nothing next to reading it. The last four chunks' worth of every share is
// cut 16x finer (at least 16 KiB): that is where the threads meet, and a batch ends when its
// slowest thread does; a share's pieces are contiguous, so fine ones cost only their claims.
// Two threads, fast host phase, against the bandwidth probe:
// - chunks handed out in global order (each one a cold stream start): a 264 MB 4-bit matrix
//   90%, a layer's eight fused experts 74%; in shares 100% and 84%;
// - the MLX expert pattern with the last two chunks' worth cut 4x finer 85%, 16x finer 91%;
//   the wait for the slower thread per batch (whole model) 6.5-8.4 us with two chunks' worth
//   cut, 1.9-2.9 us with four.
struct RowChunk {
  int task;
  int64_t begin, end;
};

struct RowChunks {
  std::vector<RowChunk> chunks;
  std::vector<int64_t> share_starts;  // threads + 1 chunk indices
  // The chunk after `item` when it starts another product (a new stream), else null.
  const RowChunk* next_stream(int64_t item) const {
    const size_t next = size_t(item) + 1;
    return next < chunks.size() && chunks[next].task != chunks[size_t(item)].task ? &chunks[next] : nullptr;
  }
};

template <class GetMatrix>
RowChunks row_chunks(size_t count, const GetMatrix& matrix, int threads) {
  int64_t total = 0;
  for (size_t i = 0; i < count; ++i) total += matrix(i).bytes_read();
  const int64_t target =
      std::clamp<int64_t>(total / (int64_t(threads) * 8), int64_t(32) << 10, int64_t(1) << 20);
  RowChunks out;
  out.chunks.reserve(size_t(total / target + int64_t(threads) * 80 + int64_t(count)));
  out.share_starts.push_back(0);
  // Divisions only per product and per share: a layer's eight experts are ~140 chunks, and two
  // 64-bit divisions per chunk made the split 0.9 us instead of 0.4.
  std::vector<int64_t> share_end(static_cast<size_t>(threads));
  for (int s = 0; s < threads; ++s) share_end[size_t(s)] = total * (s + 1) / threads;
  int share = 0;
  const int64_t tail_piece = std::max<int64_t>(target / 16, int64_t(16) << 10);
  int64_t offset = 0;  // bytes before the current row
  for (size_t i = 0; i < count; ++i) {
    const WeightMatrix& w = matrix(i);
    if (w.rows == 0) continue;
    const int64_t row_bytes = std::max<int64_t>(1, w.bytes_read() / w.rows);
    const int64_t target_rows = std::max<int64_t>(1, target / row_bytes);
    const int64_t tail_rows = std::max<int64_t>(1, tail_piece / row_bytes);
    for (int64_t r = 0; r < w.rows;) {
      while (share + 1 < threads && offset >= share_end[size_t(share)]) {
        out.share_starts.push_back(int64_t(out.chunks.size()));
        ++share;
      }
      const int64_t left_in_share = share_end[size_t(share)] - offset;
      const bool tail = left_in_share <= 4 * target;
      const int64_t piece = tail ? tail_piece : target;
      const int64_t piece_rows =
          piece <= left_in_share ? (tail ? tail_rows : target_rows) : std::max<int64_t>(1, left_in_share / row_bytes);
      const int64_t rows = std::min(w.rows - r, piece_rows);
      out.chunks.push_back({int(i), r, r + rows});
      r += rows;
      offset += rows * row_bytes;
    }
  }
  while (int64_t(out.share_starts.size()) <= threads) out.share_starts.push_back(int64_t(out.chunks.size()));
  return out;
}

inline float silu(float v) { return v / (1.0f + std::exp(-v)); }

void check_pair(const WeightMatrix& gate, const WeightMatrix& up) {
  check(gate, "swiglu gate");
  check(up, "swiglu up");
  if (gate.rows != up.rows || gate.cols != up.cols)
    throw Error("swiglu: gate [" + std::to_string(gate.rows) + ", " + std::to_string(gate.cols) +
                "] and up [" + std::to_string(up.rows) + ", " + std::to_string(up.cols) +
                "] differ in shape");
}

// When gate and up are the even and odd rows of one interleaved w13 tensor (weights, scales and
// biases alike), the tensor itself as one matrix of 2 x rows: row 2 r is gate[r], 2 r + 1 is up[r].
bool fused_w13(const WeightMatrix& gate, const WeightMatrix& up, WeightMatrix& w13) {
  const bool same_format = gate.format == up.format && gate.bits == up.bits && gate.group_size == up.group_size &&
                           gate.scale_dtype == up.scale_dtype && gate.global_scale == up.global_scale &&
                           gate.ggml_type == up.ggml_type;
  if (!same_format || gate.row_stride != up.row_stride || gate.row_stride % 2 != 0 ||
      up.data != gate.data + gate.row_stride / 2)
    return false;
  auto interleaved = [](const uint8_t* even, const uint8_t* odd, int64_t even_stride, int64_t odd_stride) {
    return even == nullptr ? odd == nullptr
                           : even_stride == odd_stride && even_stride % 2 == 0 && odd == even + even_stride / 2;
  };
  if (!interleaved(gate.scales, up.scales, gate.scales_row_stride, up.scales_row_stride) ||
      !interleaved(gate.biases, up.biases, gate.biases_row_stride, up.biases_row_stride))
    return false;
  w13 = gate;
  w13.scales_nonnegative_finite = gate.scales_nonnegative_finite && up.scales_nonnegative_finite;
  w13.rows = 2 * gate.rows;
  w13.row_stride = gate.row_stride / 2;
  w13.scales_row_stride = gate.scales_row_stride / 2;
  w13.biases_row_stride = gate.biases_row_stride / 2;
  return true;
}

// Prefetches the start of a stream a kernel is about to begin: rows from `row` of w (their first
// bytes of codes, and the scales and biases of the first rows). Each of a thread's switches to a
// new matrix otherwise waits a memory latency per stream before the prefetchers catch on: MLX
// experts (separate gate and up) on two threads read 7% faster with the up stream's start
// prefetched during the gate's last rows.
void prefetch_rows_start(const WeightMatrix& w, int64_t row) {
  constexpr int64_t kCodeBytes = 4096, kParamRows = 4;
  prefetch_lines(w.data + row * w.row_stride, kCodeBytes);
  if (w.scales) prefetch_lines(w.scales + row * w.scales_row_stride, kParamRows * w.scales_row_stride);
  if (w.biases) prefetch_lines(w.biases + row * w.biases_row_stride, kParamRows * w.biases_row_stride);
}

// Rows [begin, end) of w through the kernel; when `next` is given (the matrix whose rows from
// next_row the thread reads after these), its stream's start is prefetched while the last
// ~8 KiB of these rows are read.
void rows_then_prefetch(const Backend& backend, const WeightMatrix& w, const PreparedX& x, int64_t begin,
                        int64_t end, float* y, const WeightMatrix* next, int64_t next_row) {
  if (!next) return backend.matvec_rows(w, x, begin, end, y);
  const int64_t rest = std::min(end - begin, std::max<int64_t>(1, 8192 / std::max<int64_t>(1, w.row_stride)));
  backend.matvec_rows(w, x, begin, end - rest, y);
  prefetch_rows_start(*next, next_row);
  backend.matvec_rows(w, x, end - rest, end, y + (end - rest - begin));
}

// out[r] = silu(gate[r] . x) * (up[r] . x) for r in [begin, end).
// `next` / next_row: the matrix (gate, or fused w13) and row the thread goes on with, if another.
void swiglu_rows(const Backend& backend, const WeightMatrix& gate, const WeightMatrix& up,
                 const PreparedX& gate_x, const PreparedX& up_x, int64_t begin, int64_t end,
                 float* out, const WeightMatrix* next, int64_t next_row) {
  constexpr int64_t kBlock = 128;
  float block[2 * kBlock];
  // An interleaved w13 goes through the kernels as the one matrix it is: memory is then read
  // strictly in order, which the prefetchers stream best.
  WeightMatrix w13;
  if (fused_w13(gate, up, w13)) {
    for (int64_t r = begin; r < end; r += kBlock) {
      const int64_t stop = std::min(end, r + kBlock);
      rows_then_prefetch(backend, w13, gate_x, 2 * r, 2 * stop, block, stop == end ? next : nullptr, next_row);
      for (int64_t i = r; i < stop; ++i) out[i] = silu(block[2 * (i - r)]) * block[2 * (i - r) + 1];
    }
    return;
  }
  // Separate matrices (MLX): all of the chunk's gate rows, then its up rows. Each switch between
  // the two restarts a cold stream; alternating them in blocks of 32 rows read the MLX experts
  // at 80% of the bandwidth probe on two threads, whole chunks at 92% (fast host phase).
  rows_then_prefetch(backend, gate, gate_x, begin, end, out + begin, &up, begin);
  for (int64_t r = begin; r < end; r += 2 * kBlock) {
    const int64_t stop = std::min(end, r + 2 * kBlock);
    rows_then_prefetch(backend, up, up_x, r, stop, block, stop == end ? next : nullptr, next_row);
    for (int64_t i = r; i < stop; ++i) out[i] = silu(out[i]) * block[i - r];
  }
}

// A decode batch of n tokens (n <= kDecodeBatchMaxTokens) against w: each token's x prepared as
// matvec prepares it, the rows split by bytes as matvec splits them, and every chunk of rows
// computed for all n tokens while it is in cache.
void matmul_decode_batch(const Backend& backend, const WeightMatrix& w, const float* x, int64_t n, float* y) {
  auto matrix = [&](size_t) -> const WeightMatrix& { return w; };
  const std::vector<PreparedX> prepared = prepare_batch(
      size_t(n), matrix, [&](size_t t) { return x + int64_t(t) * w.cols; }, backend, 0);
  const RowChunks split = row_chunks(1, matrix, threads_for(w, n));
  parallel_for_shares(split.share_starts, [&](int64_t item, int) {
    const RowChunk& c = split.chunks[size_t(item)];
    backend.matvec_rows_multi(w, prepared.data(), int(n), c.begin, c.end, y + c.begin, w.rows);
  });
}

// out[t * gate.rows + r] = silu(gate[r] . x[t]) * (up[r] . x[t]) for r in [begin, end), t < n:
// swiglu_rows for a decode batch, the same products combined the same way. A fused w13 is read
// as one matrix, in order; separate gate and up alternate per block of rows.
void swiglu_rows_multi(const Backend& backend, const WeightMatrix& gate, const WeightMatrix& up,
                       const PreparedX* gate_x, const PreparedX* up_x, int n, int64_t begin, int64_t end,
                       float* out) {
  constexpr int64_t kBlock = 256;
  thread_local std::vector<float> products;  // [n, 2 kBlock]: gate and up outputs of one block
  products.resize(size_t(n) * 2 * kBlock);
  float* both = products.data();
  WeightMatrix w13;
  const bool fused = fused_w13(gate, up, w13);
  for (int64_t r = begin; r < end; r += kBlock) {
    const int64_t m = std::min(kBlock, end - r);
    if (fused) {
      // Row 2 i of the block is gate, 2 i + 1 up: token t's pairs at both + t * 2 m.
      backend.matvec_rows_multi(w13, gate_x, n, 2 * r, 2 * (r + m), both, 2 * m);
      for (int t = 0; t < n; ++t) {
        const float* pairs = both + t * 2 * m;
        float* row = out + t * gate.rows + r;
        for (int64_t i = 0; i < m; ++i) row[i] = silu(pairs[2 * i]) * pairs[2 * i + 1];
      }
    } else {
      // Gate outputs [n, m], then up outputs [n, m].
      float* up_out = both + int64_t(n) * m;
      backend.matvec_rows_multi(gate, gate_x, n, r, r + m, both, m);
      backend.matvec_rows_multi(up, up_x, n, r, r + m, up_out, m);
      for (int t = 0; t < n; ++t) {
        float* row = out + t * gate.rows + r;
        for (int64_t i = 0; i < m; ++i) row[i] = silu(both[t * m + i]) * up_out[t * m + i];
      }
    }
  }
}

// swiglu_matmul of a decode batch: swiglu_matvec's preparation (an up on the same x as its gate
// shares the gate's) and split, all n tokens per chunk of rows.
void swiglu_decode_batch(const Backend& backend, const WeightMatrix& gate, const WeightMatrix& up, const float* x,
                         int64_t n, float* out) {
  const size_t count = size_t(n);
  const std::vector<PreparedX> prepared = prepare_batch(
      2 * count, [&](size_t i) -> const WeightMatrix& { return i < count ? gate : up; },
      [&](size_t i) { return x + int64_t(i % count) * gate.cols; }, backend, 0);
  const int threads = threads_for_bytes((gate.bytes_read() + up.bytes_read()) * n, gate.rows);
  // Chunks are sized by the gate's bytes: each also reads as many bytes of up.
  const RowChunks split = row_chunks(1, [&](size_t) -> const WeightMatrix& { return gate; }, threads);
  parallel_for_shares(split.share_starts, [&](int64_t item, int) {
    const RowChunk& c = split.chunks[size_t(item)];
    swiglu_rows_multi(backend, gate, up, prepared.data(), prepared.data() + count, int(n), c.begin, c.end, out);
  });
}

// A mixed step's decode rows, in decode batches of up to kDecodeBatchMaxTokens (first row, count)
// to `decode`; the rows after them, if any, to `prefill` as one product. A prompt row always
// takes the prefill path, however few there are: which kernel a row takes must depend on its
// own sequence's share of the step (one token or a chunk), never on how many rows the other
// sequences bring, or a sequence would not get the bits it gets alone.
template <class Decode, class Prefill>
void for_mixed_groups(int64_t n, int64_t decode_rows, const char* what, const Decode& decode,
                      const Prefill& prefill) {
  if (decode_rows < 0 || decode_rows > n)
    throw Error(std::string(what) + ": decode_rows " + std::to_string(decode_rows) + " outside [0, " +
                std::to_string(n) + "]");
  for (int64_t first = 0; first < decode_rows; first += kDecodeBatchMaxTokens)
    decode(first, std::min(kDecodeBatchMaxTokens, decode_rows - first));
  if (n > decode_rows) prefill(decode_rows, n - decode_rows);
}

}  // namespace

void set_matmul_precision(MatmulPrecision precision) { precision_setting().store(precision); }
MatmulPrecision matmul_precision() { return precision_setting().load(); }

static std::atomic<bool> batch_invariant_setting{false};
void set_batch_invariant(bool on) { batch_invariant_setting.store(on, std::memory_order_relaxed); }
bool batch_invariant() { return batch_invariant_setting.load(std::memory_order_relaxed); }

void matvec(const WeightMatrix& w, const float* x, float* y) {
  const MatvecProduct product{&w, x, y};
  matvec_batch(std::span<const MatvecProduct>(&product, 1));
}

void matvec_batch(std::span<const MatvecProduct> products) {
  if (products.empty()) return;
  int64_t bytes = 0, rows = 0;
  for (const MatvecProduct& p : products) {
    if (!p.w || !p.x || !p.y) throw Error("matvec: null matrix, input or output");
    check(*p.w, "matvec");
    bytes += p.w->bytes_read();
    rows += p.w->rows;
  }
  const detail::ProductTimer timer(bytes);
  const Backend& backend =
      backend_for_products(products, [](const MatvecProduct& p) { return std::array{p.w}; });
  auto matrix = [&](size_t i) -> const WeightMatrix& { return *products[i].w; };
  const std::vector<PreparedX> prepared = prepare_batch(
      products.size(), matrix, [&](size_t i) { return products[i].x; }, backend, 0);
  const int threads = threads_for_bytes(bytes, rows);
  const RowChunks split = row_chunks(products.size(), matrix, threads);
  parallel_for_shares(split.share_starts, [&](int64_t item, int) {
    const RowChunk& c = split.chunks[size_t(item)];
    const MatvecProduct& p = products[size_t(c.task)];
    // A thread takes its share in order: the next chunk is usually its next stream.
    const RowChunk* next = split.next_stream(item);
    rows_then_prefetch(backend, *p.w, prepared[size_t(c.task)], c.begin, c.end, p.y + c.begin,
                       next ? products[size_t(next->task)].w : nullptr, next ? next->begin : 0);
  });
}

// ggml types with an integer decode kernel, fast precision on AVX2: prefill takes the decode-batch
// kernels too, kDecodeBatchMaxTokens rows of X at a time (each row's output still depends only on
// that row). The tiles would dequantize every weight to f32 first, in the scalar reference.
static bool ggml_integer_prefill(const Backend& backend, const WeightMatrix& w) {
  return w.format == WeightFormat::Ggml && backend.isa == Isa::Avx2 && fast_precision() && w.cols % 32 == 0 &&
         detail::ggml_rows_q8_avx2(w.ggml_type) != nullptr;
}

// The prefill path: X rows through the tiled kernels (each output depends only on its own row
// of X, whatever n is), or with batch invariance through the decode-batch kernels.
static void matmul_tiled(const Backend& backend, const WeightMatrix& w, const float* x, int64_t n, float* y) {
  if (batch_invariant() || ggml_integer_prefill(backend, w)) {
    for (int64_t first = 0; first < n; first += kDecodeBatchMaxTokens)
      matmul_decode_batch(backend, w, x + first * w.cols, std::min(kDecodeBatchMaxTokens, n - first),
                          y + first * w.rows);
    return;
  }
  const int threads = threads_for(w, n);
  const uint16_t* x_bf16 = use_bf16_matmul(backend, w) ? round_to_bf16(x, n, w.cols) : nullptr;
  parallel_run(threads, [&](int thread, int count) {
    const RowRange range = row_range(w.rows, thread, count, backend.matmul_row_block);
    if (range.end > range.begin) {
      if (x_bf16)
        detail::bf16_matmul_rows(w, x_bf16, n, range.begin, range.end, y + range.begin, w.rows);
      else
        backend.matmul_rows(w, x, n, range.begin, range.end, y + range.begin, w.rows);
    }
  });
}

void matmul(const WeightMatrix& w, const float* x, int64_t n, float* y) {
  if (n == 1) return matvec(w, x, y);
  check(w, "matmul");
  if (n <= 0) return;
  const detail::ProductTimer timer(w.bytes_read());
  const Backend& backend = backend_for_all({&w});
  if (n <= kDecodeBatchMaxTokens) return matmul_decode_batch(backend, w, x, n, y);
  matmul_tiled(backend, w, x, n, y);
}

void matmul_mixed(const WeightMatrix& w, const float* x, int64_t n, int64_t decode_rows, float* y) {
  if (n <= 0) return;
  check(w, "matmul");
  const detail::ProductTimer timer(w.bytes_read());
  for_mixed_groups(
      n, decode_rows, "matmul_mixed",
      [&](int64_t first, int64_t count) { matmul(w, x + first * w.cols, count, y + first * w.rows); },
      [&](int64_t first, int64_t count) {
        matmul_tiled(backend_for_all({&w}), w, x + first * w.cols, count, y + first * w.rows);
      });
}

void swiglu_matvec(const WeightMatrix& gate, const WeightMatrix& up, const float* x, float* out) {
  const SwigluProduct product{&gate, &up, x, out};
  swiglu_matvec_batch(std::span<const SwigluProduct>(&product, 1));
}

void swiglu_matvec_batch(std::span<const SwigluProduct> products) {
  if (products.empty()) return;
  int64_t bytes = 0, rows = 0;
  for (const SwigluProduct& p : products) {
    if (!p.gate || !p.up || !p.x || !p.out) throw Error("swiglu: null matrix, input or output");
    check_pair(*p.gate, *p.up);
    bytes += p.gate->bytes_read() + p.up->bytes_read();
    rows += p.gate->rows;
  }
  const detail::ProductTimer timer(bytes);
  const Backend& backend =
      backend_for_products(products, [](const SwigluProduct& p) { return std::array{p.gate, p.up}; });
  const size_t count = products.size();
  // Gates are items [0, count), ups [count, 2 count): one batch, so an up on the same x (and
  // group size) as a gate shares its prepared x.
  const std::vector<PreparedX> prepared = prepare_batch(
      2 * count,
      [&](size_t i) -> const WeightMatrix& { return i < count ? *products[i].gate : *products[i - count].up; },
      [&](size_t i) { return products[i < count ? i : i - count].x; }, backend, 0);
  const PreparedX* gate_x = prepared.data();
  const PreparedX* up_x = prepared.data() + count;
  const int threads = threads_for_bytes(bytes, rows);
  // Chunks are sized by the gate's bytes: each also reads as many bytes of up.
  const RowChunks split = row_chunks(
      count, [&](size_t i) -> const WeightMatrix& { return *products[i].gate; }, threads);
  parallel_for_shares(split.share_starts, [&](int64_t item, int) {
    const RowChunk& c = split.chunks[size_t(item)];
    const SwigluProduct& p = products[size_t(c.task)];
    const RowChunk* next = split.next_stream(item);
    swiglu_rows(backend, *p.gate, *p.up, gate_x[size_t(c.task)], up_x[size_t(c.task)], c.begin,
                c.end, p.out, next ? products[size_t(next->task)].gate : nullptr, next ? next->begin : 0);
  });
}

// swiglu_matmul's prefill path (tiled; each output depends only on its own row of X), or with
// batch invariance the decode-batch kernels.
static void swiglu_tiled(const Backend& backend, const WeightMatrix& gate, const WeightMatrix& up, const float* x,
                         int64_t n, float* out) {
  if (batch_invariant() || (ggml_integer_prefill(backend, gate) && ggml_integer_prefill(backend, up))) {
    for (int64_t first = 0; first < n; first += kDecodeBatchMaxTokens)
      swiglu_decode_batch(backend, gate, up, x + first * gate.cols, std::min(kDecodeBatchMaxTokens, n - first),
                          out + first * gate.rows);
    return;
  }
  const int threads = threads_for(gate, 2 * n);
  const uint16_t* x_bf16 =
      use_bf16_matmul(backend, gate) ? round_to_bf16(x, n, gate.cols) : nullptr;
  // A 4-bit interleaved w13 (NVFP4, MLX copied into memory) is read as the one matrix it is, in
  // order: gate rows and then up rows, each at twice the row stride, read every line twice (each
  // pass brings in the other's rows). pp512 --fast, alternating builds, 3 pairs: NVFP4 +1-4%,
  // mlx-4bit +2-6%; in one process, MLX interleaved against its stored layout went from 0.98x to
  // 1.02x (--fast) and 1.04x (exact).
  // bf16 rows, which need no decoding, ran 3% slower fused, and keep the two passes.
  WeightMatrix w13;
  const bool fused = (gate.format == WeightFormat::Affine || gate.format == WeightFormat::NvFp4) &&
                     fused_w13(gate, up, w13);
  parallel_run(threads, [&](int thread, int thread_total) {
    const RowRange range = row_range(gate.rows, thread, thread_total, backend.matmul_row_block);
    const int64_t count = range.end - range.begin;
    if (count > 0 && fused) {
      // A block of w13 rows at a time into a [n, 2 block] buffer (gate, up, gate, up, ...), reused:
      // the whole range at once was a fresh buffer of up to 16 MB a call.
      constexpr int64_t kBlock = 256;
      thread_local std::vector<float> both;
      both.resize(size_t(n * 2 * kBlock));
      for (int64_t b = range.begin; b < range.end; b += kBlock) {
        const int64_t m = std::min(kBlock, range.end - b);
        if (x_bf16)
          detail::bf16_matmul_rows(w13, x_bf16, n, 2 * b, 2 * (b + m), both.data(), 2 * m);
        else
          backend.matmul_rows(w13, x, n, 2 * b, 2 * (b + m), both.data(), 2 * m);
        for (int64_t t = 0; t < n; ++t) {
          float* row = out + t * gate.rows + b;
          const float* pairs = both.data() + t * 2 * m;
          for (int64_t i = 0; i < m; ++i) row[i] = silu(pairs[2 * i]) * pairs[2 * i + 1];
        }
      }
    } else if (count > 0) {
      std::vector<float> up_out(size_t(n * count));
      if (x_bf16) {
        detail::bf16_matmul_rows(gate, x_bf16, n, range.begin, range.end, out + range.begin,
                                 gate.rows);
        detail::bf16_matmul_rows(up, x_bf16, n, range.begin, range.end, up_out.data(), count);
      } else {
        backend.matmul_rows(gate, x, n, range.begin, range.end, out + range.begin, gate.rows);
        backend.matmul_rows(up, x, n, range.begin, range.end, up_out.data(), count);
      }
      for (int64_t t = 0; t < n; ++t) {
        float* row = out + t * gate.rows + range.begin;
        const float* up_row = up_out.data() + t * count;
        for (int64_t i = 0; i < count; ++i) row[i] = silu(row[i]) * up_row[i];
      }
    }
  });
}

void swiglu_matmul(const WeightMatrix& gate, const WeightMatrix& up, const float* x, int64_t n,
                   float* out) {
  if (n == 1) return swiglu_matvec(gate, up, x, out);
  check_pair(gate, up);
  if (n <= 0) return;
  const detail::ProductTimer timer(gate.bytes_read() + up.bytes_read());
  const Backend& backend = backend_for_all({&gate, &up});
  if (n <= kDecodeBatchMaxTokens) return swiglu_decode_batch(backend, gate, up, x, n, out);
  swiglu_tiled(backend, gate, up, x, n, out);
}

void swiglu_matmul_mixed(const WeightMatrix& gate, const WeightMatrix& up, const float* x, int64_t n,
                         int64_t decode_rows, float* out) {
  if (n <= 0) return;
  check_pair(gate, up);
  const detail::ProductTimer timer(gate.bytes_read() + up.bytes_read());
  for_mixed_groups(
      n, decode_rows, "swiglu_matmul_mixed",
      [&](int64_t first, int64_t count) {
        swiglu_matmul(gate, up, x + first * gate.cols, count, out + first * gate.rows);
      },
      [&](int64_t first, int64_t count) {
        swiglu_tiled(backend_for_all({&gate, &up}), gate, up, x + first * gate.cols, count, out + first * gate.rows);
      });
}

namespace detail {

// Blocks of ~8 KiB of weights, so they are still in L1 when the next token comes: the decode rows
// prefetch their stream non-temporally, and on AMD such a line leaves L1 for nowhere (it is not
// kept in L2), so a block evicted between two tokens would be read from memory again.
void matvec_rows_each_token(MatvecRowsFn rows, const WeightMatrix& w, const PreparedX* xs, int n,
                            int64_t row_begin, int64_t row_end, float* y, int64_t ldy) {
  constexpr int64_t kBlockBytes = 8 << 10;
  const int64_t row_bytes = std::max<int64_t>(1, w.bytes_read() / std::max<int64_t>(1, w.rows));
  const int64_t block = std::max<int64_t>(1, kBlockBytes / row_bytes);
  for (int64_t begin = row_begin; begin < row_end; begin += block) {
    const int64_t end = std::min(row_end, begin + block);
    for (int t = 0; t < n; ++t) rows(w, xs[t], begin, end, y + t * ldy + (begin - row_begin));
  }
}

}  // namespace detail

}  // namespace inkling::kernels
