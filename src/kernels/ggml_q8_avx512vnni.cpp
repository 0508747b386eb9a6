// The GGUF integer decode kernels (ggml_q8_rows.h) built with AVX-512 VNNI: every integer dot of
// 32 codes is one 256-bit vpdpbusd. Reached through ggml_rows_q8 only after the CPU check.
#include "kernels/ggml_q8_rows.h"

namespace inkling::kernels::detail {

GgmlRowsQ8 ggml_rows_q8_avx512vnni(GgmlType type) { return rows_q8_of<false>(type); }

}  // namespace inkling::kernels::detail
