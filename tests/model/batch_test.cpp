// The batched step against each sequence run alone: B sequences of different lengths that start
// and end at different steps, prefill chunks mixed with decode tokens, sliding rings that wrap.
#include <gtest/gtest.h>

#include <cstdio>

#include "model/forward.h"
#include "model_fixture.h"
#include "tensor/error.h"

namespace inkling {
namespace {

using testing::open_tiny;
using testing::random_tokens;

// One sequence of the schedule: it joins at step `start`, feeds its prompt in chunks of at most
// `chunk` tokens, then one token per step until it has fed `total`.
struct Planned {
  int64_t start, prompt, chunk, total;
  std::vector<int32_t> tokens;
};

// Tokens the sequence feeds at `step` (empty when it is not running then).
std::span<const int32_t> share_at(const Planned& p, int64_t step, int64_t fed) {
  if (step < p.start || fed >= p.total) return {};
  const int64_t n = fed < p.prompt ? std::min(p.chunk, p.prompt - fed) : 1;
  return std::span<const int32_t>(p.tokens).subspan(size_t(fed), size_t(n));
}

struct BatchCase {
  std::string layout;
  DType kv_dtype;
  bool fast;
};

void PrintTo(const BatchCase& c, std::ostream* os) {
  *os << c.layout << " " << dtype_name(c.kv_dtype) << (c.fast ? " fast" : "");
}

class BatchedStep : public ::testing::TestWithParam<BatchCase> {};

// Spread-relative difference of every logit row the batched step produced against the same
// sequence fed the same shares alone.
double batched_against_alone(const BatchCase& c, double* spread_out) {
  const Checkpoint& ckpt = open_tiny(c.layout);
  RunOptions options;
  options.kv_dtype = c.kv_dtype;
  options.fast = c.fast;
  options.max_chunk = 64;  // tiny window 16: rings of 79 slots, which 95 tokens wrap
  options.context = 128;
  InklingModel batched(ckpt, options), alone(ckpt, options);
  std::vector<Planned> plan = {
      {0, 40, 13, 70, {}}, {0, 1, 1, 30, {}}, {2, 90, 32, 95, {}}, {3, 5, 5, 20, {}}, {6, 17, 4, 50, {}},
  };
  for (size_t i = 0; i < plan.size(); ++i) plan[i].tokens = random_tokens(plan[i].total, uint32_t(100 + i));
  std::vector<SequenceState> states, solo;
  std::vector<int64_t> fed(plan.size(), 0);
  for (size_t i = 0; i < plan.size(); ++i) {
    states.push_back(batched.new_sequence());
    solo.push_back(alone.new_sequence());
  }
  const int64_t vocab = batched.vocab();
  std::vector<std::vector<float>> got(plan.size(), std::vector<float>(size_t(vocab)));
  std::vector<float> want(static_cast<size_t>(vocab));
  double worst = 0.0, spread = 0.0;
  int64_t compared = 0, mixed_steps = 0;
  for (int64_t step = 0;; ++step) {
    std::vector<BatchItem> items;
    std::vector<size_t> which;
    bool prefill = false, decode = false;
    for (size_t i = 0; i < plan.size(); ++i) {
      std::span<const int32_t> share = share_at(plan[i], step, fed[i]);
      if (share.empty()) continue;
      // Every other prefill chunk samples nothing, as the middle chunks of a long prompt do.
      const bool samples = fed[i] + int64_t(share.size()) >= plan[i].prompt || step % 2 == 0;
      items.push_back({&states[i], share, samples ? got[i].data() : nullptr});
      which.push_back(i);
      (share.size() > 1 ? prefill : decode) = true;
    }
    if (items.empty()) break;
    mixed_steps += prefill && decode;
    batched.forward_batch(items);
    for (size_t k = 0; k < items.size(); ++k) {
      const size_t i = which[k];
      alone.prefill(solo[i], items[k].tokens, items[k].logits ? want.data() : nullptr);
      fed[i] += int64_t(items[k].tokens.size());
      if (!items[k].logits) continue;
      spread = std::max(spread, testing::stddev(want));
      worst = std::max(worst, testing::max_abs_diff(got[i], want));
      ++compared;
    }
  }
  EXPECT_GT(mixed_steps, 3);
  EXPECT_GT(compared, 100);
  for (size_t i = 0; i < plan.size(); ++i) {
    EXPECT_EQ(states[i].position, plan[i].total);
    EXPECT_EQ(states[i].tokens, plan[i].tokens);
  }
  *spread_out = spread;
  return worst;
}

TEST_P(BatchedStep, EachSequenceGetsWhatItGetsAlone) {
  const BatchCase& c = GetParam();
  double spread = 0.0;
  const double worst = batched_against_alone(c, &spread);
  std::printf("[%s %s%s] batched vs alone: max |diff| %.3g, logits std %.3g, ratio %.2g\n", c.layout.c_str(),
              std::string(dtype_name(c.kv_dtype)).c_str(), c.fast ? " fast" : "", worst, spread, worst / spread);
  // Bit for bit, in both precisions: each row takes the kernels its own sequence's share of the
  // step selects (decode token or prompt chunk), whatever the others bring.
  EXPECT_EQ(worst, 0.0);
}

INSTANTIATE_TEST_SUITE_P(Layouts, BatchedStep,
                         ::testing::Values(BatchCase{"original-f32", DType::F32, false},
                                           BatchCase{"original-bf16", DType::F32, false},
                                           BatchCase{"nvfp4", DType::F32, false},
                                           BatchCase{"mlx-4bit", DType::F32, false},
                                           BatchCase{"mlx-8bit", DType::F32, false},
                                           BatchCase{"mlx-4bit", DType::BF16, false},
                                           BatchCase{"mlx-4bit", DType::F32, true},
                                           BatchCase{"nvfp4", DType::BF16, true}),
                         [](const auto& info) {
                           std::string name = info.param.layout + "_" + std::string(dtype_name(info.param.kv_dtype)) +
                                              (info.param.fast ? "_fast" : "");
                           for (char& ch : name)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return name;
                         });

TEST(BatchedStepErrors, RejectsBadItemsWithoutTouchingState) {
  const Checkpoint& ckpt = open_tiny("original-f32");
  RunOptions options;
  options.max_chunk = 8;
  options.context = 64;
  InklingModel model(ckpt, options);
  SequenceState a = model.new_sequence(), b = model.new_sequence();
  const std::vector<int32_t> five = random_tokens(5, 1), bad = {1, -3};
  // Over the step budget: 5 + 5 > 8.
  std::vector<BatchItem> items = {{&a, five, nullptr}, {&b, five, nullptr}};
  EXPECT_THROW(model.forward_batch(items), Error);
  // The same sequence twice.
  items = {{&a, std::span(five).first(2), nullptr}, {&a, std::span(five).first(2), nullptr}};
  EXPECT_THROW(model.forward_batch(items), Error);
  // A bad token in the second item: the first must not have advanced.
  items = {{&a, std::span(five).first(2), nullptr}, {&b, bad, nullptr}};
  EXPECT_THROW(model.forward_batch(items), Error);
  // No tokens.
  items = {{&a, {}, nullptr}};
  EXPECT_THROW(model.forward_batch(items), Error);
  EXPECT_EQ(a.position, 0);
  EXPECT_EQ(b.position, 0);
  EXPECT_TRUE(a.tokens.empty());
}

}  // namespace
}  // namespace inkling
