// Run-time choice of the instruction set the kernels use.
//
// Every kernel is compiled once per ISA (files ending _avx2.cpp / _avx512.cpp get that ISA's
// flags) and only called after a CPU check, so one binary runs everywhere. The default is the
// best path the CPU supports; INKLING_ISA=scalar|avx2|avx512 or set_isa() forces one.
#pragma once

#include <optional>
#include <string_view>

namespace inkling::kernels {

enum class Isa { Scalar, Avx2, Avx512 };

// True when the path is compiled in and this CPU can run it.
bool isa_supported(Isa isa);
// The best supported path.
Isa best_isa();
// Forces a path; throws inkling::Error when it is not supported here.
void set_isa(Isa isa);
Isa active_isa();
const char* isa_name(Isa isa);
const char* isa_name();  // of active_isa()
std::optional<Isa> parse_isa(std::string_view name);

// The cache hint of the decode kernels' software prefetch of weight streams (each weight is read
// once per token). Non-temporal on AMD, where such a line skips L2 and the L3 victim fill and
// streams a few percent faster (simd_common.h); T0 everywhere else: on an Intel Xeon
// (Emerald Rapids guest) a read loop with NTA prefetch streamed half the bytes per second of one
// with T0 or with none (docs/kernels.md). INKLING_PREFETCH=nta|t0 or set_stream_prefetch()
// forces one.
enum class StreamPrefetch { NonTemporal, T0 };
StreamPrefetch default_stream_prefetch();  // by CPU vendor
void set_stream_prefetch(StreamPrefetch hint);
StreamPrefetch active_stream_prefetch();
const char* stream_prefetch_name(StreamPrefetch hint);  // "nta" | "t0"
std::optional<StreamPrefetch> parse_stream_prefetch(std::string_view name);

// AMX tiles for bf16 weights against bf16 activations (fast precision decode and decode batches,
// linear_amx.cpp): used where the CPU has AMX-BF16 and Linux grants the tile state, unless
// INKLING_AMX=0 or set_amx(false). One tdpbf16ps serves up to 16 tokens of a batch for the cost
// of one, and a token's value is the same bits alone as in any batch.
bool amx_supported();
void set_amx(bool enabled);  // ignored (stays off) where not supported
bool amx_active();

}  // namespace inkling::kernels
