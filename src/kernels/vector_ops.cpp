#include "kernels/vector_ops.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/isa.h"
#include "kernels/thread_pool.h"
#include "tensor/error.h"

namespace inkling::kernels {

namespace {
const detail::Backend& active_backend() { return detail::backend_for(active_isa()); }

template <typename Load>
void scale_by_weight(const float* x, float inv_rms, Load load, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv_rms * load(i);
}
}  // namespace

float dot_f32(const float* a, const float* b, int64_t n) { return active_backend().dot_f32(a, b, n); }

void axpy_f32(float a, const float* x, float* y, int64_t n) {
  active_backend().axpy_f32(a, x, y, n);
}

void rmsnorm(const float* x, WeightVector weight, float eps, int64_t n, float* out) {
  if (n <= 0) return;
  const float mean_square = active_backend().sum_squares_f32(x, n) / float(n);
  const float inv_rms = 1.0f / std::sqrt(mean_square + eps);
  switch (weight.dtype) {
    case DType::F32: {
      const float* w = static_cast<const float*>(weight.data);
      scale_by_weight(x, inv_rms, [w](int64_t i) { return w[i]; }, n, out);
      return;
    }
    case DType::BF16: {
      const uint16_t* w = static_cast<const uint16_t*>(weight.data);
      scale_by_weight(x, inv_rms, [w](int64_t i) { return bf16_to_f32(w[i]); }, n, out);
      return;
    }
    case DType::F16: {
      const uint16_t* w = static_cast<const uint16_t*>(weight.data);
      scale_by_weight(x, inv_rms, [w](int64_t i) { return f16_to_f32(w[i]); }, n, out);
      return;
    }
    default:
      throw Error(std::string("rmsnorm: weight dtype ") + std::string(dtype_name(weight.dtype)) +
                  " is not f32, bf16 or f16");
  }
}

double measure_read_bandwidth_gbs(size_t bytes, int threads) {
  const size_t words = bytes / sizeof(uint64_t);
  if (words == 0) return 0.0;
  // The buffer is advised for transparent huge pages, as the weights are by default
  // (io/resident_memory.h): the probe measures what the machine can stream, not its TLB.
  constexpr size_t kHugePage = size_t(2) << 20;
  const size_t mapped = (words * 8 + kHugePage - 1) / kHugePage * kHugePage + kHugePage;
  void* mapping = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapping == MAP_FAILED) throw Error("measure_read_bandwidth_gbs: out of memory");
  auto* buffer = reinterpret_cast<uint64_t*>((reinterpret_cast<uintptr_t>(mapping) + kHugePage - 1) & ~uintptr_t(kHugePage - 1));
  ::madvise(buffer, mapped - kHugePage, MADV_HUGEPAGE);
  // First touch from the reading threads so pages land near them.
  parallel_run(threads, [&](int thread, int count) {
    for (size_t i = words * thread / count; i < words * (thread + 1) / count; ++i) buffer[i] = i;
  });
  double rate = 0.0;
  try {
    rate = measure_read_bandwidth_gbs(buffer, words * 8, threads);
  } catch (...) {
    ::munmap(mapping, mapped);
    throw;
  }
  ::munmap(mapping, mapped);
  return rate;
}

double measure_read_bandwidth_gbs(const void* data, size_t bytes, int threads) {
  if (reinterpret_cast<uintptr_t>(data) % 64 != 0)
    throw Error("measure_read_bandwidth_gbs: the memory to read is not 64-byte aligned");
  const size_t words = bytes / sizeof(uint64_t) / 32 * 32;
  if (words == 0) return 0.0;
  const auto* buffer = static_cast<const uint64_t*>(data);
  const detail::Backend& backend = active_backend();
  // Median of several passes: single passes swing with whatever else the host is doing.
  std::vector<double> rates;
  uint64_t checksum = 0;
  for (int pass = 0; pass < 8; ++pass) {
    auto start = std::chrono::steady_clock::now();
    std::vector<uint64_t> sums(size_t(std::max(threads, 1)) * 8, 0);  // a cache line each
    parallel_run(threads, [&](int thread, int count) {
      const size_t begin = words * thread / count / 32 * 32, end = words * (thread + 1) / count / 32 * 32;
      sums[size_t(thread) * 8] = backend.stream_sum(buffer + begin, end - begin);
    });
    uint64_t sum = 0;
    for (uint64_t part : sums) sum += part;
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    checksum += sum;
    if (pass > 0) rates.push_back(double(words * 8) / seconds / 1e9);  // pass 0 warms up
  }
  std::sort(rates.begin(), rates.end());
  double best = rates[rates.size() / 2];
  if (checksum == 42) return -1.0;  // keeps the sums observable
  return best;
}

double measure_fma_peak_gflops(int threads) {
  const detail::Backend& backend = active_backend();
  constexpr int64_t kIterations = 5'000'000;
  double best = 0.0;
  for (int pass = 0; pass < 3; ++pass) {
    std::vector<double> per_thread(size_t(std::max(threads, 1)) * 8, 0.0);
    auto start = std::chrono::steady_clock::now();
    parallel_run(threads, [&](int thread, int) {
      float sink;
      double done = backend.fma_burn(kIterations, &sink);
      if (sink == 42.0f) done += 1.0;
      per_thread[size_t(thread) * 8] = done;
    });
    double flops = 0.0;
    for (double part : per_thread) flops += part;
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, flops / seconds / 1e9);
  }
  return best;
}

}  // namespace inkling::kernels
