// The GGUF integer decode kernels (ggml_q8_rows.h) built with AVX-512 VNNI and VBMI: IQ4_XS looks
// its codes' values up with vpermb, whose 64-entry table ignores an index's top two bits, so the
// nibbles need no masking first. The other types are the VNNI build's. Reached through
// ggml_rows_q8 only after the CPU check.
// GCC 12 reports its own _mm512_undefined_* helpers as uninitialized once inlined.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "kernels/ggml_q8_rows.h"

namespace inkling::kernels::detail {

GgmlRowsQ8 ggml_rows_q8_avx512vbmi(GgmlType type) {
  if (type == GgmlType::IQ4_XS) return rows_q8<Iq4XsRow>;
  return ggml_rows_q8_avx512vnni(type);
}

}  // namespace inkling::kernels::detail
