// 4-bit matvec with VNNI (vpdpbusd): AVX-512 + AVX512_VNNI, reached only after
// cpu_has_avx512_vnni() and only with PreparedX::x_q8 (built by linear.cpp's prepare()).
// The kernels are in vnni_rows.h; this file holds the variant without VBMI (Ice Lake and Cascade
// Lake class CPUs have VNNI; not all have VBMI) and picks between the two.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <atomic>

#include "kernels/backend.h"
#include "kernels/prefetch.h"

namespace inkling::kernels::detail {
namespace {

#include "kernels/simd_common.h"
#include "kernels/simd_avx512.h"
#include "kernels/vnni_rows.h"

std::atomic<bool>& vbmi_enabled() {
  static std::atomic<bool> enabled{cpu_has_avx512_vbmi()};
  return enabled;
}

}  // namespace

// linear_avx512vbmi.cpp
void vnni_vbmi_matvec_rows(const WeightMatrix& w, const PreparedX& px, int64_t row_begin,
                           int64_t row_end, float* y);

void vnni_vbmi_matvec_rows_multi(const WeightMatrix& w, const PreparedX* xs, int n, int64_t row_begin,
                                  int64_t row_end, float* y, int64_t ldy);

void set_vnni_vbmi(bool enabled) { vbmi_enabled().store(enabled && cpu_has_avx512_vbmi()); }
bool vnni_vbmi() { return vbmi_enabled().load(std::memory_order_relaxed); }

void vnni_matvec_rows(const WeightMatrix& w, const PreparedX& px, int64_t row_begin,
                      int64_t row_end, float* y) {
  if (vnni_vbmi()) return vnni_vbmi_matvec_rows(w, px, row_begin, row_end, y);
  vnni_rows<false>(w, px, row_begin, row_end, y);
}

void vnni_matvec_rows_multi(const WeightMatrix& w, const PreparedX* xs, int n, int64_t row_begin, int64_t row_end,
                             float* y, int64_t ldy) {
  if (vnni_vbmi()) return vnni_vbmi_matvec_rows_multi(w, xs, n, row_begin, row_end, y, ldy);
  vnni_rows_multi<false>(w, xs, n, row_begin, row_end, y, ldy);
}

}  // namespace inkling::kernels::detail
