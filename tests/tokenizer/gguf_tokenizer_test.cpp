// The tokenizer and chat template from GGUF metadata (tokenizer.ggml.*, tokenizer.chat_template)
// against the tokenizer.json / chat template files they were written from, and the errors for
// missing or malformed keys.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "../io/gguf_vocabulary_writer.h"
#include "io/gguf.h"
#include "runtime/chat/chat_template.h"
#include "tensor/error.h"
#include "tokenizer_test_util.h"

namespace inkling::test {
namespace {

namespace fs = std::filesystem;
using inkling::testing::GgufBuilder;
using inkling::testing::GgufTokenType;
using inkling::testing::GgufVocabulary;

constexpr int64_t kEmbeddingRows = 201024;  // the Inkling checkpoints' padded vocabulary
constexpr uint32_t kEos = 200006;           // <|content_model_end_sampling|>

// In this process's scratch directory, removed when the test program ends.
fs::path scratch_file(const std::string& name) {
  static const struct Root {
    fs::path path;
    ~Root() {
      std::error_code ignored;
      fs::remove_all(path, ignored);
    }
  } root{fs::temp_directory_path() / ("inkling_gguf_tokenizer_" + std::to_string(::getpid()))};
  fs::create_directories(root.path);
  return root.path / name;
}

// A metadata-only GGUF of the project tokenizer, written and opened once.
const GgufModelFiles& project_gguf() {
  static const std::unique_ptr<GgufModelFiles> model = [] {
    GgufBuilder meta;
    meta.add_string("general.architecture", "inkling");
    inkling::testing::add_project_vocabulary_metadata(meta, kEmbeddingRows, kEos);
    const fs::path path = scratch_file("project.gguf");
    meta.write(path);
    return GgufModelFiles::open(path);
  }();
  return *model;
}

const Tokenizer& gguf_tokenizer() {
  static const Tokenizer tokenizer = Tokenizer::from_gguf(project_gguf());
  return tokenizer;
}

TEST(GgufTokenizer, EncodesTheCorpusAsTokenizerJsonDoes) {
  const Tokenizer& from_json = project_tokenizer();
  const Tokenizer& from_gguf = gguf_tokenizer();
  std::vector<std::string> texts = corpus();
  // Special tokens inside words, next to each other and at the ends; one not special at all.
  texts.push_back("<|message_user|>hi<|end_message|><|message_model|>");
  texts.push_back("a<|content_model_end_sampling|>b <|endoftext|>\n<|unused_199998|>");
  texts.push_back("<|message_user|<|message_user|>>");
  size_t special_ids = 0;
  for (const std::string& text : texts) {
    for (bool parse_special : {true, false}) {
      const std::vector<int32_t> want = from_json.encode(text, parse_special);
      const std::vector<int32_t> got = from_gguf.encode(text, parse_special);
      ASSERT_EQ(got, want) << "parse_special " << parse_special << ", text: " << text;
      for (int32_t id : got) special_ids += from_gguf.is_special(id);
      EXPECT_EQ(from_gguf.decode(got), from_json.decode(want));
      EXPECT_EQ(from_gguf.decode(got, /*skip_special=*/true), from_json.decode(want, true));
    }
  }
  EXPECT_GT(special_ids, 5u) << "the corpus should exercise special tokens";
}

TEST(GgufTokenizer, DecodeRoundTripsAndTheVocabularyMatches) {
  const Tokenizer& from_json = project_tokenizer();
  const Tokenizer& t = gguf_tokenizer();
  for (const std::string& text : corpus()) EXPECT_EQ(t.decode(t.encode(text)), text);
  // The padding rows are not tokens: the vocabulary ends where tokenizer.json's does.
  EXPECT_EQ(t.vocab_size(), from_json.vocab_size());
  for (int32_t id = 0; id < from_json.vocab_size(); id += 97) {
    EXPECT_EQ(t.token_text(id), from_json.token_text(id)) << id;
    EXPECT_EQ(t.token_bytes(id), from_json.token_bytes(id)) << id;
  }
  for (int32_t id = 199990; id < from_json.vocab_size(); ++id) {
    EXPECT_EQ(t.is_special(id), from_json.is_special(id)) << id;
    EXPECT_EQ(t.token_text(id), from_json.token_text(id)) << id;
  }
  EXPECT_THROW(t.token_text(200058), Error);  // "[PAD200058]" is an UNUSED row
  EXPECT_EQ(t.eos_id(), int32_t(kEos));
  // The converter writes EOS as BOS with add_bos_token false: no BOS.
  EXPECT_FALSE(t.bos_id().has_value());
  EXPECT_FALSE(t.add_bos_token());
}

nlohmann::ordered_json conversation() {
  return nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "You answer briefly."},
    {"role": "user", "content": "What is 2 + 2? <|message_user|> is plain text here"},
    {"role": "assistant", "content": "4", "reasoning_content": "Add them."},
    {"role": "user", "content": "And the weather?"}])");
}

TEST(GgufTokenizer, ChatTemplateFromMetadataRendersAsTheFileOne) {
  const std::string source = read_text_file(std::string(INKLING_SOURCE_DIR) + "/data/inkling_chat_template.jinja",
                                            kMaxTemplateFileBytes);
  ChatTemplate from_file = ChatTemplate::from_source(source, "data/inkling_chat_template.jinja");
  std::optional<ChatTemplate> from_gguf = ChatTemplate::from_gguf(project_gguf(), gguf_tokenizer());
  ASSERT_TRUE(from_gguf.has_value());
  ChatRenderOptions options;
  options.tools = nlohmann::ordered_json::parse(
      R"([{"type": "function", "function": {"name": "weather", "description": "Weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
  options.reasoning_effort = parse_reasoning_effort("high");
  const std::string want = from_file.render(conversation(), options);
  EXPECT_EQ(from_gguf->render(conversation(), options), want);
  EXPECT_EQ(from_gguf->render(conversation()), from_file.render(conversation()));
  EXPECT_NE(want.find("weather"), std::string::npos);
  EXPECT_EQ(from_gguf->encode(gguf_tokenizer(), conversation(), options),
            from_file.encode(project_tokenizer(), conversation(), options));

  GgufBuilder none;
  none.add_string("general.architecture", "inkling");
  none.write(scratch_file("no_template.gguf"));
  EXPECT_FALSE(ChatTemplate::from_gguf(*GgufModelFiles::open(scratch_file("no_template.gguf")), gguf_tokenizer()));
}

// A small vocabulary: a, b, ab, <|x|> (special), <|y|> (added, not special), one padding row.
GgufVocabulary small_vocabulary() {
  GgufVocabulary v;
  v.tokens = {"a", "b", "ab", "<|x|>", "<|y|>", "[PAD5]"};
  v.types = {int32_t(GgufTokenType::Normal), int32_t(GgufTokenType::Normal), int32_t(GgufTokenType::Normal),
             int32_t(GgufTokenType::Control), int32_t(GgufTokenType::UserDefined), int32_t(GgufTokenType::Unused)};
  v.merges = {"a b"};
  return v;
}

struct SmallFile {
  GgufVocabulary vocabulary = small_vocabulary();
  std::string model = "gpt2", pre = "inkling";
  uint32_t eos = 3;
  int64_t embedding_rows = 6;
};

fs::path write_small(const SmallFile& spec, const std::string& name) {
  GgufBuilder meta;
  meta.add_string("tokenizer.ggml.model", spec.model);
  meta.add_string("tokenizer.ggml.pre", spec.pre);
  meta.add_string_array("tokenizer.ggml.tokens", spec.vocabulary.tokens);
  meta.add_array<int32_t>("tokenizer.ggml.token_type", GgufValueType::I32, spec.vocabulary.types);
  meta.add_string_array("tokenizer.ggml.merges", spec.vocabulary.merges);
  meta.add_u32("tokenizer.ggml.eos_token_id", spec.eos);
  meta.add_tensor("token_embd.weight", GgmlType::F32, {1, uint64_t(spec.embedding_rows)});
  const fs::path path = scratch_file(name + ".gguf");
  meta.write(path);
  return path;
}

TEST(GgufTokenizer, SmallVocabularyFromTables) {
  const fs::path path = write_small({}, "small");
  const Tokenizer t = Tokenizer::from_gguf(*GgufModelFiles::open(path));
  EXPECT_EQ(t.encode("ab<|x|>a<|y|>b"), (std::vector<int32_t>{2, 3, 0, 4, 1}));
  EXPECT_EQ(t.encode("aab"), (std::vector<int32_t>{0, 2}));  // "aab" is no token: the merge a + b makes ab
  EXPECT_TRUE(t.is_special(3));
  EXPECT_FALSE(t.is_special(4));
  EXPECT_EQ(t.vocab_size(), 5);
  EXPECT_EQ(t.eos_id(), 3);
}

void expect_error(const fs::path& path, const std::vector<std::string>& fragments) {
  try {
    Tokenizer::from_gguf(*GgufModelFiles::open(path));
    ADD_FAILURE() << path << ": no error; expected one with " << fragments.front();
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind(path.string(), 0), 0u) << "does not start with the file: " << message;
    for (const std::string& fragment : fragments)
      EXPECT_NE(message.find(fragment), std::string::npos) << "no '" << fragment << "' in: " << message;
  }
}

TEST(GgufTokenizer, MalformedMetadataNamesTheFileAndKey) {
  SmallFile spec;
  spec.vocabulary.merges.push_back("a zz");
  expect_error(write_small(spec, "merge_of_non_token"), {"key \"tokenizer.ggml.merges\"", "merge #1", "'zz'", "not in the vocab"});
  spec = {};
  spec.vocabulary.merges.push_back("ab");
  expect_error(write_small(spec, "merge_one_part"), {"key \"tokenizer.ggml.merges\"", "not two tokens"});
  spec = {};
  spec.embedding_rows = 7;
  expect_error(write_small(spec, "rows"), {"key \"tokenizer.ggml.tokens\"", "6 tokens", "token_embd.weight has 7 rows"});
  spec = {};
  spec.vocabulary.types.pop_back();
  expect_error(write_small(spec, "types"), {"key \"tokenizer.ggml.token_type\"", "5 entries", "has 6"});
  spec = {};
  spec.vocabulary.types[1] = 6;
  expect_error(write_small(spec, "byte_type"), {"key \"tokenizer.ggml.token_type\"", "token 1", "BYTE"});
  spec = {};
  spec.vocabulary.tokens[1] = "a";
  expect_error(write_small(spec, "duplicate"), {"key \"tokenizer.ggml.tokens\"", "appears twice"});
  spec = {};
  spec.model = "llama";
  expect_error(write_small(spec, "model"), {"key \"tokenizer.ggml.model\"", "\"llama\"", "gpt2"});
  spec = {};
  spec.pre = "gpt-4o";
  expect_error(write_small(spec, "pre"), {"key \"tokenizer.ggml.pre\"", "\"gpt-4o\"", "inkling"});
  spec = {};
  spec.eos = 5;
  expect_error(write_small(spec, "eos_unused"), {"key \"tokenizer.ggml.eos_token_id\"", "unused"});
  spec = {};
  spec.eos = 60;
  expect_error(write_small(spec, "eos_range"), {"key \"tokenizer.ggml.eos_token_id\"", "past the 6 tokens"});

  GgufBuilder missing;
  missing.add_string("tokenizer.ggml.model", "gpt2");
  missing.add_string("tokenizer.ggml.pre", "inkling");
  missing.write(scratch_file("missing.gguf"));
  expect_error(scratch_file("missing.gguf"), {"key \"tokenizer.ggml.tokens\"", "is missing"});
  GgufBuilder mistyped;
  mistyped.add_string("tokenizer.ggml.model", "gpt2");
  mistyped.add_string("tokenizer.ggml.pre", "inkling");
  mistyped.add_array<int32_t>("tokenizer.ggml.tokens", GgufValueType::I32, {1, 2});
  mistyped.write(scratch_file("mistyped.gguf"));
  expect_error(scratch_file("mistyped.gguf"), {"key \"tokenizer.ggml.tokens\"", "must be an array of strings"});

  GgufBuilder template_number;
  template_number.add_u32("tokenizer.chat_template", 7);
  template_number.write(scratch_file("template_number.gguf"));
  try {
    ChatTemplate::from_gguf(*GgufModelFiles::open(scratch_file("template_number.gguf")), gguf_tokenizer());
    ADD_FAILURE() << "expected an error for a chat template that is a number";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("key \"tokenizer.chat_template\": must be a string"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace inkling::test
