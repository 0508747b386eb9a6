// The allowed-token mask over the real 200k vocabulary equals trying every token one by one.
#include <gtest/gtest.h>

#include <random>

#include "runtime/grammar/json_schema.h"
#include "runtime/grammar/matcher.h"
#include "runtime/tokenizer/tokenizer.h"

namespace inkling::grammar {
namespace {

const std::shared_ptr<const TokenVocabulary>& vocabulary() {
  static const auto vocab = [] {
    Tokenizer tokenizer = Tokenizer::from_file(std::string(INKLING_SOURCE_DIR) + "/data/tokenizer.json");
    return TokenVocabulary::from_tokenizer(tokenizer, 200058, {200006});
  }();
  return vocab;
}

TokenMask brute_force(const GrammarMatcher& matcher) {
  const auto& vocab = *vocabulary();
  TokenMask mask(vocab.mask_size());
  for (int32_t id = 0; id < vocab.mask_size(); ++id) {
    GrammarMatcher copy = matcher;
    if (copy.accept_token(id)) mask.allow(id);
  }
  return mask;
}

void check_random_walk(const std::string& gbnf, uint64_t seed, int steps, int checked_steps) {
  auto grammar = std::make_shared<Grammar>(parse_gbnf(gbnf));
  GrammarMatcher matcher(grammar, vocabulary());
  std::mt19937_64 rng(seed);
  TokenMask mask;
  for (int step = 0; step < steps && !matcher.finished(); ++step) {
    matcher.allowed_tokens(mask);
    if (step % (steps / checked_steps) == 0) {
      TokenMask expected = brute_force(matcher);
      ASSERT_EQ(mask.count(), expected.count()) << "step " << step;
      ASSERT_EQ(mask.words(), expected.words()) << "step " << step;
    }
    std::vector<int32_t> ids = mask.ids();
    ASSERT_FALSE(ids.empty()) << "dead end at step " << step;
    int32_t pick = ids[rng() % ids.size()];
    ASSERT_TRUE(matcher.accept_token(pick));
  }
}

TEST(Mask, EqualsTokenByTokenOnASchema) {
  nlohmann::ordered_json schema = nlohmann::ordered_json::parse(R"({"type":"object","properties":{
      "name":{"type":"string","maxLength":12},"age":{"type":"integer","minimum":0,"maximum":150},
      "tags":{"type":"array","items":{"enum":["a","b c","\u00e9t\u00e9"]}},"when":{"type":"string","format":"date"},
      "note":{"type":"string"}},"required":["name","age"],"additionalProperties":false})");
  check_random_walk(json_schema_to_gbnf(schema), 1, 40, 8);
}

TEST(Mask, EqualsTokenByTokenOnFreeJson) { check_random_walk(free_json_gbnf(false), 7, 40, 8); }

TEST(Mask, EqualsTokenByTokenOnMultibyteText) {
  // Classes of non-ASCII characters: tokens that end inside a character must be allowed.
  check_random_walk(R"(root ::= ( [а-я] | [一-龥] | "😀" | " " )+ ".")", 3, 30, 6);
}

}  // namespace
}  // namespace inkling::grammar
