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

}  // namespace inkling::kernels
