// Kernel micro-benchmarks: decode matvec per weight format at the bench preset's shapes (bytes/s
// against this machine's streaming read bandwidth), prefill matmul at n = 512 (GFLOP/s against
// the FMA peak), decode batches (matmul / swiglu_matmul of n = 1..32 tokens, hot and cold), and the
// two machine probes. INKLING_ISA=scalar|avx2|avx512 picks the path.
//
//   bench_kernels --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/isa.h"
#include "kernels/linear.h"
#include "kernels/thread_pool.h"
#include "kernels/vector_ops.h"
#include "tensor/dtype.h"
#include "tensor/ggml_types.h"
#include "tensor/weight_matrix.h"

namespace {

using inkling::DType;
using inkling::WeightFormat;
using inkling::WeightMatrix;

struct Spec {
  WeightFormat format;
  int bits = 0;
  int group_size = 0;
  inkling::GgmlType ggml_type = inkling::GgmlType::F32;  // WeightFormat::Ggml
};

// Weight bytes where `inkling` keeps them by default (io/resident_memory.h): in memory advised
// for transparent huge pages, so cold matvecs here stream as they do in the model. Arrays under
// 1 MiB (scales, small matrices) stay in normal pages rather than each taking 2 MiB.
template <class T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <class U>
  HugePageAllocator(const HugePageAllocator<U>&) {}
  T* allocate(size_t count) {
    constexpr size_t kHugePage = size_t(2) << 20;
    const size_t bytes = count * sizeof(T);
    const bool huge = bytes >= kHugePage / 2;
    const size_t align = huge ? kHugePage : 64;
    void* p = std::aligned_alloc(align, (bytes + align - 1) / align * align);
    if (!p) throw std::bad_alloc();
    if (huge) ::madvise(p, (bytes + align - 1) / align * align, MADV_HUGEPAGE);
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) { std::free(p); }
  friend bool operator==(const HugePageAllocator&, const HugePageAllocator&) { return true; }
};
using Bytes = std::vector<uint8_t, HugePageAllocator<uint8_t>>;

// Cheap fill: a 1 GB head matrix would take minutes through std::mt19937.
void fill_random(Bytes& bytes, uint64_t seed) {
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    std::memcpy(&bytes[i], &state, 8);
  }
  for (; i < bytes.size(); ++i) bytes[i] = uint8_t(i);
}

// A matrix with random codes and sane scales; `data` as bytes so any format fits.
struct BenchMatrix {
  Bytes data, scales, biases;
  WeightMatrix w;

  BenchMatrix(Spec spec, int64_t rows, int64_t cols, uint64_t seed) {
    w.format = spec.format;
    w.rows = rows;
    w.cols = cols;
    int64_t row_bytes = 0;
    switch (spec.format) {
      case WeightFormat::F32: row_bytes = cols * 4; break;
      case WeightFormat::BF16:
      case WeightFormat::F16: row_bytes = cols * 2; break;
      case WeightFormat::Affine: row_bytes = cols * spec.bits / 8; break;
      case WeightFormat::NvFp4: row_bytes = cols / 2; break;
      case WeightFormat::Ggml: row_bytes = int64_t(inkling::ggml_row_bytes(spec.ggml_type, cols).value()); break;
    }
    data.resize(size_t(rows * row_bytes));
    if (spec.format == WeightFormat::F32 || spec.format == WeightFormat::BF16 ||
        spec.format == WeightFormat::F16) {
      // Small finite values: random bits would be NaN/inf-heavy and could hit slow paths.
      const int64_t elem = spec.format == WeightFormat::F32 ? 4 : 2;
      for (int64_t i = 0; i < rows * cols; ++i) {
        float v = float((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
        if (elem == 4) {
          std::memcpy(&data[size_t(i * 4)], &v, 4);
        } else {
          uint16_t bits = spec.format == WeightFormat::BF16 ? inkling::f32_to_bf16(v)
                                                            : inkling::f32_to_f16(v);
          std::memcpy(&data[size_t(i * 2)], &bits, 2);
        }
      }
    } else {
      fill_random(data, seed);
    }
    if (spec.format == WeightFormat::Ggml) {
      w.ggml_type = spec.ggml_type;
      set_ggml_scales(spec.ggml_type);
    }
    w.data = data.data();
    w.row_stride = row_bytes;
    if (spec.format == WeightFormat::Affine) {
      w.bits = spec.bits;
      w.group_size = spec.group_size;
      w.scale_dtype = DType::BF16;
      const int64_t groups = cols / spec.group_size;
      scales.resize(size_t(rows * groups * 2));
      biases.resize(scales.size());
      const uint16_t scale = inkling::f32_to_bf16(0.01f), bias = inkling::f32_to_bf16(-0.08f);
      for (int64_t i = 0; i < rows * groups; ++i) {
        std::memcpy(&scales[size_t(i * 2)], &scale, 2);
        std::memcpy(&biases[size_t(i * 2)], &bias, 2);
      }
      w.scales = scales.data();
      w.biases = biases.data();
      w.scales_row_stride = w.biases_row_stride = groups * 2;
    } else if (spec.format == WeightFormat::NvFp4) {
      w.group_size = 16;
      w.scale_dtype = DType::F8_E4M3;
      scales.assign(size_t(rows * cols / 16), inkling::f32_to_e4m3(0.75f));
      w.scales = scales.data();
      w.scales_row_stride = cols / 16;
      w.scales_nonnegative_finite = true;  // as the checkpoint binder marks ModelOpt's scales
      w.global_scale = 0.01f;
    }
  }

  // Random bits as f16 scales would be inf, NaN or subnormal now and then: every block's scales
  // become 2^-6 (at the type's offsets; IQ1_M keeps its d in the top nibbles of bytes 48-55).
  void set_ggml_scales(inkling::GgmlType type) {
    using inkling::GgmlType;
    std::vector<int> offsets = {0};
    switch (type) {
      case GgmlType::Q4_1:
      case GgmlType::Q5_1:
      case GgmlType::Q4_K:
      case GgmlType::Q5_K: offsets = {0, 2}; break;
      case GgmlType::Q2_K: offsets = {80, 82}; break;
      case GgmlType::Q3_K: offsets = {108}; break;
      case GgmlType::Q6_K: offsets = {208}; break;
      case GgmlType::IQ1_M: offsets = {}; break;
      default: break;
    }
    const uint16_t half = inkling::f32_to_f16(0x1p-6f);
    const size_t block_bytes = size_t(inkling::ggml_type_info(type).block_bytes);
    for (size_t at = 0; at + block_bytes <= data.size(); at += block_bytes) {
      for (int offset : offsets) std::memcpy(&data[at + size_t(offset)], &half, 2);
      if (type == GgmlType::IQ1_M)
        for (size_t w = 0; w < 4; ++w)
          data[at + 49 + 2 * w] = uint8_t((data[at + 49 + 2 * w] & 0x0f) | ((half >> (4 * w)) & 15) << 4);
    }
  }
};

// Decode streams every layer's weights from DRAM; a single small matrix would sit in the L3 and
// overstate bandwidth. Cycle through enough copies to cover cold_bytes(): 256 MiB, or twice the
// L3 where that is larger (the Emerald Rapids guest reports the host's 480 MiB, in which 256 MiB
// of copies partly stayed: its cold 2048 x 2048 Q6_K matvec read faster than the 1 GiB probe).
int64_t cold_bytes() {
  int64_t l3 = 0;
  if (std::FILE* f = std::fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r")) {
    long long size = 0;
    char unit = 0;
    if (std::fscanf(f, "%lld%c", &size, &unit) >= 1)
      l3 = unit == 'K' ? size << 10 : unit == 'M' ? size << 20 : size;
    std::fclose(f);
  }
  return std::max(int64_t(256) << 20, 2 * l3);
}

std::vector<std::unique_ptr<BenchMatrix>> make_copies(Spec spec, int64_t rows, int64_t cols) {
  static const int64_t cold = cold_bytes();
  std::vector<std::unique_ptr<BenchMatrix>> copies;
  int64_t total = 0;
  do {
    copies.push_back(std::make_unique<BenchMatrix>(spec, rows, cols, copies.size() + 1));
    total += copies.back()->w.bytes_read();
  } while (total < cold);
  return copies;
}

void set_label(benchmark::State& state) {
  state.SetLabel(std::string(inkling::kernels::isa_name()) + ", " +
                 std::to_string(inkling::kernels::thread_count()) + " threads");
}

void BM_Matvec(benchmark::State& state, Spec spec, int64_t rows, int64_t cols) {
  auto copies = make_copies(spec, rows, cols);
  std::vector<float> x(size_t(cols), 0.01f), y(static_cast<size_t>(rows));
  size_t next = 0;
  for (auto _ : state) {
    inkling::kernels::matvec(copies[next]->w, x.data(), y.data());
    benchmark::DoNotOptimize(y.data());
    next = (next + 1) % copies.size();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * copies[0]->w.bytes_read());
  set_label(state);
}

// Cache-resident: the decode arithmetic alone, i.e. the ceiling the memory-bound case sits under.
void BM_MatvecHot(benchmark::State& state, Spec spec, int64_t rows, int64_t cols) {
  BenchMatrix matrix(spec, rows, cols, 1);
  std::vector<float> x(size_t(cols), 0.01f), y(static_cast<size_t>(rows));
  for (auto _ : state) {
    inkling::kernels::matvec(matrix.w, x.data(), y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * matrix.w.bytes_read());
  set_label(state);
}

void BM_SwigluMatvec(benchmark::State& state, Spec spec, int64_t rows, int64_t cols) {
  // An interleaved w13 [2 * rows, cols]: gate = even rows, up = odd rows.
  auto copies = make_copies(spec, 2 * rows, cols);
  std::vector<float> x(size_t(cols), 0.01f), y(static_cast<size_t>(rows));
  size_t next = 0;
  for (auto _ : state) {
    WeightMatrix gate = copies[next]->w, up = gate;
    gate.rows = up.rows = rows;
    gate.row_stride = up.row_stride = 2 * gate.row_stride;
    up.data += copies[next]->w.row_stride;
    if (up.scales) {
      gate.scales_row_stride = up.scales_row_stride = 2 * gate.scales_row_stride;
      up.scales += copies[next]->w.scales_row_stride;
    }
    if (up.biases) {
      gate.biases_row_stride = up.biases_row_stride = 2 * gate.biases_row_stride;
      up.biases += copies[next]->w.biases_row_stride;
    }
    inkling::kernels::swiglu_matvec(gate, up, x.data(), y.data());
    benchmark::DoNotOptimize(y.data());
    next = (next + 1) % copies.size();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * copies[0]->w.bytes_read());
  set_label(state);
}

// One decode step's MoE front: `experts` gate / up pairs [rows, cols] in one swiglu_matvec_batch,
// laid out as a GGUF file stores them (each expert's gate rows, then its up rows: two streams)
// or row-interleaved (gate row, up row, ...: one stream, as make_resident copies them).
void BM_SwigluExperts(benchmark::State& state, Spec spec, int64_t experts, int64_t rows, int64_t cols,
                      bool interleaved) {
  auto copies = make_copies(spec, 2 * experts * rows, cols);
  std::vector<float> x(size_t(cols), 0.01f), y(size_t(experts * rows));
  std::vector<std::vector<WeightMatrix>> pairs(copies.size());
  std::vector<std::vector<inkling::kernels::SwigluProduct>> products(copies.size());
  for (size_t c = 0; c < copies.size(); ++c) {
    const WeightMatrix& all = copies[c]->w;
    pairs[c].resize(size_t(2 * experts));
    for (int64_t e = 0; e < experts; ++e) {
      WeightMatrix gate = all, up = all;
      gate.rows = up.rows = rows;
      gate.data = all.data + 2 * e * rows * all.row_stride;
      if (interleaved) {
        gate.row_stride = up.row_stride = 2 * all.row_stride;
        up.data = gate.data + all.row_stride;
      } else {
        up.data = gate.data + rows * all.row_stride;
      }
      pairs[c][size_t(2 * e)] = gate;
      pairs[c][size_t(2 * e + 1)] = up;
    }
    for (int64_t e = 0; e < experts; ++e)
      products[c].push_back({&pairs[c][size_t(2 * e)], &pairs[c][size_t(2 * e + 1)], x.data(), y.data() + e * rows});
  }
  size_t next = 0;
  for (auto _ : state) {
    inkling::kernels::swiglu_matvec_batch(products[next]);
    benchmark::DoNotOptimize(y.data());
    next = (next + 1) % copies.size();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * copies[0]->w.bytes_read());
  set_label(state);
}

void BM_Matmul(benchmark::State& state, Spec spec, int64_t rows, int64_t cols,
               inkling::kernels::MatmulPrecision precision) {
  const int64_t n = state.range(0);
  const inkling::kernels::MatmulPrecision saved = inkling::kernels::matmul_precision();
  inkling::kernels::set_matmul_precision(precision);
  BenchMatrix matrix(spec, rows, cols, 1);
  std::vector<float> x(size_t(n * cols), 0.01f), y(size_t(n * rows));
  for (auto _ : state) {
    inkling::kernels::matmul(matrix.w, x.data(), n, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["FLOPS"] = benchmark::Counter(2.0 * double(n) * double(rows) * double(cols),
                                               benchmark::Counter::kIsIterationInvariantRate);
  set_label(state);
  inkling::kernels::set_matmul_precision(saved);
}

// A decode batch: n tokens (one per sequence) against one matrix. Hot, the one matrix stays in
// cache (the arithmetic alone); cold cycles through copies of it as BM_Matvec does, so each step
// streams the matrix from memory once for all n tokens. n = 1 is the matvec.
void BM_MatmulBatch(benchmark::State& state, Spec spec, int64_t rows, int64_t cols, bool cold) {
  const int64_t n = state.range(0);
  auto copies = cold ? make_copies(spec, rows, cols) : std::vector<std::unique_ptr<BenchMatrix>>{};
  if (!cold) copies.push_back(std::make_unique<BenchMatrix>(spec, rows, cols, 1));
  std::vector<float> x(size_t(n * cols)), y(size_t(n * rows));
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.01f * float(int(i % 97) - 48);
  size_t next = 0;
  for (auto _ : state) {
    inkling::kernels::matmul(copies[next]->w, x.data(), n, y.data());
    benchmark::DoNotOptimize(y.data());
    next = (next + 1) % copies.size();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * copies[0]->w.bytes_read());
  set_label(state);
}

// swiglu_matmul of n tokens on an interleaved w13 [2 * rows, cols] (a routed expert's gate and up
// for the n sequences that chose it), cold as BM_SwigluMatvec.
void BM_SwigluBatch(benchmark::State& state, Spec spec, int64_t rows, int64_t cols) {
  const int64_t n = state.range(0);
  auto copies = make_copies(spec, 2 * rows, cols);
  std::vector<float> x(size_t(n * cols)), y(size_t(n * rows));
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.01f * float(int(i % 97) - 48);
  size_t next = 0;
  for (auto _ : state) {
    WeightMatrix gate = copies[next]->w, up = gate;
    gate.rows = up.rows = rows;
    gate.row_stride = up.row_stride = 2 * gate.row_stride;
    up.data += copies[next]->w.row_stride;
    if (up.scales) {
      gate.scales_row_stride = up.scales_row_stride = 2 * gate.scales_row_stride;
      up.scales += copies[next]->w.scales_row_stride;
    }
    if (up.biases) {
      gate.biases_row_stride = up.biases_row_stride = 2 * gate.biases_row_stride;
      up.biases += copies[next]->w.biases_row_stride;
    }
    inkling::kernels::swiglu_matmul(gate, up, x.data(), n, y.data());
    benchmark::DoNotOptimize(y.data());
    next = (next + 1) % copies.size();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * copies[0]->w.bytes_read());
  set_label(state);
}

// The roofline for decode: the probe `inkling bench` uses (prefetched streaming sum, huge pages),
// over 1 GiB on the kernel threads.
void BM_ReadBandwidth(benchmark::State& state) {
  double gbs = 0.0;
  for (auto _ : state)
    gbs = inkling::kernels::measure_read_bandwidth_gbs(size_t(1) << 30, inkling::kernels::thread_count());
  state.counters["GB/s"] = gbs;
  set_label(state);
}

void BM_FmaPeak(benchmark::State& state) {
  double gflops = 0.0;
  for (auto _ : state) gflops = inkling::kernels::measure_fma_peak_gflops(inkling::kernels::thread_count());
  state.counters["GFLOPS"] = gflops;
  set_label(state);
}

// Sets the matmul precision for one benchmark run.
class PrecisionScope {
 public:
  explicit PrecisionScope(inkling::kernels::MatmulPrecision precision)
      : saved_(inkling::kernels::matmul_precision()) {
    inkling::kernels::set_matmul_precision(precision);
  }
  ~PrecisionScope() { inkling::kernels::set_matmul_precision(saved_); }
  PrecisionScope(const PrecisionScope&) = delete;
  PrecisionScope& operator=(const PrecisionScope&) = delete;

 private:
  inkling::kernels::MatmulPrecision saved_;
};

const Spec kF32{WeightFormat::F32}, kBf16{WeightFormat::BF16}, kF16{WeightFormat::F16};
const Spec kQ4{WeightFormat::Affine, 4, 64}, kQ8{WeightFormat::Affine, 8, 64};
const Spec kNvFp4{WeightFormat::NvFp4};

void register_all() {
  const struct {
    const char* name;
    Spec spec;
  } formats[] = {{"f32", kF32}, {"bf16", kBf16}, {"f16", kF16},
                 {"q4g64", kQ4}, {"q8g64", kQ8}, {"nvfp4", kNvFp4}};
  const struct {
    const char* name;
    int64_t rows, cols;
  } shapes[] = {{"2048x2048", 2048, 2048}, {"expert_1024x2048", 1024, 2048},
                {"2048x8192", 2048, 8192}};
  for (const auto& f : formats)
    for (const auto& s : shapes)
      benchmark::RegisterBenchmark(
          (std::string("matvec/") + f.name + "/" + s.name).c_str(),
          [spec = f.spec, rows = s.rows, cols = s.cols](benchmark::State& st) {
            BM_Matvec(st, spec, rows, cols);
          })
          ->UseRealTime();
  for (const auto& f : formats)
    benchmark::RegisterBenchmark((std::string("matvec_hot/") + f.name + "/x2048").c_str(),
                                 [spec = f.spec](benchmark::State& st) {
                                   BM_MatvecHot(st, spec, st.range(0), 2048);
                                 })
        ->Arg(16)
        ->Arg(256);
  benchmark::RegisterBenchmark("matvec/bf16/head_201024x2048", [](benchmark::State& st) {
    BM_Matvec(st, kBf16, 201024, 2048);
  })->UseRealTime();
  for (const auto& f : formats)
    benchmark::RegisterBenchmark((std::string("swiglu_matvec/") + f.name + "/expert_1024x2048").c_str(),
                                 [spec = f.spec](benchmark::State& st) {
                                   BM_SwigluMatvec(st, spec, 1024, 2048);
                                 })
        ->UseRealTime();
  // matmul/ runs in the default precision (Bf16Activations: vdpbf16ps where the CPU has it),
  // matmul_exact/ in MatmulPrecision::Exact (f32 FMA). n = 32: one expert's share of a
  // prompt; 512: a dense layer over a long prompt.
  using inkling::kernels::MatmulPrecision;
  for (MatmulPrecision precision : {MatmulPrecision::Bf16Activations, MatmulPrecision::Exact})
    for (const auto& f : formats)
      benchmark::RegisterBenchmark(
          (std::string(precision == MatmulPrecision::Exact ? "matmul_exact/" : "matmul/") +
           f.name + "/2048x2048")
              .c_str(),
          [spec = f.spec, precision](benchmark::State& st) {
            BM_Matmul(st, spec, 2048, 2048, precision);
          })
          ->Arg(32)
          ->Arg(512)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
  // Decode batches: n tokens of different sequences against one matrix, in the default
  // precision (matmul_batch_exact/: MatmulPrecision::Exact); n = 1 is the matvec. Hot: the
  // compute side of a batched step; cold: the matrix streamed from memory, as in decode.
  for (MatmulPrecision precision : {MatmulPrecision::Bf16Activations, MatmulPrecision::Exact})
    for (const auto& f : formats)
      for (bool cold : {false, true}) {
        const std::string prefix = precision == MatmulPrecision::Exact ? "matmul_batch_exact/" : "matmul_batch/";
        benchmark::RegisterBenchmark((prefix + f.name + "/2048x2048" + (cold ? "/cold" : "/hot")).c_str(),
                                     [spec = f.spec, precision, cold](benchmark::State& st) {
                                       PrecisionScope scope(precision);
                                       BM_MatmulBatch(st, spec, 2048, 2048, cold);
                                     })
            ->Arg(1)->Arg(2)->Arg(4)->Arg(8)->Arg(16)->Arg(32)
            ->UseRealTime();
      }
  for (MatmulPrecision precision : {MatmulPrecision::Bf16Activations, MatmulPrecision::Exact})
    for (const auto& f : formats)
      benchmark::RegisterBenchmark(
          (std::string(precision == MatmulPrecision::Exact ? "swiglu_batch_exact/" : "swiglu_batch/") + f.name +
           "/expert_1024x2048")
              .c_str(),
          [spec = f.spec, precision](benchmark::State& st) {
            PrecisionScope scope(precision);
            BM_SwigluBatch(st, spec, 1024, 2048);
          })
          ->Arg(1)->Arg(2)->Arg(4)->Arg(8)->Arg(16)
          ->UseRealTime();
  // GGUF block types, 2048x2048 streamed as matvec/: ggml_matvec/ in fast precision (the integer
  // decode kernels, ggml_q8_rows.h), ggml_matvec_exact/ in exact precision (the f32 decode
  // kernels where a type has one, else the scalar reference: dequantize a row, then dot it).
  for (MatmulPrecision precision : {MatmulPrecision::Bf16Activations, MatmulPrecision::Exact})
    for (uint32_t code = 0; code < 64; ++code) {
      const auto type = inkling::ggml_type_from_code(code);
      if (!type || !inkling::ggml_type_info(*type).dequantizable || inkling::ggml_type_info(*type).block_elements == 1)
        continue;
      const std::string prefix = precision == MatmulPrecision::Exact ? "ggml_matvec_exact/" : "ggml_matvec/";
      Spec spec{WeightFormat::Ggml};
      spec.ggml_type = *type;
      benchmark::RegisterBenchmark((prefix + std::string(inkling::ggml_type_name(*type)) + "/2048x2048").c_str(),
                                   [spec, precision](benchmark::State& st) {
                                     PrecisionScope scope(precision);
                                     BM_Matvec(st, spec, 2048, 2048);
                                   })
          ->UseRealTime();
      if (precision != MatmulPrecision::Exact && (*type == inkling::GgmlType::Q4_K || *type == inkling::GgmlType::IQ4_XS))
        for (bool interleaved : {false, true})
          benchmark::RegisterBenchmark(("ggml_swiglu_experts/" + std::string(inkling::ggml_type_name(*type)) +
                                        "/8x1024x2048/" + (interleaved ? "interleaved" : "apart"))
                                           .c_str(),
                                       [spec, interleaved](benchmark::State& st) {
                                         BM_SwigluExperts(st, spec, 8, 1024, 2048, interleaved);
                                       })
              ->UseRealTime();
      // From L2 (256 rows of 2048 or 64 of 8192: 72-140 KiB per thread for the 4-bit types): the
      // ceiling of the integer kernel, which must be well above the DRAM rate to keep the stream
      // at it.
      if (precision != MatmulPrecision::Exact)
        for (auto [rows, cols] : {std::pair<int64_t, int64_t>{256, 2048}, {64, 8192}})
          benchmark::RegisterBenchmark(("ggml_matvec_hot/" + std::string(inkling::ggml_type_name(*type)) + "/" +
                                        std::to_string(rows) + "x" + std::to_string(cols))
                                           .c_str(),
                                       [spec, rows, cols](benchmark::State& st) { BM_MatvecHot(st, spec, rows, cols); });
    }
  benchmark::RegisterBenchmark("machine/read_bandwidth_1GiB", BM_ReadBandwidth)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("machine/fma_peak", BM_FmaPeak)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond)
      ->Iterations(3);
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
