// Token ids must equal HF tokenizers' on the committed mixed corpus.
#include <gtest/gtest.h>

#include <cstdio>

#include "tokenizer_test_util.h"

namespace inkling::test {
namespace {

std::string show(const std::vector<int32_t>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size() && i < 40; ++i) out += std::to_string(ids[i]) + " ";
  return out;
}

TEST(TokenizerConformance, CorpusIdsEqualReference) {
  const auto& records = corpus();
  const auto golden = read_lines(data_path("corpus_ids.txt"));
  ASSERT_EQ(records.size(), golden.size());
  ASSERT_GE(records.size(), 1000u);
  size_t bytes = 0, equal = 0, shown = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    bytes += records[i].size();
    const auto ids = project_tokenizer().encode(records[i]);
    const auto expected = parse_ids(golden[i]);
    if (ids == expected) {
      ++equal;
    } else if (shown++ < 5) {
      ADD_FAILURE() << "record " << i << " differs\n  got      " << show(ids) << "\n  expected " << show(expected);
    }
  }
  std::printf("tokenizer conformance: %zu/%zu lines equal (%zu bytes)\n", equal, records.size(), bytes);
  EXPECT_GE(bytes, 1000000u);
  EXPECT_EQ(equal, records.size());
}

TEST(TokenizerConformance, SpecialStringsAsPlainTextEqualReference) {
  const auto& records = corpus();
  size_t equal = 0, total = 0;
  for (const auto& line : read_lines(data_path("corpus_ids_plain.txt"))) {
    const size_t colon = line.find(':');
    const size_t index = std::stoul(line.substr(0, colon));
    ASSERT_LT(index, records.size());
    const auto ids = project_tokenizer().encode(records[index], /*parse_special=*/false);
    ++total;
    if (ids == parse_ids(line.substr(colon + 1))) {
      ++equal;
    } else {
      ADD_FAILURE() << "record " << index << " differs with parse_special=false";
    }
  }
  std::printf("tokenizer conformance (special strings as text): %zu/%zu lines equal\n", equal, total);
  EXPECT_GT(total, 100u);
  EXPECT_EQ(equal, total);
}

TEST(TokenizerConformance, DecodeEqualsReference) {
  size_t cases = 0;
  for (const auto& line : read_lines(data_path("decode.jsonl"))) {
    const auto entry = nlohmann::json::parse(line);
    const auto ids = entry["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(project_tokenizer().decode(ids), entry["text"].get<std::string>()) << line;
    EXPECT_EQ(project_tokenizer().decode(ids, /*skip_special=*/true), entry["skip"].get<std::string>()) << line;
    ++cases;
  }
  EXPECT_GT(cases, 100u);
}

TEST(TokenizerConformance, DecodeInvertsEncodeOnCorpus) {
  for (const auto& text : corpus()) {
    ASSERT_EQ(project_tokenizer().decode(project_tokenizer().encode(text)), text);
  }
}

}  // namespace
}  // namespace inkling::test
