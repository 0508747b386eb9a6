// Behaviour beyond the o200k corpus: the generic pre-tokenizers and added-token
// rules against HF goldens, the PCRE2 path, errors, and streaming decode.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "tensor/error.h"
#include "tokenizer_test_util.h"

namespace inkling::test {
namespace {

using Json = nlohmann::json;

const Json& synthetic() {
  static const Json data = [] {
    std::ifstream in(data_path("synthetic.json"));
    return Json::parse(in);
  }();
  return data;
}

Json synthetic_tokenizer_json(const Json& entry) {
  Json config = synthetic()["base"];
  config["pre_tokenizer"] = entry["pre_tokenizer"];
  config["added_tokens"] = entry["added_tokens"];
  config["model"]["ignore_merges"] = entry["ignore_merges"];
  if (entry["string_merges"].get<bool>()) {
    Json merges = Json::array();
    for (const auto& pair : config["model"]["merges"])
      merges.push_back(pair[0].get<std::string>() + " " + pair[1].get<std::string>());
    config["model"]["merges"] = merges;
  }
  return config;
}

TEST(Tokenizer, SyntheticPreTokenizersAndAddedTokensMatchReference) {
  const auto& texts = synthetic()["texts"];
  size_t checked = 0;
  for (const auto& entry : synthetic()["cases"]) {
    const std::string text = synthetic_tokenizer_json(entry).dump();
    const Tokenizer tokenizer = Tokenizer::from_json(text);
    for (size_t i = 0; i < texts.size(); ++i) {
      const std::string input = texts[i].get<std::string>();
      EXPECT_EQ(tokenizer.encode(input), entry["ids"][i].get<std::vector<int32_t>>())
          << entry["name"] << " on '" << input << "'";
      EXPECT_EQ(tokenizer.encode(input, false), entry["plain_ids"][i].get<std::vector<int32_t>>())
          << entry["name"] << " (specials as text) on '" << input << "'";
      ++checked;
    }
  }
  EXPECT_GE(checked, 100u);
}

TEST(Tokenizer, StreamingLoaderSkipsEscapedAndNestedMembers) {
  const auto& entry = synthetic()["cases"][0];
  Json config = synthetic_tokenizer_json(entry);
  std::string text = config.dump();
  const Tokenizer streamed = Tokenizer::from_json(text);
  // Extra members with escapes and nesting must be skipped exactly by the table scanner.
  Json padded = config;
  padded["zzz_extra"] = {{"nested", {1, 2, 3}}, {"s", "a\"b\\c\u00e9"}};
  const Tokenizer padded_tokenizer = Tokenizer::from_json(padded.dump());
  const std::string input = synthetic()["texts"][0];
  EXPECT_EQ(streamed.encode(input), padded_tokenizer.encode(input));
  EXPECT_EQ(streamed.encode(input), entry["ids"][0].get<std::vector<int32_t>>());
}

TEST(Tokenizer, RegexPathMatchesScannerOnCorpus) {
  // Wrapping the o200k pattern in a group disables the hand-written scanner, so
  // this runs the same pre-tokenization through PCRE2.
  std::ifstream in(std::string(INKLING_SOURCE_DIR) + "/data/tokenizer.json");
  Json config = Json::parse(in);
  auto& split = config["pre_tokenizer"]["pretokenizers"][0];
  split["pattern"]["Regex"] = "(?:" + split["pattern"]["Regex"].get<std::string>() + ")";
  const Tokenizer regex_tokenizer = Tokenizer::from_json(config.dump());
  const auto golden = read_lines(data_path("corpus_ids.txt"));
  size_t equal = 0;
  const auto& records = corpus();
  for (size_t i = 0; i < records.size(); ++i) equal += regex_tokenizer.encode(records[i]) == parse_ids(golden[i]);
  std::printf("tokenizer conformance (PCRE2 path): %zu/%zu lines equal\n", equal, records.size());
  EXPECT_GE(equal, records.size() * 99 / 100);
}

TEST(Tokenizer, ProjectTokenizerFacts) {
  const Tokenizer& t = project_tokenizer();
  EXPECT_EQ(t.vocab_size(), 200058);
  EXPECT_EQ(t.token_id("<|message_user|>"), 200000);
  EXPECT_EQ(t.token_id("<|content_model_end_sampling|>"), 200006);
  EXPECT_TRUE(t.is_special(200010));
  EXPECT_FALSE(t.is_special(1000));
  EXPECT_EQ(t.token_text(200010), "<|end_message|>");
  EXPECT_FALSE(t.bos_id().has_value());
  EXPECT_FALSE(t.add_bos_token());
  const auto hello = t.token_id("Ġhello");
  ASSERT_TRUE(hello.has_value());
  EXPECT_EQ(t.token_bytes(*hello), " hello");
  EXPECT_EQ(t.encode(" hello"), std::vector<int32_t>{*hello});
  EXPECT_TRUE(t.encode("").empty());
  EXPECT_THROW(t.token_text(250000), Error);
  EXPECT_THROW(t.decode(std::vector<int32_t>{-1}), Error);
  // Special tokens are parsed or kept as text, and skipped on request.
  const auto ids = t.encode("<|message_user|>hi<|end_message|>");
  EXPECT_EQ(ids.front(), 200000);
  EXPECT_EQ(ids.back(), 200010);
  EXPECT_EQ(t.decode(ids, /*skip_special=*/true), "hi");
  EXPECT_GT(t.encode("<|message_user|>", false).size(), 1u);
}

TEST(Tokenizer, FromDirReadsConfig) {
  const auto dir = std::filesystem::temp_directory_path() / "inkling_tokenizer_from_dir";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(std::string(INKLING_SOURCE_DIR) + "/data/tokenizer.json", dir / "tokenizer.json",
                             std::filesystem::copy_options::overwrite_existing);
  {
    std::ofstream config(dir / "tokenizer_config.json");
    config << R"({"add_bos_token": false, "bos_token": null,
                 "eos_token": {"content": "<|content_model_end_sampling|>"},
                 "added_tokens_decoder": {"200053": {"content": "<|audio_placeholder|>", "special": true}}})";
  }
  const Tokenizer t = Tokenizer::from_dir(dir.string());
  EXPECT_EQ(t.eos_id(), 200006);
  EXPECT_FALSE(t.bos_id().has_value());
  EXPECT_FALSE(t.add_bos_token());
  EXPECT_EQ(t.token_id("<|audio_placeholder|>"), 200053);
  EXPECT_EQ(t.encode("a<|audio_placeholder|>"), (std::vector<int32_t>{64, 200053}));
  {
    std::ofstream config(dir / "tokenizer_config.json");
    config << R"({"eos_token": "<|no_such_token|>"})";
  }
  try {
    Tokenizer::from_dir(dir.string());
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("<|no_such_token|>"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

TEST(Tokenizer, InvalidUtf8IsAnError) {
  const Tokenizer& t = project_tokenizer();
  for (const std::string& bad : {std::string("abc\x80"), std::string("\xC3"), std::string("x\xE2\x82"),
                                std::string("\xC0\xAF"), std::string("\xED\xA0\x80"), std::string("\xF4\x90\x80\x80"),
                                std::string("ok \xFF ok"), std::string("\xF0\x9F\x98")}) {
    try {
      t.encode(bad);
      ADD_FAILURE() << "no error for invalid UTF-8";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("UTF-8"), std::string::npos) << e.what();
    }
  }
  EXPECT_NO_THROW(t.encode(std::string("nul \0 byte", 10)));
}

void expect_load_error(const std::string& text, const std::string& fragment) {
  try {
    Tokenizer::from_json(text);
    ADD_FAILURE() << "no error; expected one mentioning '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << "message: " << e.what();
  }
}

TEST(Tokenizer, MalformedTokenizerJsonNamesTheProblem) {
  const Json good = synthetic_tokenizer_json(synthetic()["cases"][0]);
  expect_load_error("{not json", "invalid JSON");
  Json j = good;
  j.erase("model");
  expect_load_error(j.dump(), "model");
  j = good;
  j["model"]["merges"].push_back("Ġ");  // one token only
  expect_load_error(j.dump(), "merge #");
  j = good;
  j["model"]["merges"].push_back(Json::array({"zzzz", "q"}));
  expect_load_error(j.dump(), "not in the vocab");
  j = good;
  j["model"]["merges"][5] = 17;
  expect_load_error(j.dump(), "merge #5");
  j = good;
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  expect_load_error(j.dump(), "Whitespace");
  j = good;
  j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Digits"}}}}};
  expect_load_error(j.dump(), "Digits");
  j = good;
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "([a-z"}}}, {"behavior", "Isolated"}};
  expect_load_error(j.dump(), "regex");
  j = good;
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Sideways"}};
  expect_load_error(j.dump(), "Sideways");
  j = good;
  j["model"]["type"] = "WordPiece";
  expect_load_error(j.dump(), "WordPiece");
  j = good;
  j["model"]["vocab"]["Ġx"] = "seven";
  expect_load_error(j.dump(), "vocab");
  j = good;
  j["normalizer"] = {{"type", "NFC"}};
  expect_load_error(j.dump(), "normalizer");
  j = good;
  j["decoder"] = {{"type", "WordPiece"}};
  expect_load_error(j.dump(), "decoder");
  EXPECT_THROW(Tokenizer::from_file("/nonexistent/tokenizer.json"), Error);
}

TEST(IncrementalDecoder, ConcatenationEqualsDecodeAndNeverSplitsCharacters) {
  const Tokenizer& t = project_tokenizer();
  const auto& records = corpus();
  for (size_t r = 0; r < records.size(); r += 7) {
    const auto ids = t.encode(records[r]);
    IncrementalDecoder decoder(t);
    std::string streamed;
    for (const int32_t id : ids) {
      const std::string piece = decoder.push(id);
      // Every piece is complete UTF-8 on its own.
      ASSERT_EQ(t.decode(t.encode(piece)), piece);
      streamed += piece;
    }
    streamed += decoder.flush();
    ASSERT_EQ(streamed, records[r]);
  }
  for (const auto& line : read_lines(data_path("decode.jsonl"))) {
    const auto entry = Json::parse(line);
    for (const bool skip : {false, true}) {
      IncrementalDecoder decoder(t, skip);
      std::string streamed;
      for (const int32_t id : entry["ids"]) streamed += decoder.push(id);
      streamed += decoder.flush();
      EXPECT_EQ(streamed, entry[skip ? "skip" : "text"].get<std::string>()) << line;
    }
  }
}

TEST(IncrementalDecoder, HoldsBackPartialCharacterAndFlushesInvalidTail) {
  const Tokenizer& t = project_tokenizer();
  // Find two byte-level tokens that together spell U+1F600 (F0 9F 98 80) but not alone.
  const auto first = t.token_id("ðŁĺ");   // F0 9F 98
  const auto last = t.token_id("Ģ");      // 80
  ASSERT_TRUE(first && last);
  IncrementalDecoder decoder(t);
  EXPECT_EQ(decoder.push(*t.token_id("a")), "a");
  EXPECT_EQ(decoder.push(*first), "");
  EXPECT_EQ(decoder.push(*last), "\xF0\x9F\x98\x80");
  EXPECT_EQ(decoder.flush(), "");
  EXPECT_EQ(decoder.push(*first), "");
  EXPECT_EQ(decoder.push(*t.token_id("b")), "\xEF\xBF\xBD" "b");  // interrupted sequence
  EXPECT_EQ(decoder.push(*first), "");
  EXPECT_EQ(decoder.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(decoder.flush(), "");
  IncrementalDecoder skipping(t, /*skip_special=*/true);
  EXPECT_EQ(skipping.push(200000), "");
  EXPECT_EQ(skipping.push(*t.token_id("a")), "a");
}

}  // namespace

// Issue 21: tables are indexed by id, so one large id in a tiny file once asked for gigabytes.
TEST(TokenizerHardening, IdsAreBoundedByTheVocab) {
  const Json good = synthetic_tokenizer_json(synthetic()["cases"][0]);
  Json j = good;
  j["model"]["vocab"]["zzzq"] = 100000000;
  expect_load_error(j.dump(), "has id 100000000, out of range for a vocab of at most");
  j = good;
  j["model"]["vocab"]["zzzq"] = 641158388;
  expect_load_error(j.dump(), "out of range");
  j = good;
  j["added_tokens"] = Json::array({{{"id", 90000000}, {"content", "<|big|>"}, {"special", true}}});
  expect_load_error(j.dump(), "added token '<|big|>' has id 90000000, out of range");
}

TEST(TokenizerHardening, LibraryExceptionsBecomeNamedErrors) {
  expect_load_error(R"({"model":1e999})", "tokenizer.json: invalid JSON");
  const Json good = synthetic_tokenizer_json(synthetic()["cases"][0]);
  Json j = good;
  j["model"]["type"] = 7;
  expect_load_error(j.dump(), "tokenizer.json: a field has the wrong type");
  j = good;
  j["added_tokens"] = Json::array({{{"id", 5}, {"content", "<|x|>"}, {"special", "yes"}}});
  expect_load_error(j.dump(), "a field has the wrong type");
}

TEST(TokenizerHardening, OnlyRegularFilesOfBoundedSizeAreRead) {
  const std::string dir = ::testing::TempDir() + "/tokenizer_devzero";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::filesystem::create_symlink("/dev/zero", dir + "/tokenizer.json");
  try {
    Tokenizer::from_dir(dir);
    ADD_FAILURE() << "a symlink to /dev/zero loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is a character device, not a regular file"), std::string::npos) << e.what();
  }
  std::filesystem::remove(dir + "/tokenizer.json");
  ASSERT_EQ(mkfifo((dir + "/tokenizer.json").c_str(), 0600), 0);
  try {
    Tokenizer::from_dir(dir);
    ADD_FAILURE() << "a FIFO loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is a FIFO"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace inkling::test
