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

TEST(StepPacer, AMixedStepMeasuresTheMarginalPromptToken) {
  StepPacer pacer(0.5, 16, 8);
  pacer.record(2.0, 0, 200);  // 10 ms a token, including the step's weight reads
  pacer.record(0.1, 4, 0);
  pacer.record(0.3, 4, 40);   // (0.3 - 0.1) / 40 = 5 ms a token
  EXPECT_NEAR(pacer.prompt_token_seconds(), 0.01 + 0.3 * (0.005 - 0.01), 1e-12);
  for (int i = 0; i < 40; ++i) pacer.record(0.3, 4, 40);
  EXPECT_NEAR(pacer.prompt_token_seconds(), 0.005, 1e-6);
  EXPECT_NEAR(double(pacer.prompt_allowance(4, 250)), 80.0, 1.0);  // (0.5 - 0.1) / 0.005, the average still converging
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
