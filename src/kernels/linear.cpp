// Public entry points: argument checks, the per-call activation preparation, and the OpenMP
// split over output rows. The arithmetic lives in the per-ISA backends (backend.h).
#include "kernels/linear.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "tensor/error.h"

namespace inkling::kernels {

namespace {

using detail::Backend;
using detail::PreparedX;

const Backend& active_backend() { return detail::backend_for(active_isa()); }

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
  bool has_split = false, has_lanes = false;
  int sums_group = 0;
  std::vector<float> x_split, x_nibble_lanes, group_sums;
};

PreparedX prepare(const WeightMatrix& w, const float* x, const Backend& backend,
                  PrepareCache& cache) {
  const int64_t cols = w.cols;
  const bool same_x = cache.x == x && cache.cols == cols && cache.isa == backend.isa &&
                      std::equal(cache.x_copy.begin(), cache.x_copy.end(), x);
  if (!same_x) {
    cache.isa = backend.isa;
    cache.x = x;
    cache.cols = cols;
    cache.x_copy.assign(x, x + cols);
    cache.has_split = cache.has_lanes = false;
    cache.sums_group = 0;
  }
  PreparedX prepared;
  prepared.x = x;
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
  if (four_bit && chunk > 0) {  // the per-chunk path stays the fallback for other shapes
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
      const int64_t groups = cols / w.group_size;
      cache.group_sums.resize(size_t(groups));
      for (int64_t g = 0; g < groups; ++g) {
        float sum = 0.0f;
        for (int64_t c = g * w.group_size; c < (g + 1) * w.group_size; ++c) sum += x[c];
        cache.group_sums[size_t(g)] = sum;
      }
      cache.sums_group = w.group_size;
    }
    prepared.group_sums = cache.group_sums.data();
  }
  return prepared;
}

// 0: matvec; 1, 2: swiglu gate and up (separate, so a MoE layer's alternating calls all hit).
PrepareCache& cache_for(int which) {
  thread_local PrepareCache caches[3];
  return caches[which];
}

// Below this many weight bytes a fork/join costs more than it saves.
constexpr int64_t kMinParallelBytes = 96 * 1024;

int threads_for(const WeightMatrix& w, int64_t n) {
  if (omp_in_parallel()) return 1;
  if (w.bytes_read() * std::max<int64_t>(n, 1) < kMinParallelBytes || w.rows < 2) return 1;
  return int(std::min<int64_t>(omp_get_max_threads(), w.rows));
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

inline float silu(float v) { return v / (1.0f + std::exp(-v)); }

void check_pair(const WeightMatrix& gate, const WeightMatrix& up) {
  check(gate, "swiglu gate");
  check(up, "swiglu up");
  if (gate.rows != up.rows || gate.cols != up.cols)
    throw Error("swiglu: gate [" + std::to_string(gate.rows) + ", " + std::to_string(gate.cols) +
                "] and up [" + std::to_string(up.rows) + ", " + std::to_string(up.cols) +
                "] differ in shape");
}

}  // namespace

void matvec(const WeightMatrix& w, const float* x, float* y) {
  check(w, "matvec");
  const Backend& backend = active_backend();
  const PreparedX prepared = prepare(w, x, backend, cache_for(0));
  const int threads = threads_for(w, 1);
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const RowRange range = row_range(w.rows, omp_get_thread_num(), omp_get_num_threads(), 1);
    backend.matvec_rows(w, prepared, range.begin, range.end, y + range.begin);
  }
}

void matmul(const WeightMatrix& w, const float* x, int64_t n, float* y) {
  if (n == 1) return matvec(w, x, y);
  check(w, "matmul");
  if (n <= 0) return;
  const Backend& backend = active_backend();
  const int threads = threads_for(w, n);
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const RowRange range =
        row_range(w.rows, omp_get_thread_num(), omp_get_num_threads(), backend.matmul_row_block);
    if (range.end > range.begin)
      backend.matmul_rows(w, x, n, range.begin, range.end, y + range.begin, w.rows);
  }
}

void swiglu_matvec(const WeightMatrix& gate, const WeightMatrix& up, const float* x, float* out) {
  check_pair(gate, up);
  const Backend& backend = active_backend();
  const PreparedX gate_x = prepare(gate, x, backend, cache_for(1));
  const PreparedX up_x = prepare(up, x, backend, cache_for(2));
  const int threads = threads_for(gate, 2);
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const RowRange range = row_range(gate.rows, omp_get_thread_num(), omp_get_num_threads(), 1);
    // Gate and up blocks alternate so both streams are read in the same pass.
    constexpr int64_t kBlock = 32;
    float up_out[kBlock];
    for (int64_t r = range.begin; r < range.end; r += kBlock) {
      const int64_t end = std::min(range.end, r + kBlock);
      backend.matvec_rows(gate, gate_x, r, end, out + r);
      backend.matvec_rows(up, up_x, r, end, up_out);
      for (int64_t i = r; i < end; ++i) out[i] = silu(out[i]) * up_out[i - r];
    }
  }
}

void swiglu_matmul(const WeightMatrix& gate, const WeightMatrix& up, const float* x, int64_t n,
                   float* out) {
  if (n == 1) return swiglu_matvec(gate, up, x, out);
  check_pair(gate, up);
  if (n <= 0) return;
  const Backend& backend = active_backend();
  const int threads = threads_for(gate, 2 * n);
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const RowRange range = row_range(gate.rows, omp_get_thread_num(), omp_get_num_threads(),
                                     backend.matmul_row_block);
    const int64_t count = range.end - range.begin;
    if (count > 0) {
      std::vector<float> up_out(size_t(n * count));
      backend.matmul_rows(gate, x, n, range.begin, range.end, out + range.begin, gate.rows);
      backend.matmul_rows(up, x, n, range.begin, range.end, up_out.data(), count);
      for (int64_t t = 0; t < n; ++t) {
        float* row = out + t * gate.rows + range.begin;
        const float* up_row = up_out.data() + t * count;
        for (int64_t i = 0; i < count; ++i) row[i] = silu(row[i]) * up_row[i];
      }
    }
  }
}

}  // namespace inkling::kernels
