// Decode attention (attend_kv_group) against a direct double-precision evaluation of its
// definition, on head sizes that take each of its paths: 16-column vector blocks for the scores
// (and a scalar tail when the head size is not a multiple of 16), whole column blocks for the
// weighted values (and a partial last block), every unrolled group size and the head-by-head one.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "model/attention.h"
#include "tensor/dtype.h"

namespace inkling {
namespace {

struct Case {
  int64_t group, d, keys;
  bool bf16, ring;
};

// One KV head's cache of `slots` rows, each row holding `kv_heads` heads (the head under test is
// head 1, so rows are strided as in the real cache).
struct Cache {
  int64_t d, slots, kv_heads = 3;
  bool bf16;
  std::vector<uint8_t> keys, values;
  Cache(int64_t d, int64_t slots, bool bf16, std::mt19937& rng) : d(d), slots(slots), bf16(bf16) {
    std::normal_distribution<float> normal;
    const size_t bytes = size_t(slots * kv_heads * d) * (bf16 ? 2 : 4);
    keys.resize(bytes);
    values.resize(bytes);
    for (std::vector<uint8_t>* buffer : {&keys, &values})
      for (int64_t i = 0; i < slots * kv_heads * d; ++i) {
        const float v = normal(rng);
        if (bf16) {
          const uint16_t b = f32_to_bf16(v);
          std::memcpy(buffer->data() + 2 * i, &b, 2);
        } else {
          std::memcpy(buffer->data() + 4 * i, &v, 4);
        }
      }
  }
  int64_t row_bytes() const { return kv_heads * d * (bf16 ? 2 : 4); }
  KvHeadView view(bool ring) const {
    const int64_t head = d * (bf16 ? 2 : 4);
    return {keys.data() + head, values.data() + head, row_bytes(), slots, ring, bf16};
  }
  double at(const std::vector<uint8_t>& buffer, const KvHeadView& v, int64_t position, int64_t i) const {
    const uint8_t* row = (&buffer == &keys ? v.key(position) : v.value(position));
    if (bf16) {
      uint16_t b;
      std::memcpy(&b, row + 2 * i, 2);
      return bf16_to_f32(b);
    }
    float f;
    std::memcpy(&f, row + 4 * i, 4);
    return f;
  }
};

TEST(DecodeAttention, MatchesDirectEvaluation) {
  std::mt19937 rng(21);
  std::normal_distribution<float> normal;
  const int64_t dr = 5, extent = 40;
  const float tau = 1.25f;
  const Case cases[] = {{4, 128, 100, true, false}, {4, 128, 37, false, false}, {8, 128, 70, true, true},
                        {2, 128, 33, true, false},  {1, 128, 50, false, false}, {4, 80, 61, true, false},
                        {4, 20, 45, false, false},  {3, 48, 29, true, true},   {8, 16, 9, false, false}};
  for (const Case& c : cases) {
    SCOPED_TRACE("group " + std::to_string(c.group) + ", d " + std::to_string(c.d) + ", keys " +
                 std::to_string(c.keys) + (c.bf16 ? ", bf16" : ", f32") + (c.ring ? ", ring" : ""));
    // A ring of fewer slots than positions: positions lo..p wrap around it.
    const int64_t slots = c.ring ? c.keys + 3 : c.keys + 10;
    const int64_t lo = c.ring ? 7 : 0, p = lo + c.keys - 1;
    Cache cache(c.d, slots, c.bf16, rng);
    const KvHeadView view = cache.view(c.ring);
    std::vector<float> q(size_t(c.group * c.d)), r(size_t(c.group * dr)), rel(size_t(dr * extent));
    for (float& v : q) v = normal(rng);
    for (float& v : r) v = normal(rng);
    for (float& v : rel) v = normal(rng);
    std::vector<float> scores(size_t(2 * c.group * c.keys), NAN), out(size_t(c.group * c.d), NAN);
    const float inv_d = 1.0f / float(c.d);
    attend_kv_group(c.group, q.data(), r.data(), rel.data(), c.d, dr, extent, tau, inv_d, lo, p, view,
                    scores.data(), out.data());
    for (int64_t h = 0; h < c.group; ++h) {
      std::vector<double> logit(size_t(c.keys));
      double best = -INFINITY;
      for (int64_t j = lo; j <= p; ++j) {
        double dot = 0.0, bias = 0.0;
        for (int64_t i = 0; i < c.d; ++i) dot += double(q[size_t(h * c.d + i)]) * cache.at(cache.keys, view, j, i);
        const int64_t dist = p - j;
        if (dist < extent)
          for (int64_t e = 0; e < dr; ++e) bias += double(r[size_t(h * dr + e)]) * rel[size_t(e * extent + dist)];
        logit[size_t(j - lo)] = tau * (dot * inv_d + bias);
        best = std::max(best, logit[size_t(j - lo)]);
      }
      double total = 0.0;
      for (double& l : logit) total += (l = std::exp(l - best));
      double worst = 0.0, scale = 0.0;
      for (int64_t i = 0; i < c.d; ++i) {
        double want = 0.0;
        for (int64_t j = lo; j <= p; ++j) want += logit[size_t(j - lo)] / total * cache.at(cache.values, view, j, i);
        worst = std::max(worst, std::fabs(double(out[size_t(h * c.d + i)]) - want));
        scale = std::max(scale, std::fabs(want));
      }
      EXPECT_LT(worst, 1e-5 * std::max(scale, 1.0)) << "head " << h;
    }
  }
}

}  // namespace
}  // namespace inkling
