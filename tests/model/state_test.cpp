// Sequence states that grow, and snapshots that restore a prefix exactly (the prompt cache's
// contract): the continuation from a restored state gives the logits the uninterrupted run gives.
#include <gtest/gtest.h>

#include "model/forward.h"
#include "model_fixture.h"
#include "tensor/error.h"

namespace inkling {
namespace {

using testing::max_abs_diff;
using testing::open_tiny;
using testing::random_tokens;

RunOptions small_options(DType kv_dtype) {
  RunOptions options;
  options.kv_dtype = kv_dtype;
  options.max_chunk = 16;  // tiny window 16: rings of 31 slots
  options.context = 160;
  return options;
}

// Feeds `tokens` from the state's position in chunks of `chunk`, then `decode` more one by one;
// returns the logits after every feed, concatenated.
std::vector<float> continue_run(InklingModel& model, SequenceState& state, std::span<const int32_t> tokens,
                                int64_t chunk) {
  std::vector<float> all, step(static_cast<size_t>(model.vocab()));
  for (size_t at = 0; at < tokens.size(); at += size_t(chunk)) {
    const size_t n = std::min(tokens.size() - at, size_t(chunk));
    model.prefill(state, tokens.subspan(at, n), step.data());
    all.insert(all.end(), step.begin(), step.end());
  }
  return all;
}

class SnapshotRestore : public ::testing::TestWithParam<std::string> {};

TEST_P(SnapshotRestore, ContinuationFromARestoredStateIsBitIdentical) {
  const Checkpoint& ckpt = open_tiny(GetParam());
  for (DType kv_dtype : {DType::F32, DType::BF16}) {
    InklingModel model(ckpt, small_options(kv_dtype));
    const std::vector<int32_t> tokens = random_tokens(140, 7);
    // Cut points before the window fills, inside the first ring, and after the ring wrapped.
    for (int64_t cut : {5, 23, 70, 101}) {
      SequenceState original = model.new_sequence(8);  // grows as it goes
      model.prefill(original, std::span(tokens).first(size_t(cut)), nullptr);
      const StateSnapshot snap = model.snapshot(original);
      EXPECT_EQ(snap.position, cut);
      EXPECT_LT(snap.bytes(), model.state_bytes(cut) + int64_t(cut) * 4 + 1);
      // Restored into a fresh small state and into one full of another sequence's rows.
      SequenceState fresh = model.new_sequence(1);
      model.restore(snap, fresh);
      SequenceState dirty = model.new_sequence();
      model.prefill(dirty, random_tokens(120, 8), nullptr);
      model.restore(snap, dirty);
      EXPECT_EQ(dirty.tokens, original.tokens);
      const auto rest = std::span(tokens).subspan(size_t(cut));
      const std::vector<float> want = continue_run(model, original, rest, 9);
      EXPECT_EQ(max_abs_diff(continue_run(model, fresh, rest, 9), want), 0.0) << "cut " << cut;
      EXPECT_EQ(max_abs_diff(continue_run(model, dirty, rest, 9), want), 0.0) << "cut " << cut;
    }
  }
}

// The prompt cache's claim: a prompt whose prefix comes from a snapshot gets the logits a cold run
// of the whole prompt gets, bit for bit (the cold run chunks the prompt at other places, which
// changes no bit).
TEST_P(SnapshotRestore, CachedPrefixMatchesAColdRun) {
  const Checkpoint& ckpt = open_tiny(GetParam());
  InklingModel model(ckpt, small_options(DType::F32));
  const std::vector<int32_t> prompt = random_tokens(130, 9);
  SequenceState earlier = model.new_sequence();
  model.prefill(earlier, std::span(prompt).first(77), nullptr);  // the previous turn
  const StateSnapshot snap = model.snapshot(earlier);
  std::vector<float> cached(static_cast<size_t>(model.vocab())), cold(cached.size());
  SequenceState resumed = model.new_sequence();
  model.restore(snap, resumed);
  model.prefill(resumed, std::span(prompt).subspan(77), cached.data());
  SequenceState whole = model.new_sequence();
  model.prefill(whole, prompt, cold.data());
  EXPECT_EQ(max_abs_diff(cached, cold), 0.0);
  EXPECT_EQ(resumed.tokens, whole.tokens);
}

// The next turn of a conversation: the snapshot holds a prompt and a decoded response. A cold run
// prefills the response tokens, which the turn before decoded; batch invariance makes the two
// bit for bit equal, and without it they differ by f32 rounding only.
TEST_P(SnapshotRestore, NextTurnFromADecodedResponseMatchesAColdRun) {
  const Checkpoint& ckpt = open_tiny(GetParam());
  const std::vector<int32_t> conversation = random_tokens(140, 21);
  const size_t prompt = 70, response = 20;
  for (const bool invariant : {true, false}) {
    RunOptions options = small_options(DType::BF16);
    options.batch_invariant = invariant;
    options.max_chunk = 64;  // the cold run's chunks take the tiled matmuls when not invariant
    InklingModel model(ckpt, options);
    SequenceState turn = model.new_sequence();
    model.prefill(turn, std::span(conversation).first(prompt), nullptr);
    for (size_t i = prompt; i < prompt + response; ++i) model.prefill(turn, std::span(conversation).subspan(i, 1), nullptr);
    const StateSnapshot snap = model.snapshot(turn);
    SequenceState resumed = model.new_sequence();
    model.restore(snap, resumed);
    std::vector<float> warm(static_cast<size_t>(model.vocab())), cold(warm.size());
    model.prefill(resumed, std::span(conversation).subspan(prompt + response), warm.data());
    SequenceState whole = model.new_sequence();
    model.prefill(whole, conversation, cold.data());
    const double diff = max_abs_diff(warm, cold), spread = testing::stddev(cold);
    std::printf("[%s] next turn vs cold run%s: max |diff| %.3g, logits std %.3g\n", GetParam().c_str(),
                invariant ? " (batch-invariant)" : "", diff, spread);
    if (invariant)
      EXPECT_EQ(diff, 0.0);
    else
      EXPECT_LT(diff, 1e-4 * spread);
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, SnapshotRestore, ::testing::Values("original-bf16", "mlx-4bit", "nvfp4"));

TEST(SequenceState, GrowsAsItIsFedAndMatchesAFullSizeOne) {
  const Checkpoint& ckpt = open_tiny("original-f32");
  InklingModel model(ckpt, small_options(DType::BF16));
  const std::vector<int32_t> tokens = random_tokens(150, 3);
  SequenceState small = model.new_sequence(1), full = model.new_sequence();
  std::vector<float> a, b;
  model.forward_all(small, tokens, a);
  model.forward_all(full, tokens, b);
  EXPECT_EQ(max_abs_diff(a, b), 0.0);
  EXPECT_LT(model.state_bytes(10), model.state_bytes(150));
  EXPECT_EQ(model.state_bytes(100000), model.state_bytes(160));  // capped at the context
}

TEST(SequenceState, RestoreRejectsAnotherModelsSnapshot) {
  InklingModel tiny(open_tiny("original-f32"), small_options(DType::F32));
  InklingModel other_dtype(open_tiny("original-f32"), small_options(DType::BF16));
  SequenceState state = tiny.new_sequence();
  tiny.prefill(state, random_tokens(10, 1), nullptr);
  const StateSnapshot snap = tiny.snapshot(state);
  SequenceState target = other_dtype.new_sequence();
  EXPECT_THROW(other_dtype.restore(snap, target), Error);
  StateSnapshot empty;
  EXPECT_THROW(tiny.restore(empty, target), Error);
}

}  // namespace
}  // namespace inkling
