// ggml block encoders: what ggml's reference quantizers (quantize_row_*_ref, the path
// llama-quantize takes without an importance matrix) compute, written from the block layouts
// and the rounding rules ggml documents. Compiled without fused multiply-adds (CMakeLists.txt) so
// every product is rounded where the reference rounds it.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "tensor/dtype.h"
#include "tensor/error.h"
#include "tensor/ggml_quantize.h"

namespace inkling {
namespace {

constexpr int kSuper = 256;  // elements of a K-type super-block

// Round to nearest, ties to even, as ggml's K quantizers do (adding 1.5 * 2^23 makes the float
// unit round the value to an integer). Valid for |x| < 2^22.
int nearest_int(float x) {
  const float shifted = x + 12582912.0f;
  int32_t bits;
  std::memcpy(&bits, &shifted, 4);
  return (bits & 0x007fffff) - 0x00400000;
}

void put_half(uint8_t* at, float value) {
  const uint16_t bits = f32_to_f16(value);
  std::memcpy(at, &bits, 2);
}
float half_at(const uint8_t* at) {
  uint16_t bits;
  std::memcpy(&bits, at, 2);
  return f16_to_f32(bits);
}

// Q8_0: per 32 values, d = max|x| / 127 (f16), codes round(x / d) with ties away from zero.
void q8_0(const float* x, uint8_t* out) {
  float amax = 0;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
  put_half(out, d);
  for (int j = 0; j < 32; ++j) out[2 + j] = uint8_t(int8_t(std::round(x[j] * id)));
}

// The symmetric codes of Q4_0 (levels 8) and Q5_0 (levels 16) for 32 values: d = -(the value of
// largest magnitude) / levels, written as f16 at out; codes x / d + levels truncated after adding
// 0.5, at most 2 levels - 1.
void symmetric_codes(const float* x, int levels, uint8_t* out, uint8_t* codes) {
  float amax = 0, max = 0;
  for (int j = 0; j < 32; ++j)
    if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), max = x[j];
  const float d = max / float(-levels), id = d != 0.0f ? 1 / d : 0.0f;
  put_half(out, d);
  for (int j = 0; j < 32; ++j)
    codes[j] = uint8_t(std::min(2 * levels - 1, int(int8_t(x[j] * id + (float(levels) + 0.5f)))));
}

// Q4_0: the symmetric 16-level codes; byte j holds value j (low nibble) and value j + 16 (high).
void q4_0(const float* x, uint8_t* out) {
  uint8_t codes[32];
  symmetric_codes(x, 8, out, codes);
  for (int j = 0; j < 16; ++j) out[2 + j] = uint8_t(codes[j] | codes[j + 16] << 4);
}

// The 32 5-bit codes of Q5_0 / Q5_1: the low 4 bits as Q4_0's nibbles (value j low, j + 16
// high) in out[4, 20), the fifth bit of value j as bit j of the little-endian uint32 at out[0, 4).
void pack_5bit(const uint8_t* codes, uint8_t* out) {
  uint32_t high = 0;
  for (int j = 0; j < 32; ++j) high |= uint32_t(codes[j] >> 4) << j;
  for (int i = 0; i < 4; ++i) out[i] = uint8_t(high >> (8 * i));
  for (int j = 0; j < 16; ++j) out[4 + j] = uint8_t((codes[j] & 15) | (codes[j + 16] & 15) << 4);
}

// Q5_0: Q4_0 with 32 levels (the symmetric codes of levels 16), packed 5 bits a code.
void q5_0(const float* x, uint8_t* out) {
  uint8_t codes[32];
  symmetric_codes(x, 16, out, codes);
  pack_5bit(codes, out + 2);
}

// Q5_1: per 32 values, d = (max - min) / 31 and m = min (both f16), codes (x - min) / d truncated
// after adding 0.5, d and the division taken in f32 before d is rounded to f16.
void q5_1(const float* x, uint8_t* out) {
  float lo = x[0], hi = x[0];
  for (int j = 1; j < 32; ++j) lo = std::min(lo, x[j]), hi = std::max(hi, x[j]);
  const float d = (hi - lo) / 31, id = d != 0.0f ? 1 / d : 0.0f;
  put_half(out, d);
  put_half(out + 2, lo);
  uint8_t codes[32];
  for (int j = 0; j < 32; ++j) codes[j] = uint8_t((x[j] - lo) * id + 0.5f);
  pack_5bit(codes, out + 4);
}

// One sub-block of `n` values as scale * L + min with L in 0..nmax and min <= 0: the min-max
// start, then a search over nstep + 1 scales (nmax + rmin + rdelta * step codes across the range)
// each refit by weighted least squares, keeping the lowest weighted squared error. Returns the
// scale; *neg_min gets -min.
float fit_scale_min(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* neg_min, float rmin,
                    float rdelta, int nstep) {
  float lo = x[0], hi = x[0];
  float sum_w = weights[0], sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    sum_w += weights[i];
    sum_x += weights[i] * x[i];
  }
  if (lo > 0) lo = 0;
  if (hi == lo) {
    std::fill(L, L + n, uint8_t(0));
    *neg_min = -lo;
    return 0.0f;
  }
  float iscale = float(nmax) / (hi - lo);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = uint8_t(std::clamp(nearest_int(iscale * (x[i] - lo)), 0, nmax));
    const float diff = scale * float(L[i]) + lo - x[i];
    best_error += weights[i] * (diff * diff);
  }
  uint8_t trial[32];
  for (int step = 0; step <= nstep; ++step) {
    iscale = (rmin + rdelta * float(step) + float(nmax)) / (hi - lo);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * (x[i] - lo)), 0, nmax);
      trial[i] = uint8_t(l);
      const float w = weights[i];
      sum_l += w * float(l);
      sum_l2 += w * float(l) * float(l);
      sum_xl += w * float(l) * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (!(det > 0)) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (this_min > 0) {
      this_min = 0;
      this_scale = sum_xl / sum_l2;
    }
    float error = 0;
    for (int i = 0; i < n; ++i) {
      const float diff = this_scale * float(trial[i]) + this_min - x[i];
      error += weights[i] * (diff * diff);
    }
    if (error < best_error) {
      std::copy(trial, trial + n, L);
      best_error = error;
      scale = this_scale;
      lo = this_min;
    }
  }
  *neg_min = -lo;
  return scale;
}

// The part Q4_K and Q5_K share: 8 sub-blocks of 32, each value = d * scale_j * L - dmin * min_j
// with L in 0..nmax; the sub-block scales and mins are fitted (weights |x| + rms of the
// sub-block), quantized to 6 bits against the largest of each, and the codes recomputed from the
// quantized scales. Writes d, dmin and the 12 packed scale bytes to out[0, 16) and the codes to L.
void k_scales_and_codes(const float* x, int nmax, float rmin, int nstep, uint8_t* out, uint8_t* L) {
  float weights[32], scales[8], mins[8];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* sub = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += sub[l] * sub[l];
    const float rms = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = rms + std::fabs(sub[l]);
    scales[j] = fit_scale_min(32, nmax, sub, weights, L + 32 * j, &mins[j], rmin, 0.1f, nstep);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  uint8_t* packed = out + 4;
  std::memset(packed, 0, 12);
  // ggml keeps the rounded value in a byte before capping it at 63, hence the & 0xff.
  for (int j = 0; j < 8; ++j)
    k_pack_scale_min(packed, j, std::min(63, nearest_int(inv_scale * scales[j]) & 0xff),
                     std::min(63, nearest_int(inv_min * mins[j]) & 0xff));
  put_half(out, max_scale / 63.0f);
  put_half(out + 2, max_min / 63.0f);
  const float d_all = half_at(out), dmin_all = half_at(out + 2);
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    k_scale_min(packed, j, sc, m);
    const float d = d_all * float(sc);
    if (d == 0.0f) continue;  // the fitted codes stay, as in ggml (they decode to -dmin * m anyway)
    const float dm = dmin_all * float(m);
    for (int i = 0; i < 32; ++i)
      L[32 * j + i] = uint8_t(std::clamp(nearest_int((x[32 * j + i] + dm) / d), 0, nmax));
  }
}

// Q4_K: L in 0..15; 32 bytes per 64 values, value l in the low nibble of byte l and value l + 32
// in its high nibble.
void q4_k(const float* x, uint8_t* out) {
  uint8_t L[kSuper];
  k_scales_and_codes(x, 15, -1.0f, 20, out, L);
  uint8_t* qs = out + 16;
  for (int j = 0; j < kSuper; j += 64, qs += 32)
    for (int l = 0; l < 32; ++l) qs[l] = uint8_t(L[j + l] | L[j + l + 32] << 4);
}

// Q5_K: L in 0..31, a narrower scale search than Q4_K's; the low 4 bits packed as Q4_K's, the
// fifth bit of value 64 * p + l (p = 0..3, l < 32) as bit 2p of qh[l], of value 64 * p + 32 + l as
// bit 2p + 1.
void q5_k(const float* x, uint8_t* out) {
  uint8_t L[kSuper];
  k_scales_and_codes(x, 31, -0.5f, 15, out, L);
  uint8_t* qh = out + 16;
  uint8_t* qs = out + 48;
  std::memset(qh, 0, 32);
  for (int p = 0; p < 4; ++p, qs += 32)
    for (int l = 0; l < 32; ++l) {
      const int low = L[64 * p + l], high = L[64 * p + 32 + l];
      qs[l] = uint8_t((low & 15) | (high & 15) << 4);
      qh[l] = uint8_t(qh[l] | (low >> 4) << (2 * p) | (high >> 4) << (2 * p + 1));
    }
}

// A sub-block of `n` values as scale * (L - nmax) with L - nmax in -nmax..nmax-1, the scale
// starting from the value of largest magnitude and searched over 18 nearby steps by weighted
// (x^2) least squares. Returns the scale.
float fit_symmetric(int n, int nmax, const float* x, int8_t* L) {
  float amax = 0, max = 0;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), max = x[i];
  if (amax < 1e-15f) {
    std::fill(L, L + n, int8_t(0));
    return 0.0f;
  }
  auto code = [&](float iscale, int i) { return std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1); };
  float iscale = -float(nmax) / max;
  float sum_lx = 0, sum_l2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = code(iscale, i);
    L[i] = int8_t(l + nmax);
    const float w = x[i] * x[i];
    sum_lx += w * x[i] * float(l);
    sum_l2 += w * float(l) * float(l);
  }
  float scale = sum_l2 != 0.0f ? sum_lx / sum_l2 : 0.0f;
  float best = scale * sum_lx;
  for (int step = -9; step <= 9; ++step) {
    if (step == 0) continue;
    iscale = -(float(nmax) + 0.1f * float(step)) / max;
    sum_lx = sum_l2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = code(iscale, i);
      const float w = x[i] * x[i];
      sum_lx += w * x[i] * float(l);
      sum_l2 += w * float(l) * float(l);
    }
    if (sum_l2 > 0 && sum_lx * sum_lx > best * sum_l2) {
      for (int i = 0; i < n; ++i) L[i] = int8_t(code(iscale, i) + nmax);
      scale = sum_lx / sum_l2;
      best = scale * sum_lx;
    }
  }
  return scale;
}

// Q6_K: 16 sub-blocks of 16, each value = d * scale_j * (L - 32), L in 0..63, scale_j a signed
// 8-bit multiple of d (the largest-magnitude sub-block scale maps to -128).
void q6_k(const float* x, uint8_t* out) {
  int8_t L[kSuper];
  float scales[16];
  float max_scale = 0, max_abs_scale = 0;
  for (int j = 0; j < 16; ++j) {
    scales[j] = fit_symmetric(16, 32, x + 16 * j, L + 16 * j);
    if (std::fabs(scales[j]) > max_abs_scale) max_abs_scale = std::fabs(scales[j]), max_scale = scales[j];
  }
  std::memset(out, 0, 210);
  if (max_abs_scale < 1e-15f) return;  // d = 0: every value decodes to 0
  const float iscale = -128.0f / max_scale;
  put_half(out + 208, 1 / iscale);
  int8_t* sc = reinterpret_cast<int8_t*>(out + 192);
  for (int j = 0; j < 16; ++j) sc[j] = int8_t(std::min(127, nearest_int(iscale * scales[j])));
  const float d_all = half_at(out + 208);
  for (int j = 0; j < 16; ++j) {
    const float d = d_all * float(sc[j]);
    if (d == 0.0f) continue;
    for (int i = 0; i < 16; ++i) L[16 * j + i] = int8_t(std::clamp(nearest_int(x[16 * j + i] / d), -32, 31) + 32);
  }
  uint8_t* ql = out;
  uint8_t* qh = out + 128;
  for (int j = 0; j < kSuper; j += 128, ql += 64, qh += 32)
    for (int l = 0; l < 32; ++l) {
      const int a = L[j + l], b = L[j + l + 32], c = L[j + l + 64], e = L[j + l + 96];
      ql[l] = uint8_t((a & 0xF) | (c & 0xF) << 4);
      ql[l + 32] = uint8_t((b & 0xF) | (e & 0xF) << 4);
      qh[l] = uint8_t((a >> 4) | (b >> 4) << 2 | (c >> 4) << 4 | (e >> 4) << 6);
    }
}

}  // namespace

bool ggml_quantizable(GgmlType type) {
  switch (type) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::Q8_0:
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K: return true;
    default: return false;
  }
}

void quantize_ggml_row(GgmlType type, const float* values, uint8_t* out, int64_t elements) {
  const GgmlTypeInfo& info = ggml_type_info(type);
  if (!ggml_quantizable(type)) throw Error("no ggml encoder for " + std::string(info.name));
  if (elements % info.block_elements != 0)
    throw Error("a " + std::string(info.name) + " row needs a multiple of " + std::to_string(info.block_elements) +
                " values, got " + std::to_string(elements));
  const int64_t blocks = elements / info.block_elements;
  for (int64_t b = 0; b < blocks; ++b) {
    const float* x = values + b * info.block_elements;
    uint8_t* y = out + b * info.block_bytes;
    switch (type) {
      case GgmlType::F32: std::memcpy(y, x, 4); break;
      case GgmlType::F16: {
        const uint16_t bits = f32_to_f16(*x);
        std::memcpy(y, &bits, 2);
        break;
      }
      case GgmlType::BF16: {
        const uint16_t bits = f32_to_bf16(*x);
        std::memcpy(y, &bits, 2);
        break;
      }
      case GgmlType::Q8_0: q8_0(x, y); break;
      case GgmlType::Q4_0: q4_0(x, y); break;
      case GgmlType::Q5_0: q5_0(x, y); break;
      case GgmlType::Q5_1: q5_1(x, y); break;
      case GgmlType::Q4_K: q4_k(x, y); break;
      case GgmlType::Q5_K: q5_k(x, y); break;
      case GgmlType::Q6_K: q6_k(x, y); break;
      default: break;
    }
  }
}

}  // namespace inkling
