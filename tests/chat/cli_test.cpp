// The chat commands of the CLI on a tiny synthetic checkpoint: render, tokenize, chat,
// generate --chat, and their bad-input errors (exit 2, one line).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "runtime/tokenizer/tokenizer.h"
#include "chat_test_util.h"

namespace inkling {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

struct Result {
  int rc = -1;
  std::string out, err;
};

// A scratch directory for this process, removed at exit.
struct ScratchDir {
  fs::path path;
  ScratchDir() : path(fs::temp_directory_path() / ("inkling_chat_cli_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

const fs::path& work_dir() {
  static const ScratchDir dir;
  return dir.path;
}

// Runs the inkling binary with `args` (shell words), stdin from `input`.
Result run(const std::string& args, const std::string& input = "") {
  fs::path in = work_dir() / "stdin.txt", out = work_dir() / "stdout.txt", err = work_dir() / "stderr.txt";
  test::write_text(in.string(), input);
  std::string command = std::string("'") + INKLING_BINARY + "' " + args + " <'" + in.string() + "' >'" + out.string() +
                        "' 2>'" + err.string() + "'";
  int status = std::system(command.c_str());
  Result r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = test::read_text(out.string());
  r.err = test::read_text(err.string());
  return r;
}

const std::string& model_dir() {
  static const std::string dir = [] {
    std::string d = (work_dir() / "tiny").string();
    Result r = run("synth '" + d + "' --preset tiny --layout original-bf16");
    EXPECT_EQ(r.rc, 0) << r.err;
    return d;
  }();
  return dir;
}

const json& golden(const std::string& name) {
  static const json cases =
      json::parse(test::read_text(std::string(INKLING_SOURCE_DIR) + "/tests/data/templates/goldens.json"))["cases"];
  for (const auto& c : cases)
    if (c["name"] == name && c["template"] == "data/inkling_chat_template.jinja") return c;
  throw std::runtime_error("no golden " + name);
}

std::string write_json(const std::string& name, const json& value) {
  std::string path = (work_dir() / name).string();
  test::write_text(path, value.dump());
  return path;
}

void expect_one_line_error(const Result& r, const std::string& needle) {
  EXPECT_EQ(r.rc, 2) << r.out << r.err;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;  // exactly one line
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
}

TEST(ChatCli, RenderMatchesJinjaGoldens) {
  for (const char* name : {"plain", "multi_turn", "reasoning"}) {
    const json& c = golden(name);
    std::string messages = write_json(std::string(name) + ".json", c["context"]["messages"]);
    Result r = run("render -m '" + model_dir() + "' --messages '" + messages + "'");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(r.out, c["expected"].get<std::string>() + "\n") << name;
  }
  const json& no_gen = golden("plain_no_gen");
  Result r = run("render -m '" + model_dir() + "' --no-generation-prompt --messages '" +
                 write_json("ng.json", no_gen["context"]["messages"]) + "'");
  EXPECT_EQ(r.out, no_gen["expected"].get<std::string>() + "\n");
  const json& tools = golden("tools_simple");
  r = run("render -m '" + model_dir() + "' --messages '" + write_json("tm.json", tools["context"]["messages"]) +
          "' --tools '" + write_json("tt.json", tools["context"]["tools"]) + "'");
  EXPECT_EQ(r.out, tools["expected"].get<std::string>() + "\n") << r.err;
  const json& low = golden("effort_low");
  r = run("render -m '" + model_dir() + "' --reasoning-effort low --messages '" +
          write_json("el.json", low["context"]["messages"]) + "'");
  EXPECT_EQ(r.out, low["expected"].get<std::string>() + "\n") << r.err;
}

// Comma-separated: the form generate --prompt-ids takes.
TEST(ChatCli, TokenizePrintsIds) {
  Tokenizer tokenizer = Tokenizer::from_dir(model_dir());
  auto join = [](const std::vector<int32_t>& ids) {
    std::string s;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) s += ',';
      s += std::to_string(ids[i]);
    }
    return s + "\n";
  };
  Result r = run("tokenize -m '" + model_dir() + "' 'Hello world'");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, join(tokenizer.encode("Hello world")));
  r = run("tokenize -m '" + model_dir() + "' '<|message_user|>hi'");
  EXPECT_EQ(r.out.rfind("200000,", 0), 0u) << r.out;
  r = run("tokenize -m '" + model_dir() + "' --no-special '<|message_user|>hi'");
  EXPECT_EQ(r.out, join(tokenizer.encode("<|message_user|>hi", false)));
  EXPECT_EQ(r.out.find("200000"), std::string::npos);
}

TEST(ChatCli, ChatReplFromPipedInput) {
  Result r = run("chat -m '" + model_dir() + "' -n 6", "hi\n/effort low\n/effort bogus\nagain\n/reset\n/quit\n");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_FALSE(r.out.empty());
  EXPECT_NE(r.err.find("reasoning effort: low"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("invalid reasoning effort"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("conversation cleared"), std::string::npos) << r.err;
  // End of input (Ctrl-D) also ends the session cleanly.
  Result eof = run("chat -m '" + model_dir() + "' -n 4 --show-reasoning --system 'Be brief.'", "hello\n");
  EXPECT_EQ(eof.rc, 0) << eof.err;
  EXPECT_FALSE(eof.out.empty());
}

TEST(ChatCli, GenerateChat) {
  Result r = run("generate --chat -m '" + model_dir() + "' -p 'Hi there' -n 6 --reasoning-effort none --system 'S'");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_FALSE(r.out.empty());
  EXPECT_EQ(r.out.find("Hi there"), std::string::npos);  // the prompt is not echoed in chat mode
  Result ids = run("generate --chat -m '" + model_dir() + "' -p 'Hi there' -n 3 --print-ids");
  EXPECT_EQ(ids.rc, 0) << ids.err;
  expect_one_line_error(run("generate --chat -m '" + model_dir() + "' -p x --reasoning-effort 2"), "invalid reasoning effort");
}

TEST(ChatCli, BadInputExitsTwoWithOneLine) {
  expect_one_line_error(run("render -m '" + model_dir() + "' --messages '" + (work_dir() / "absent.json").string() + "'"),
                        "absent.json: cannot open a messages file (No such file or directory)");
  std::string bad = (work_dir() / "bad.json").string();
  test::write_text(bad, "[{\"role\": \"user\",");
  expect_one_line_error(run("render -m '" + model_dir() + "' --messages '" + bad + "'"), "invalid JSON");
  std::string wizard = write_json("wizard.json", json::array({{{"role", "wizard"}, {"content", "x"}}}));
  expect_one_line_error(run("render -m '" + model_dir() + "' --messages '" + wizard + "'"), "Unknown message role");
  std::string raising = (work_dir() / "raise.jinja").string();
  test::write_text(raising, "{{ raise_exception('this template refuses') }}");
  std::string plain = write_json("p.json", json::array({{{"role", "user"}, {"content", "x"}}}));
  expect_one_line_error(run("render -m '" + model_dir() + "' --chat-template '" + raising + "' --messages '" + plain + "'"),
                        "this template refuses");
  expect_one_line_error(run("render -m '" + model_dir() + "' --messages '" + plain + "' --reasoning-effort extreme"),
                        "invalid reasoning effort");
  expect_one_line_error(run("render --messages '" + plain + "'"), "-m DIR");
  expect_one_line_error(run("tokenize -m '" + (work_dir() / "nowhere").string() + "' hi"), "nowhere");
  expect_one_line_error(run("chat -m '" + model_dir() + "' --chat-template '" + (work_dir() / "none.jinja").string() + "'"),
                        "none.jinja");
}

}  // namespace
}  // namespace inkling
