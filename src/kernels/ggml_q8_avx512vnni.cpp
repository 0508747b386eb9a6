// The GGUF integer decode kernels (ggml_q8_rows.h) built with AVX-512 VNNI: every integer dot of
// 32 codes is one 256-bit vpdpbusd, Q6_K takes two groups per 512-bit one, and Q4_K / Q5_K /
// IQ4_XS a super-block's 8 groups. Reached through ggml_rows_q8 only after the CPU check.
// GCC 12 reports its own _mm512_undefined_* helpers as uninitialized once inlined.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "kernels/ggml_q8_rows.h"

namespace inkling::kernels::detail {

GgmlRowsQ8 ggml_rows_q8_avx512vnni(GgmlType type) { return rows_q8_of<false>(type); }

}  // namespace inkling::kernels::detail
