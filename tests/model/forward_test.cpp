// Production forward pass against the reference, caches, causality and parity, on tiny
// checkpoints of every layout.
#include <gtest/gtest.h>

#include <cstdio>

#include "model/forward.h"
#include "model/reference.h"
#include "model_fixture.h"
#include "tensor/dtype.h"
#include "tensor/error.h"

namespace inkling {
namespace {

using testing::max_abs_diff;
using testing::open_tiny;
using testing::random_tokens;

class EveryLayout : public ::testing::TestWithParam<std::string> {};
class EveryLayoutFast : public ::testing::TestWithParam<std::string> {};

// 80 tokens: past the window (16), the global layer's extent (24) and the tau floor (32).
constexpr int64_t kTokens = 80;

TEST_P(EveryLayout, ProductionMatchesReference) {
  const Checkpoint& ckpt = open_tiny(GetParam());
  std::vector<int32_t> tokens = random_tokens(kTokens, 11);
  std::vector<float> expected = reference::forward(ckpt, tokens);
  RunOptions options;
  options.kv_dtype = DType::F32;
  options.max_chunk = 32;  // chunked, so the ring cache wraps
  options.context = 128;
  InklingModel model(ckpt, options);
  SequenceState state = model.new_sequence();
  std::vector<float> logits;
  model.forward_all(state, tokens, logits);
  double diff = max_abs_diff(logits, expected), spread = testing::stddev(expected);
  std::printf("[%s] production vs reference: max |diff| %.3g, logits std %.3g, ratio %.2g\n", GetParam().c_str(),
              diff, spread, diff / spread);
  EXPECT_LT(diff, 1e-3 * spread);
}

// Weights copied into huge pages are the same bytes: logits bit-identical to the mapped ones, and
// the embedding (gathered, not streamed) stays in the mapping.
TEST_P(EveryLayout, HugePageWeightsGiveIdenticalLogits) {
  const Checkpoint& mapped = open_tiny(GetParam());
  CheckpointOptions options;
  options.memory = WeightMemory::HugePages;
  uint64_t last_done = 0, last_total = 0;
  options.progress = [&](uint64_t done, uint64_t total) { last_done = done, last_total = total; };
  std::unique_ptr<Checkpoint> resident = Checkpoint::open(testing::tiny_checkpoint(GetParam()), options);
  EXPECT_GT(resident->store().resident_bytes(), 0u);
  EXPECT_EQ(last_done, last_total);
  // Whether `data` is where the file mapping holds the tensor bound as `canonical`.
  auto in_file_mapping = [&](const std::string& canonical, const uint8_t* data) {
    for (const BindingRecord& binding : resident->bindings()) {
      if (binding.canonical != canonical) continue;
      for (const auto& file : resident->store().files())
        if (auto view = file->find(binding.source); view && view->data == data) return true;
    }
    return false;
  };
  EXPECT_TRUE(in_file_mapping("model.embed_tokens.weight", resident->weights().embed.data));
  EXPECT_FALSE(in_file_mapping("lm_head.weight", resident->weights().lm_head.data));
  std::vector<int32_t> tokens = random_tokens(40, 21);
  RunOptions run;
  run.context = 64;
  std::vector<float> want, got;
  {
    InklingModel model(mapped, run);
    SequenceState state = model.new_sequence();
    model.forward_all(state, tokens, want);
  }
  {
    InklingModel model(*resident, run);
    SequenceState state = model.new_sequence();
    model.forward_all(state, tokens, got);
  }
  ASSERT_EQ(want.size(), got.size());
  EXPECT_EQ(max_abs_diff(got, want), 0.0);
}

TEST_P(EveryLayout, PrefillIsCausal) {
  const Checkpoint& ckpt = open_tiny(GetParam());
  std::vector<int32_t> tokens = random_tokens(kTokens, 12);
  RunOptions options;
  options.kv_dtype = DType::F32;
  InklingModel model(ckpt, options);
  std::vector<float> full, prefix;
  SequenceState a = model.new_sequence(), b = model.new_sequence();
  model.forward_all(a, tokens, full);
  std::vector<int32_t> head(tokens.begin(), tokens.begin() + 40);
  tokens[45] = (tokens[45] + 1) % 200058;  // later tokens differ: earlier logits must not move
  model.forward_all(b, head, prefix);
  EXPECT_EQ(max_abs_diff(prefix, full), 0.0);
}

// Batch-invariant runs must match to the bit; the others differ by f32 rounding (the prefill
// matmuls sum in another order than the decode matvecs).
void expect_decode_matches_prefill(const std::string& layout, DType kv_dtype, double tolerance,
                                   bool batch_invariant = false, bool fast = false) {
  const Checkpoint& ckpt = open_tiny(layout);
  std::vector<int32_t> tokens = random_tokens(kTokens, 13);
  RunOptions options;
  options.kv_dtype = kv_dtype;
  options.batch_invariant = batch_invariant;
  options.fast = fast;
  InklingModel model(ckpt, options);
  SequenceState one_shot = model.new_sequence(), stepped = model.new_sequence();
  std::vector<float> all;
  model.forward_all(one_shot, tokens, all);
  std::vector<float> step(static_cast<size_t>(model.vocab()));
  double worst = 0.0;
  for (int64_t t = 0; t < kTokens; ++t) {
    model.prefill(stepped, std::span<const int32_t>(&tokens[size_t(t)], 1), step.data());
    worst = std::max(worst, max_abs_diff(step, all, size_t(t * model.vocab()), step.size()));
  }
  std::printf("[%s] decode vs prefill (%s KV%s%s): max |diff| %.3g\n", layout.c_str(),
              std::string(dtype_name(kv_dtype)).c_str(), batch_invariant ? ", batch-invariant" : "",
              fast ? ", fast" : "", worst);
  EXPECT_LE(worst, tolerance);
}

TEST_P(EveryLayout, DecodeMatchesPrefillF32Kv) { expect_decode_matches_prefill(GetParam(), DType::F32, 1e-4); }
TEST_P(EveryLayout, DecodeMatchesPrefillBf16Kv) { expect_decode_matches_prefill(GetParam(), DType::BF16, 3e-3); }
TEST_P(EveryLayout, BatchInvariantDecodeIsPrefillBitForBit) {
  expect_decode_matches_prefill(GetParam(), DType::F32, 0.0, true);
  expect_decode_matches_prefill(GetParam(), DType::BF16, 0.0, true);
  expect_decode_matches_prefill(GetParam(), DType::BF16, 0.0, true, /*fast=*/true);
}

// Chunks of 7 take the decode attention kernel, chunks of 256 the transposed prefill one: both sum
// each score in the same order, and the matmuls' rows never depend on n.
TEST_P(EveryLayout, ChunkedPrefillEqualsOneShot) {
  const Checkpoint& ckpt = open_tiny(GetParam());
  std::vector<int32_t> tokens = random_tokens(kTokens, 14);
  RunOptions big, small;
  big.kv_dtype = small.kv_dtype = DType::F32;
  big.max_chunk = 256;
  small.max_chunk = 7;
  InklingModel model_big(ckpt, big), model_small(ckpt, small);
  SequenceState a = model_big.new_sequence(), b = model_small.new_sequence();
  std::vector<float> la(static_cast<size_t>(model_big.vocab())), lb(la.size());
  model_big.prefill(a, tokens, la.data());
  model_small.prefill(b, tokens, lb.data());
  EXPECT_EQ(max_abs_diff(la, lb), 0.0);
}

INSTANTIATE_TEST_SUITE_P(Tiny, EveryLayout, ::testing::ValuesIn(testing::all_layouts()),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& ch : name)
                             if (ch == '-') ch = '_';
                           return name;
                         });

TEST(SequenceState, SnapshotRestoreReplaysExactly) {
  const Checkpoint& ckpt = open_tiny("original-bf16");
  InklingModel model(ckpt, RunOptions{});
  std::vector<int32_t> tokens = random_tokens(60, 15);
  SequenceState state = model.new_sequence();
  std::vector<float> logits(static_cast<size_t>(model.vocab())), first(logits.size()), again(logits.size());
  model.prefill(state, std::span<const int32_t>(tokens.data(), 40), logits.data());
  SequenceState snapshot = state;  // copy = snapshot
  model.prefill(state, std::span<const int32_t>(tokens.data() + 40, 20), first.data());
  std::vector<int32_t> other = random_tokens(20, 16);
  model.prefill(state, other, logits.data());  // advance somewhere else
  state = snapshot;                             // restore
  model.prefill(state, std::span<const int32_t>(tokens.data() + 40, 20), again.data());
  EXPECT_EQ(max_abs_diff(first, again), 0.0);
  EXPECT_EQ(state.position, 60);
}

// --llama-rounding stores the K and V its banded flash attention would see: every value f16-exact
// (an f32 cache would otherwise hold values f16 cannot represent).
TEST(LlamaRounding, KeysAndValuesAreStoredF16Exact) {
  const Checkpoint& ckpt = open_tiny("original-f32");
  auto count_f16_inexact = [&](bool llama_rounding) {
    RunOptions options;
    options.kv_dtype = DType::F32;
    options.llama_rounding = llama_rounding;
    InklingModel model(ckpt, options);
    SequenceState state = model.new_sequence();
    std::vector<float> logits(static_cast<size_t>(model.vocab()));
    model.prefill(state, random_tokens(40, 21), logits.data());
    int64_t inexact = 0, values = 0;
    for (const LayerState& layer : state.layers)
      for (const AlignedVector<uint8_t>* rows : {&layer.kv.keys, &layer.kv.values}) {
        const float* v = reinterpret_cast<const float*>(rows->data());
        for (size_t i = 0; i < rows->size() / 4; ++i, ++values) inexact += f16_to_f32(f32_to_f16(v[i])) != v[i];
      }
    EXPECT_GT(values, 0);
    return inexact;
  };
  EXPECT_EQ(count_f16_inexact(true), 0);
  EXPECT_GT(count_f16_inexact(false), 0);
}

TEST(BadInput, ClearErrors) {
  const Checkpoint& ckpt = open_tiny("original-bf16");
  RunOptions options;
  options.context = 16;
  InklingModel model(ckpt, options);
  SequenceState state = model.new_sequence();
  std::vector<float> logits(static_cast<size_t>(model.vocab()));
  auto expect_error = [&](std::vector<int32_t> tokens, const std::string& words) {
    try {
      model.prefill(state, tokens, logits.data());
      FAIL() << "no error for " << words;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  expect_error({}, "empty prompt");
  expect_error({1, 200058}, "out of range");
  expect_error({-1}, "out of range");
  expect_error(random_tokens(17, 3), "context limit");
  EXPECT_EQ(state.position, 0);  // nothing was consumed by the failed calls
}

}  // namespace
}  // namespace inkling

namespace inkling {
namespace {

// Fast mode (bf16 prefill activations, int8 4-bit decode activations) against the exact path.
TEST_P(EveryLayoutFast, FastModeStaysCloseToExact) {
  const Checkpoint& ckpt = testing::open_tiny(GetParam());
  std::vector<int32_t> tokens = testing::random_tokens(64, 17);
  RunOptions exact_options, fast_options;
  fast_options.fast = true;
  InklingModel exact(ckpt, exact_options), fast(ckpt, fast_options);
  SequenceState a = exact.new_sequence(), b = fast.new_sequence();
  std::vector<float> la, lb;
  exact.forward_all(a, tokens, la);
  fast.forward_all(b, tokens, lb);
  const int64_t vocab = exact.vocab();
  double sq = 0.0;
  int agree = 0;
  for (int64_t t = 0; t < 64; ++t) {
    auto row_a = la.begin() + t * vocab, row_b = lb.begin() + t * vocab;
    agree += std::max_element(row_a, row_a + vocab) - row_a == std::max_element(row_b, row_b + vocab) - row_b;
  }
  for (size_t i = 0; i < la.size(); ++i) sq += (double(la[i]) - lb[i]) * (double(la[i]) - lb[i]);
  double rms_ratio = std::sqrt(sq / double(la.size())) / testing::stddev(la);
  std::printf("[%s] fast vs exact: RMS diff / std %.3g, top-1 agreement %d/64\n", GetParam().c_str(), rms_ratio, agree);
  EXPECT_LT(rms_ratio, 0.1);
  EXPECT_GE(agree, 48);
}

INSTANTIATE_TEST_SUITE_P(Tiny, EveryLayoutFast, ::testing::ValuesIn(testing::all_layouts()),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& ch : name)
                             if (ch == '-') ch = '_';
                           return name;
                         });

}  // namespace
}  // namespace inkling
