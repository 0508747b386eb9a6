#include "kernels/isa.h"

#include "kernels/backend.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tensor/error.h"

namespace inkling::kernels {

namespace {

// Resolved on first use so INKLING_ISA is read after the environment is final.
Isa initial_isa() {
  const char* forced = std::getenv("INKLING_ISA");
  if (forced && *forced) {
    std::optional<Isa> isa = parse_isa(forced);
    if (!isa) throw Error(std::string("INKLING_ISA: unknown instruction set '") + forced + "'");
    if (!isa_supported(*isa))
      throw Error(std::string("INKLING_ISA: this CPU does not support ") + forced);
    return *isa;
  }
  return best_isa();
}

std::atomic<Isa>& current() {
  static std::atomic<Isa> isa{initial_isa()};
  return isa;
}

}  // namespace

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return true;
    case Isa::Avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
    case Isa::Avx512:
      return isa_supported(Isa::Avx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512dq");
  }
  return false;
}

Isa best_isa() {
  if (isa_supported(Isa::Avx512)) return Isa::Avx512;
  if (isa_supported(Isa::Avx2)) return Isa::Avx2;
  return Isa::Scalar;
}

void set_isa(Isa isa) {
  if (!isa_supported(isa))
    throw Error(std::string("set_isa: this CPU does not support ") + isa_name(isa));
  current().store(isa);
}

Isa active_isa() { return current().load(std::memory_order_relaxed); }

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "?";
}

const char* isa_name() { return isa_name(active_isa()); }

std::optional<Isa> parse_isa(std::string_view name) {
  if (name == "scalar") return Isa::Scalar;
  if (name == "avx2") return Isa::Avx2;
  if (name == "avx512") return Isa::Avx512;
  return std::nullopt;
}

StreamPrefetch default_stream_prefetch() {
  return __builtin_cpu_is("amd") ? StreamPrefetch::NonTemporal : StreamPrefetch::T0;
}

namespace {
// Resolved once, before main, like the CPU checks: the kernels read the flag on every prefetch.
StreamPrefetch initial_stream_prefetch() {
  const char* forced = std::getenv("INKLING_PREFETCH");
  if (forced && *forced) {
    if (std::optional<StreamPrefetch> hint = parse_stream_prefetch(forced)) return *hint;
    // An unknown value must not abort a static initializer: say so and keep the default.
    std::fprintf(stderr, "INKLING_PREFETCH: unknown hint '%s' (nta | t0), using %s\n", forced,
                 stream_prefetch_name(default_stream_prefetch()));
  }
  return default_stream_prefetch();
}
}  // namespace

namespace detail {
bool stream_prefetch_nontemporal = initial_stream_prefetch() == StreamPrefetch::NonTemporal;
}  // namespace detail

void set_stream_prefetch(StreamPrefetch hint) {
  __atomic_store_n(&detail::stream_prefetch_nontemporal, hint == StreamPrefetch::NonTemporal, __ATOMIC_RELAXED);
}

StreamPrefetch active_stream_prefetch() {
  return __atomic_load_n(&detail::stream_prefetch_nontemporal, __ATOMIC_RELAXED) ? StreamPrefetch::NonTemporal
                                                                                  : StreamPrefetch::T0;
}

const char* stream_prefetch_name(StreamPrefetch hint) { return hint == StreamPrefetch::NonTemporal ? "nta" : "t0"; }

std::optional<StreamPrefetch> parse_stream_prefetch(std::string_view name) {
  if (name == "nta") return StreamPrefetch::NonTemporal;
  if (name == "t0") return StreamPrefetch::T0;
  return std::nullopt;
}

namespace {
bool os_grants_tile_data() {
  // Linux hands out the AMX tile state (XTILEDATA, feature 18) per process, on request.
  constexpr long kArchGetXcompPerm = 0x1022, kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return false;
  unsigned long long features = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &features) != 0) return false;
  return (features >> kXfeatureXtiledata) & 1;
}

bool initial_amx_setting() {
  const char* setting = std::getenv("INKLING_AMX");
  return !(setting && (std::strcmp(setting, "0") == 0 || std::strcmp(setting, "off") == 0));
}

std::atomic<bool> amx_setting{initial_amx_setting()};
}  // namespace

bool amx_supported() {
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    const bool tile = (edx >> 24) & 1, bf16 = (edx >> 22) & 1;
    return tile && bf16 && detail::cpu_has_avx512_bf16() && os_grants_tile_data();
  }();
  return has;
}

void set_amx(bool enabled) { amx_setting.store(enabled, std::memory_order_relaxed); }

bool amx_active() { return amx_setting.load(std::memory_order_relaxed) && amx_supported(); }

namespace detail {
uint64_t bf16_x_generation = 0;

bool cpu_has_avx512_bf16() {
  static const bool has = __builtin_cpu_supports("avx512bf16");
  return has;
}
bool cpu_has_avx512_vnni() {
  static const bool has = __builtin_cpu_supports("avx512vnni");
  return has;
}
bool cpu_has_avx512_vbmi() {
  static const bool has = __builtin_cpu_supports("avx512vbmi");
  return has;
}
}  // namespace detail

}  // namespace inkling::kernels
