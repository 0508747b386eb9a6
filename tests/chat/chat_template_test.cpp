// Chat templates: loading from a checkpoint directory, the built-in template against the
// Python Jinja2 goldens of the official template, reasoning effort, encoding.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "runtime/chat/chat_template.h"
#include "tensor/error.h"
#include "chat_test_util.h"

namespace inkling {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

const json& goldens() {
  static const json cases = json::parse(test::read_text(std::string(INKLING_SOURCE_DIR) + "/tests/data/templates/goldens.json"))["cases"];
  return cases;
}

// Only goldens whose context is what ChatTemplate::render passes.
bool renderable(const json& c) {
  static const std::set<std::string> keys = {"messages", "tools", "add_generation_prompt", "reasoning_effort", "bos_token", "eos_token"};
  if (c["template"] != "data/inkling_chat_template.jinja" || !c.contains("expected")) return false;
  for (const auto& [k, v] : c["context"].items())
    if (!keys.count(k)) return false;
  return c["context"].value("bos_token", "") == "" && c["context"].value("eos_token", "") == "<|content_model_end_sampling|>";
}

ChatRenderOptions options_of(const json& ctx) {
  ChatRenderOptions o;
  if (ctx.contains("tools")) o.tools = ctx["tools"];
  if (ctx.contains("reasoning_effort")) o.reasoning_effort = ctx["reasoning_effort"];
  o.add_generation_prompt = ctx.value("add_generation_prompt", false);
  return o;
}

TEST(ChatTemplate, OfficialTemplateMatchesGoldens) {
  auto tmpl = ChatTemplate::from_source(test::read_text(std::string(INKLING_SOURCE_DIR) + "/data/inkling_chat_template.jinja"), "inkling");
  int checked = 0;
  for (const auto& c : goldens()) {
    if (!renderable(c)) continue;
    EXPECT_EQ(tmpl.render(c["context"]["messages"], options_of(c["context"])), c["expected"].get<std::string>()) << c["name"];
    ++checked;
  }
  EXPECT_GT(checked, 30);
}

// The built-in template writes the official wire format for plain conversations.
TEST(ChatTemplate, BuiltinMatchesOfficialOnPlainMessages) {
  auto tmpl = ChatTemplate::from_source(builtin_chat_template(), "builtin");
  const std::set<std::string> plain = {"plain", "plain_no_gen", "plain_gen_undefined", "system", "developer",
                                       "system_and_developer", "multi_turn", "reasoning", "reasoning_empty",
                                       "unicode", "newlines", "effort_none", "effort_minimal", "effort_low",
                                       "effort_medium", "effort_high", "effort_xhigh", "effort_max",
                                       "tools_simple", "tool_call_dict", "tool_call_multiple", "tool_call_with_reasoning"};
  int checked = 0;
  for (const auto& c : goldens()) {
    if (!renderable(c) || !plain.count(c["name"].get<std::string>())) continue;
    EXPECT_EQ(tmpl.render(c["context"]["messages"], options_of(c["context"])), c["expected"].get<std::string>()) << c["name"];
    ++checked;
  }
  EXPECT_GE(checked, 15);
}

TEST(ChatTemplate, BuiltinEffortNumbersAndErrors) {
  auto tmpl = ChatTemplate::from_source(builtin_chat_template(), "builtin");
  json msgs = json::array({{{"role", "user"}, {"content", "Hi"}}});
  auto with = [&](json effort) {
    ChatRenderOptions o;
    o.reasoning_effort = effort;
    return tmpl.render(msgs, o);
  };
  EXPECT_NE(with(0.5).find("Thinking effort level: 0.5<|end_message|>"), std::string::npos);
  EXPECT_NE(with(0.05).find("Thinking effort level: 0.05<|end_message|>"), std::string::npos);
  EXPECT_NE(with(0.0).find("Thinking effort level: 0<|end_message|>"), std::string::npos);
  EXPECT_NE(with("High").find("Thinking effort level: 0.9<|end_message|>"), std::string::npos);
  EXPECT_THROW(with(1.5), Error);
  EXPECT_THROW(with("extreme"), Error);
  json bad = json::array({{{"role", "wizard"}, {"content", "x"}}});
  EXPECT_THROW(tmpl.render(bad), Error);
}

TEST(ChatTemplate, ReasoningEffortParsing) {
  EXPECT_EQ(parse_reasoning_effort("high"), "high");
  EXPECT_EQ(parse_reasoning_effort(" MAX "), "max");
  EXPECT_EQ(parse_reasoning_effort("none"), "none");
  EXPECT_DOUBLE_EQ(parse_reasoning_effort("0.35").get<double>(), 0.35);
  EXPECT_DOUBLE_EQ(parse_reasoning_effort("0").get<double>(), 0.0);
  for (const char* bad : {"", "1", "0.995", "-0.1", "hi", "0.5x", "nan"}) EXPECT_THROW(parse_reasoning_effort(bad), Error) << bad;
}

TEST(ChatTemplate, RejectsBadConversations) {
  auto tmpl = ChatTemplate::from_source(builtin_chat_template(), "builtin");
  EXPECT_THROW(tmpl.render(json::object()), Error);
  EXPECT_THROW(tmpl.render(json::array({"hi"})), Error);
  EXPECT_THROW(tmpl.render(json::array({{{"content", "no role"}}})), Error);
  ChatRenderOptions o;
  o.tools = json::object();
  EXPECT_THROW(tmpl.render(json::array(), o), Error);
  EXPECT_THROW(ChatTemplate::from_source("{% if %}", "broken"), Error);
}

class TemplateDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("inkling_chat_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string render(const ChatTemplate& t) const { return t.render(json::array({{{"role", "user"}, {"content", "Q"}}})); }
  fs::path dir_;
};

TEST_F(TemplateDir, PrefersTokenizerConfigString) {
  test::write_text(path("tokenizer_config.json"), R"({"chat_template": "A{{ messages[0].content }}"})");
  test::write_text(path("chat_template.jinja"), "B");
  auto t = ChatTemplate::from_dir(dir_.string());
  EXPECT_EQ(render(t), "AQ");
  EXPECT_FALSE(t.is_builtin());
}

TEST_F(TemplateDir, ListUsesDefaultEntry) {
  test::write_text(path("tokenizer_config.json"),
                   R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})");
  EXPECT_EQ(render(ChatTemplate::from_dir(dir_.string())), "D");
  test::write_text(path("tokenizer_config.json"), R"({"chat_template": [{"name": "tool_use", "template": "T"}]})");
  EXPECT_THROW(ChatTemplate::from_dir(dir_.string()), Error);
}

TEST_F(TemplateDir, FallsBackToJinjaFileThenBuiltin) {
  test::write_text(path("tokenizer_config.json"), R"({"eos_token": "<|content_model_end_sampling|>"})");
  test::write_text(path("chat_template.jinja"), "J{{ messages | length }}");
  EXPECT_EQ(render(ChatTemplate::from_dir(dir_.string())), "J1");
  fs::remove(path("chat_template.jinja"));
  auto builtin = ChatTemplate::from_dir(dir_.string());
  EXPECT_TRUE(builtin.is_builtin());
  EXPECT_EQ(render(builtin),
            "<|message_system|><|content_text|>Thinking effort level: 0.9<|end_message|>"
            "<|message_user|><|content_text|>Q<|end_message|><|message_model|>");
}

TEST_F(TemplateDir, OverrideWinsAndMissingOverrideFails) {
  test::write_text(path("tokenizer_config.json"), R"({"chat_template": "A"})");
  test::write_text(path("mine.jinja"), "M");
  EXPECT_EQ(render(ChatTemplate::from_dir(dir_.string(), path("mine.jinja"))), "M");
  EXPECT_THROW(ChatTemplate::from_dir(dir_.string(), path("absent.jinja")), Error);
  test::write_text(path("tokenizer_config.json"), "{not json");
  EXPECT_THROW(ChatTemplate::from_dir(dir_.string()), Error);
}

TEST(ChatTemplate, EncodeParsesSpecialTokens) {
  auto tmpl = ChatTemplate::from_source(builtin_chat_template(), "builtin");
  auto ids = tmpl.encode(test::chat_tokenizer(), json::array({{{"role", "user"}, {"content", "Hello world"}}}));
  ASSERT_GE(ids.size(), 8u);
  EXPECT_EQ(ids.front(), 200002);  // <|message_system|>, no BOS
  EXPECT_EQ(ids.back(), 200001);   // generation prompt <|message_model|>
  int end_messages = 0;
  for (int32_t id : ids) end_messages += id == 200010;
  EXPECT_EQ(end_messages, 2);
}

}  // namespace
}  // namespace inkling
