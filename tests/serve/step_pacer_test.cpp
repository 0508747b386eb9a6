#include "runtime/serve/step_pacer.h"

#include <gtest/gtest.h>

namespace inkling::serve {
namespace {

TEST(StepPacer, GivesTheWholeBudgetUntilAPromptTokenHasBeenTimed) {
  StepPacer pacer(0.5, 16, 8);
  EXPECT_EQ(pacer.prompt_allowance(4, 250), 250);
  pacer.record(0.1, 4, 0);  // decode only: says nothing about prompt tokens
  EXPECT_EQ(pacer.prompt_allowance(4, 250), 250);
}

TEST(StepPacer, WithoutDecodesOrWhenOffThePromptTakesTheBudget) {
  StepPacer off(0.0, 16, 8);
  off.record(2.0, 0, 200);
  EXPECT_EQ(off.prompt_allowance(4, 250), 250);

  StepPacer pacer(0.5, 16, 8);
  pacer.record(2.0, 0, 200);  // 10 ms a prompt token
  EXPECT_EQ(pacer.prompt_allowance(0, 250), 250);
}

TEST(StepPacer, FitsThePromptIntoTheTimeTheDecodesLeave) {
  StepPacer pacer(0.5, 16, 8);
  pacer.record(2.0, 0, 200);  // 10 ms a prompt token
  pacer.record(0.1, 4, 0);    // 100 ms for 4 decodes
  EXPECT_DOUBLE_EQ(pacer.prompt_token_seconds(), 0.01);
  EXPECT_EQ(pacer.prompt_allowance(4, 250), 40);  // (0.5 - 0.1) / 0.01
  EXPECT_EQ(pacer.prompt_allowance(4, 30), 30);   // never more than the budget
}

TEST(StepPacer, APromptAlwaysAdvancesTheMinimum) {
  StepPacer pacer(0.05, 16, 8);
  pacer.record(2.0, 0, 200);
  pacer.record(0.1, 4, 0);  // the decodes alone already take more than the target
  EXPECT_EQ(pacer.prompt_allowance(4, 250), 16);
  EXPECT_EQ(pacer.prompt_allowance(4, 10), 10);  // the budget still bounds it
}

TEST(StepPacer, FitsTheFixedCostOfAnyPromptChunkAndItsCostPerToken) {
  // Steps of F = 0.25 s (the prefill kernels' own pass over the weights) + 10 ms a prompt token,
  // beside decodes of 0.1 s or alone.
  StepPacer pacer(1.0, 16, 8);
  pacer.record(0.1, 4, 0);
  pacer.record(0.25 + 2.0, 0, 200);
  pacer.record(0.1 + 0.25 + 0.4, 4, 40);
  pacer.record(0.1 + 0.25 + 1.0, 4, 100);
  EXPECT_NEAR(pacer.prompt_token_seconds(), 0.01, 1e-9);
  EXPECT_NEAR(pacer.prompt_fixed_seconds(), 0.25, 1e-9);
  EXPECT_NEAR(double(pacer.prompt_allowance(4, 250)), 65.0, 1.0);  // (1.0 - 0.1 - 0.25) / 0.01
  StepPacer tight(0.5, 16, 8);
  tight.record(0.1, 4, 0);
  tight.record(0.25 + 2.0, 0, 200);
  tight.record(0.1 + 0.25 + 0.4, 4, 40);
  EXPECT_EQ(tight.prompt_allowance(4, 250), 16);  // no room beyond the fixed part: the minimum
}

TEST(StepPacer, ChunksOfOneSizeChargeEachTokenItsShareOfTheFixedCost) {
  StepPacer pacer(1.0, 16, 8);
  pacer.record(0.1, 4, 0);
  for (int i = 0; i < 5; ++i) pacer.record(0.1 + 0.25 + 0.16, 4, 16);
  EXPECT_NEAR(pacer.prompt_token_seconds(), 0.41 / 16, 1e-9);
  EXPECT_EQ(pacer.prompt_fixed_seconds(), 0.0);
  EXPECT_EQ(pacer.prompt_allowance(4, 250), int64_t(0.9 / (0.41 / 16)));
}

TEST(StepPacer, OldStepsFadeFromTheFit) {
  StepPacer pacer(1.0, 16, 8);
  pacer.record(0.1, 4, 0);
  pacer.record(0.1 + 5.0, 4, 100);  // a machine that was busy with something else
  for (int i = 0; i < 60; ++i) {
    pacer.record(0.1 + 0.2 + 0.01 * 50, 4, 50);
    pacer.record(0.1 + 0.2 + 0.01 * 100, 4, 100);
  }
  EXPECT_NEAR(pacer.prompt_token_seconds(), 0.01, 1e-4);
  EXPECT_NEAR(pacer.prompt_fixed_seconds(), 0.2, 1e-2);
}

TEST(StepPacer, UnmeasuredDecodeCountsInterpolateBetweenTheirNeighbours) {
  StepPacer pacer(1.0, 16, 16);
  EXPECT_LT(pacer.decode_seconds(4), 0);
  pacer.record(0.1, 2, 0);
  EXPECT_DOUBLE_EQ(pacer.decode_seconds(4), 0.1);  // only a smaller count known
  pacer.record(0.3, 10, 0);
  EXPECT_NEAR(pacer.decode_seconds(4), 0.15, 1e-12);
  EXPECT_DOUBLE_EQ(pacer.decode_seconds(1), 0.1);
  EXPECT_DOUBLE_EQ(pacer.decode_seconds(16), 0.3);
  EXPECT_DOUBLE_EQ(pacer.decode_seconds(40), 0.3);  // beyond --parallel: the largest count
}

TEST(StepPacer, ASlowStepMovesTheEstimateByLessThanAThird) {
  StepPacer pacer(0.5, 16, 8);
  pacer.record(0.1, 4, 0);
  pacer.record(1.0, 4, 0);
  EXPECT_NEAR(pacer.decode_seconds(4), 0.1 + 0.3 * 0.9, 1e-12);
  pacer.record(-1.0, 4, 0);  // a clock that went backwards is no measurement
  EXPECT_NEAR(pacer.decode_seconds(4), 0.1 + 0.3 * 0.9, 1e-12);
}

}  // namespace
}  // namespace inkling::serve
