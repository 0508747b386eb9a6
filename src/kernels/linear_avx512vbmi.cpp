// The 4-bit VNNI matvec with nibbles decoded by vpermb: AVX-512 + VNNI + VBMI (Ice Lake, Zen 4),
// reached only through vnni_matvec_rows after cpu_has_avx512_vbmi(). Kernels: vnni_rows.h.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>

#include "kernels/backend.h"
#include "kernels/prefetch.h"

namespace inkling::kernels::detail {
namespace {

#include "kernels/simd_common.h"
#include "kernels/simd_avx512.h"
#include "kernels/vnni_rows.h"

}  // namespace

void vnni_vbmi_matvec_rows(const WeightMatrix& w, const PreparedX& px, int64_t row_begin,
                           int64_t row_end, float* y) {
  vnni_rows<true>(w, px, row_begin, row_end, y);
}

void vnni_vbmi_matvec_rows_multi(const WeightMatrix& w, const PreparedX* xs, int n, int64_t row_begin,
                                  int64_t row_end, float* y, int64_t ldy) {
  vnni_rows_multi<true>(w, xs, n, row_begin, row_end, y, ldy);
}

}  // namespace inkling::kernels::detail
