// The CLI as a new user meets it: --version, help, unknown commands, option checks that come
// before the weights load, sampling defaults from generation_config.json, the demo checkpoint,
// quantize over an older checkpoint, `cmake --install`, and the chat REPL's Ctrl-C and full
// context. Each case runs the real binary.
#include <signal.h>

#include <chrono>
#include <set>
#include <thread>

#include "checkpoint_test_util.h"

namespace inkling {
namespace {

using namespace ckpt_test;

const fs::path& tiny() { return synth_tiny("original-bf16"); }

// Runs the binary with extra environment entries ("NAME=VALUE") through /usr/bin/env.
ProcessResult run_with_env(const std::vector<std::string>& env, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/usr/bin/env"};
  argv.insert(argv.end(), env.begin(), env.end());
  argv.push_back(INKLING_BINARY);
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv);
}

std::string last_line(std::string text) {
  while (!text.empty() && text.back() == '\n') text.pop_back();
  size_t at = text.rfind('\n');
  return at == std::string::npos ? text : text.substr(at + 1);
}

bool contains(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

// ---- the command line itself ----

TEST(CliUsage, VersionHelpAndUnknownCommands) {
  ProcessResult version = run_inkling({"--version"});
  EXPECT_EQ(version.exit_code, 0) << version.describe();
  EXPECT_EQ(version.out.rfind("inkling 0.", 0), 0u) << version.describe();

  ProcessResult help = run_inkling({"help"});
  EXPECT_EQ(help.exit_code, 0) << help.describe();
  for (const char* command : {"generate", "chat", "tokenize", "quantize", "serve", "bench"})
    EXPECT_TRUE(contains(help.out, command)) << command << "\n" << help.describe();
  ProcessResult help_generate = run_inkling({"help", "generate"});
  EXPECT_EQ(help_generate.exit_code, 0) << help_generate.describe();
  EXPECT_TRUE(contains(help_generate.out, "--prompt-ids")) << help_generate.describe();

  expect_clean_error(run_inkling({"genrate", "-p", "x"}), {"genrate", "generate", "chat"});
  expect_clean_error(run_inkling({"help", "bogus"}), {"bogus", "generate"});
  ProcessResult none = run_inkling({});
  EXPECT_EQ(none.exit_code, 2) << none.describe();
  EXPECT_TRUE(contains(none.err, "generate")) << none.describe();
}

TEST(CliUsage, TokenizeDashTextIsAnErrorNotHelp) {
  expect_clean_error(run_inkling({"tokenize", "-m", tiny().string(), "-hello"}), {"-hello", "--"});
  expect_clean_error(run_inkling({"-hello"}), {"-hello", "generate"});
  ProcessResult after_dashes = run_inkling({"tokenize", "-m", tiny().string(), "--", "-hello"});
  EXPECT_EQ(after_dashes.exit_code, 0) << after_dashes.describe();
  EXPECT_FALSE(after_dashes.out.empty());
}

// tokenize prints what --prompt-ids takes: its output fed back generates.
TEST(CliUsage, TokenizeOutputFeedsPromptIds) {
  ProcessResult ids = run_inkling({"tokenize", "-m", tiny().string(), "Hello world, again"});
  ASSERT_EQ(ids.exit_code, 0) << ids.describe();
  std::string list = last_line(ids.out);
  EXPECT_TRUE(contains(list, ",")) << list;
  EXPECT_FALSE(contains(list, " ")) << list;
  ProcessResult generated =
      run_inkling({"generate", "-m", tiny().string(), "--prompt-ids", list, "-n", "2", "--print-ids"});
  EXPECT_EQ(generated.exit_code, 0) << generated.describe();
}

// ---- generate ----

TEST(CliUsage, PrintIdsComesAfterTheText) {
  ProcessResult r = run_inkling({"generate", "-m", tiny().string(), "-p", "Hello", "-n", "3", "--print-ids"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.out.rfind("Hello", 0), 0u) << r.describe();  // the text first, the prompt echoed
  std::string ids = last_line(r.out);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), ','), 2) << r.describe();
  EXPECT_NE(r.out.find('\n'), r.out.size() - 1) << "text and ids on separate lines\n" << r.describe();
}

TEST(CliUsage, PromptIdsWithoutTokenizerPrintIds) {
  fs::path dir = clone_checkpoint(tiny(), "no_tokenizer");
  fs::remove(dir / "tokenizer.json");
  ProcessResult r = run_inkling({"generate", "-m", dir.string(), "--prompt-ids", "1,2,3", "-n", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  std::string ids = last_line(r.out);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), ','), 2) << r.describe();
  EXPECT_TRUE(contains(r.err, "no tokenizer.json")) << r.describe();
}

TEST(CliUsage, ChatOnlyOptionsNeedChat) {
  for (const char* option : {"--system", "--chat-template", "--reasoning-effort"})
    expect_clean_error(run_inkling({"generate", "-m", tiny().string(), "-p", "x", option, "low"}), {option, "--chat"});
  expect_clean_error(run_inkling({"generate", "-m", tiny().string(), "-p", "x", "--show-reasoning"}),
                     {"--show-reasoning", "--chat"});
}

TEST(CliUsage, PromptIsRequired) {
  expect_clean_error(run_inkling({"generate", "-m", tiny().string()}), {"-p"});
  // Without -m too: the demo model gets no hidden prompt.
  fs::path cache = fresh_dir("demo_cache_no_prompt");
  expect_clean_error(run_with_env({"XDG_CACHE_HOME=" + cache.string()}, {"generate"}), {"-p"});
}

// Checks that need no weights fail before they load: stderr has no "loading" line, stdout is empty.
TEST(CliUsage, BadInputFailsBeforeTheWeightsLoad) {
  auto expect_early = [](const ProcessResult& r, const std::vector<std::string>& keywords) {
    expect_clean_error(r, keywords);
    EXPECT_FALSE(contains(r.err, "loading")) << r.describe();
    EXPECT_TRUE(r.out.empty()) << r.describe();
  };
  const std::string dir = tiny().string();
  expect_early(run_inkling({"generate", "-m", dir, "--prompt-ids", "1,abc"}), {"abc"});
  expect_early(run_inkling({"generate", "-m", dir, "--prompt-ids", "1,999999"}), {"999999", "range"});
  expect_early(run_inkling({"generate", "-m", dir, "-p", "Hello", "--logits-out",
                            (scratch_root() / "no_such_dir" / "x.npy").string()}),
               {"--logits-out", "no_such_dir"});
  expect_early(run_inkling({"generate", "-m", dir, "-p", "Hello there", "--ctx", "2"}), {"--ctx"});
  expect_early(run_with_env({"INKLING_THREADS=lots"}, {"generate", "-m", dir, "-p", "Hello"}),
               {"INKLING_THREADS", "lots"});
  expect_early(run_with_env({"INKLING_THREADS=0"}, {"generate", "-m", dir, "-p", "Hello"}), {"INKLING_THREADS"});
  expect_early(run_inkling({"generate", "-m", dir, "-p", "Hello", "--seed", "-2"}), {"--seed"});
  // A good value passes.
  EXPECT_EQ(run_with_env({"INKLING_THREADS=1"}, {"generate", "-m", dir, "-p", "Hi", "-n", "1"}).exit_code, 0);
}

TEST(CliUsage, SamplingDefaultsComeFromGenerationConfig) {
  fs::path dir = clone_checkpoint(tiny(), "generation_config");
  write_json(dir / "generation_config.json",
             {{"do_sample", true}, {"temperature", 0.7}, {"top_p", 0.9}, {"top_k", 40}, {"eos_token_id", 200006}});
  ProcessResult defaults = run_inkling({"generate", "-m", dir.string(), "--prompt-ids", "1,2", "-n", "2"});
  ASSERT_EQ(defaults.exit_code, 0) << defaults.describe();
  EXPECT_TRUE(contains(defaults.err, "sampling: temperature 0.7, top-k 40, top-p 0.9, seed 0 (generation_config.json)"))
      << defaults.describe();
  ProcessResult greedy = run_inkling({"generate", "-m", dir.string(), "--prompt-ids", "1,2", "-n", "2", "--temp", "0"});
  EXPECT_TRUE(contains(greedy.err, "sampling: greedy (generation_config.json + options)")) << greedy.describe();
  ProcessResult top_k = run_inkling({"generate", "-m", dir.string(), "--prompt-ids", "1,2", "-n", "2", "--top-k", "5"});
  EXPECT_TRUE(contains(top_k.err, "temperature 0.7, top-k 5, top-p 0.9")) << top_k.describe();
  // -1: a random seed, said on stderr.
  ProcessResult random = run_inkling({"generate", "-m", dir.string(), "--prompt-ids", "1,2", "-n", "2", "--seed", "-1"});
  EXPECT_EQ(random.exit_code, 0) << random.describe();
  EXPECT_TRUE(contains(random.err, ", seed ")) << random.describe();
  // do_sample false (or no file): greedy, as transformers does.
  write_json(dir / "generation_config.json", {{"do_sample", false}, {"temperature", 0.7}});
  ProcessResult off = run_inkling({"generate", "-m", dir.string(), "--prompt-ids", "1,2", "-n", "2"});
  EXPECT_TRUE(contains(off.err, "sampling: greedy")) << off.describe();
  fs::remove(dir / "generation_config.json");
  ProcessResult none = run_inkling({"generate", "-m", dir.string(), "--prompt-ids", "1,2", "-n", "2"});
  EXPECT_TRUE(contains(none.err, "sampling: greedy\n")) << none.describe();
}

TEST(CliUsage, OneTokenIsSingular) {
  ProcessResult r = run_inkling({"generate", "-m", tiny().string(), "--prompt-ids", "5", "-n", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_TRUE(contains(r.err, "prompt: 1 token,")) << r.describe();
  EXPECT_TRUE(contains(r.err, "generated: 1 token,")) << r.describe();
}

// On a terminal a long prompt shows its prefill progress (on stderr); `script` gives the run a
// terminal. Off a terminal nothing is printed (the other tests read stderr line by line).
TEST(CliUsage, LongPrefillShowsProgressOnATerminal) {
  if (access("/usr/bin/script", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/script to give the run a terminal";
  std::string ids = "1";
  for (int i = 1; i < 1100; ++i) ids += ",1";
  const std::string command = std::string("'") + INKLING_BINARY + "' generate -m '" + tiny().string() +
                              "' -n 1 --ctx 2048 --prompt-ids " + ids;
  ProcessResult on_terminal = run_process({"/usr/bin/script", "-qec", command, "/dev/null"});
  EXPECT_EQ(on_terminal.exit_code, 0) << on_terminal.describe();
  EXPECT_TRUE(contains(on_terminal.out, "/ 1100 tokens")) << on_terminal.describe();
  ProcessResult piped = run_process({"/bin/sh", "-c", command});
  EXPECT_EQ(piped.exit_code, 0) << piped.describe();
  EXPECT_FALSE(contains(piped.err, "/ 1100 tokens")) << piped.describe();
}

// A demo cache missing a shard is written again, with a note, instead of failing every run.
TEST(CliUsage, DemoCheckpointWithAMissingShardIsRebuilt) {
  fs::path cache = fresh_dir("demo_cache");
  const std::vector<std::string> env = {"XDG_CACHE_HOME=" + cache.string()};
  const std::vector<std::string> args = {"generate", "-p", "Hello", "-n", "2"};
  ProcessResult first = run_with_env(env, args);
  ASSERT_EQ(first.exit_code, 0) << first.describe();
  EXPECT_TRUE(contains(first.err, "writing the synthetic demo checkpoint")) << first.describe();
  std::vector<fs::path> shards = shard_files(cache / "inkling" / "demo-tiny-bf16");
  ASSERT_FALSE(shards.empty());
  fs::remove(shards.back());
  ProcessResult again = run_with_env(env, args);
  EXPECT_EQ(again.exit_code, 0) << again.describe();
  EXPECT_TRUE(contains(again.err, "lacks " + shards.back().filename().string())) << again.describe();
  EXPECT_TRUE(fs::exists(shards.back()));
}

// ---- render, inspect, quantize, synth ----

TEST(CliUsage, RenderOfAMissingDirectoryFails) {
  fs::path messages = fresh_dir("render_missing") / "m.json";
  write_file(messages, R"([{"role": "user", "content": "hi"}])");
  expect_clean_error(run_inkling({"render", "-m", (scratch_root() / "nonexistent").string(), "--messages", messages.string()}),
                     {"nonexistent"});
}

// A template inside tokenizer_config.json counts its own lines: the error must not read as a line
// of the JSON file, and a .jinja file keeps the compiler-style FILE:LINE.
TEST(CliUsage, TemplateErrorsNameTheTemplateLine) {
  fs::path dir = clone_checkpoint(tiny(), "template_error_line");
  nlohmann::json config = read_json(dir / "tokenizer_config.json");
  config["chat_template"] = "a\n{% for m in messages %}\n{{ m.content | nosuchfilter }}\n{% endfor %}";
  write_json(dir / "tokenizer_config.json", config);
  fs::path messages = dir / "m.json";
  write_file(messages, R"([{"role": "user", "content": "hi"}])");
  ProcessResult embedded = run_inkling({"render", "-m", dir.string(), "--messages", messages.string()});
  expect_clean_error(embedded, {"tokenizer_config.json[\"chat_template\"] line 3:", "nosuchfilter"});
  EXPECT_FALSE(contains(embedded.err, "tokenizer_config.json:")) << embedded.describe();

  fs::path template_file = dir / "broken.jinja";
  write_file(template_file, "a\n\n{{ messages | nosuchfilter }}\n");
  expect_clean_error(run_inkling({"render", "-m", dir.string(), "--messages", messages.string(), "--chat-template",
                                  template_file.string()}),
                     {"broken.jinja:3:", "nosuchfilter"});
}

// The offset of a bad byte is counted in what the user typed, not in the rendered prompt.
TEST(CliUsage, InvalidUtf8IsNamedInTheUsersText) {
  expect_clean_error(run_inkling({"generate", "-m", tiny().string(), "--chat", "-p", "abc\xff", "-n", "1"}),
                     {"--prompt", "UTF-8", "byte offset 3"});
  expect_clean_error(run_inkling({"generate", "-m", tiny().string(), "--chat", "--system", "\xc3", "-p", "x", "-n", "1"}),
                     {"--system", "UTF-8", "byte offset 0"});
  expect_clean_error(run_inkling({"tokenize", "-m", tiny().string(), "ok\xe2\x82"}), {"text", "UTF-8", "byte offset 2"});
}

TEST(CliUsage, InspectNamesLayoutsAsTheCliDoesWithoutFloatNoise) {
  ProcessResult json_out = run_inkling({"inspect", "-m", synth_tiny("mlx-4bit").string(), "--json"});
  ASSERT_EQ(json_out.exit_code, 0) << json_out.describe();
  EXPECT_TRUE(contains(json_out.out, "\"layout\": \"mlx-4bit\"")) << json_out.out.substr(0, 400);
  EXPECT_TRUE(contains(json_out.out, "\"log_scaling_alpha\": 0.1,")) << json_out.out.substr(0, 2000);
  EXPECT_FALSE(contains(json_out.out, "0000000")) << json_out.out.substr(0, 2000);
  nlohmann::json info = nlohmann::json::parse(json_out.out);
  for (const auto& layer : info["layers"])
    EXPECT_EQ(layer["window"].is_null(), layer["attention"] == "global") << layer.dump();
  ProcessResult table = run_inkling({"inspect", "-m", tiny().string()});
  ASSERT_EQ(table.exit_code, 0) << table.describe();
  // The tiny preset's layer 3 is global.
  std::stringstream lines(table.out);
  std::string line;
  bool seen = false;
  while (std::getline(lines, line))
    if (line.rfind("    3  global", 0) == 0) {
      seen = true;
      EXPECT_TRUE(contains(line, " global ")) << line;
      EXPECT_FALSE(contains(line, "       0 ")) << line;
    }
  EXPECT_TRUE(seen) << table.out;
}

TEST(CliUsage, QuantizeOverAnOlderCheckpointLeavesNoStaleFiles) {
  fs::path out = fresh_dir("requantize") / "out";
  const std::string input = tiny().string();
  ProcessResult nvfp4 = run_inkling({"quantize", "-m", input, "-o", out.string(), "--to", "nvfp4"});
  ASSERT_EQ(nvfp4.exit_code, 0) << nvfp4.describe();
  ASSERT_TRUE(fs::exists(out / "hf_quant_config.json"));
  ProcessResult mlx = run_inkling({"quantize", "-m", input, "-o", out.string(), "--to", "mlx-4bit"});
  ASSERT_EQ(mlx.exit_code, 0) << mlx.describe();
  EXPECT_FALSE(fs::exists(out / "hf_quant_config.json"));
  ProcessResult inspect = run_inkling({"inspect", "-m", out.string(), "--json"});
  ASSERT_EQ(inspect.exit_code, 0) << inspect.describe();
  EXPECT_EQ(nlohmann::json::parse(inspect.out)["layout"], "mlx-4bit");
  // Every shard left is one the index names.
  nlohmann::json index = read_json(out / "model.safetensors.index.json");
  std::set<std::string> named;
  for (const auto& [tensor, shard] : index["weight_map"].items()) named.insert(shard.get<std::string>());
  for (const fs::path& shard : shard_files(out)) EXPECT_TRUE(named.count(shard.filename().string())) << shard;
}

TEST(CliUsage, SynthWithoutDataFailsBeforeWritingWeights) {
  fs::path out = fresh_dir("synth_no_data") / "ckpt";
  expect_clean_error(
      run_with_env({"INKLING_DATA=" + (scratch_root() / "no_data_here").string()}, {"synth", out.string()}),
      {"tokenizer.json", "no_data_here"});
  EXPECT_TRUE(!fs::exists(out) || shard_files(out).empty());
}

// `cmake --install` lays out PREFIX/bin/inkling and PREFIX/share/inkling; the installed binary
// reads its data there (this test edits the installed chat template to tell the copies apart).
TEST(CliUsage, InstalledBinaryUsesInstalledData) {
  fs::path prefix = fresh_dir("install_prefix");
  const std::string build_dir = fs::path(INKLING_BINARY).parent_path().string();
  ProcessResult install = run_process({INKLING_CMAKE, "--install", build_dir, "--prefix", prefix.string()});
  ASSERT_EQ(install.exit_code, 0) << install.describe();
  ASSERT_TRUE(fs::exists(prefix / "bin" / "inkling"));
  fs::path template_path = prefix / "share" / "inkling" / "inkling_chat_template.jinja";
  ASSERT_TRUE(fs::exists(prefix / "share" / "inkling" / "tokenizer.json"));
  ASSERT_TRUE(fs::exists(template_path));
  write_file(template_path, read_file(template_path) + "{#- the installed copy -#}");
  fs::path out = prefix / "ckpt";
  ProcessResult synth = run_process({(prefix / "bin" / "inkling").string(), "synth", out.string()});
  ASSERT_EQ(synth.exit_code, 0) << synth.describe();
  EXPECT_TRUE(contains(read_file(out / "tokenizer_config.json"), "the installed copy"));
}

// ---- chat ----

TEST(CliUsage, ChatHelpListsSlashCommands) {
  ProcessResult r = run_inkling({"chat", "--help"});
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  for (const char* command : {"/reset", "/effort", "/quit", "Ctrl-C"})
    EXPECT_TRUE(contains(r.out, command)) << command << "\n" << r.describe();
}

// An interactive chat process with stdin on a pipe; stdout and stderr in files.
struct ChatProcess {
  pid_t pid = -1;
  int input = -1;
  fs::path out, err;

  explicit ChatProcess(const std::vector<std::string>& extra) {
    fs::path dir = fresh_dir("chat_process");
    out = dir / "out";
    err = dir / "err";
    std::vector<std::string> storage = {INKLING_BINARY, "chat", "-m", tiny().string()};
    storage.insert(storage.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (std::string& arg : storage) argv.push_back(arg.data());
    argv.push_back(nullptr);
    int fds[2];
    if (pipe(fds) != 0) return;
    std::fflush(nullptr);
    pid = fork();
    if (pid == 0) {
      int out_fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      int err_fd = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fds[0], 0);
      dup2(out_fd, 1);
      dup2(err_fd, 2);
      close(fds[1]);
      setenv("OMP_NUM_THREADS", "2", 1);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(fds[0]);
    input = fds[1];
  }
  ~ChatProcess() {
    if (input >= 0) close(input);
    if (pid > 0 && waitpid(pid, nullptr, WNOHANG) == 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  void send(const std::string& text) { ASSERT_EQ(write(input, text.data(), text.size()), ssize_t(text.size())); }
  // Waits until stderr holds `needle` (true) or `seconds` pass (false).
  bool wait_for_err(const std::string& needle, double seconds) {
    auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
      if (contains(read_file(err), needle)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  // The exit status once the process ends within `seconds`; -1 when it did not.
  int wait_exit(double seconds) {
    auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) == pid) {
        pid = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return -1;
  }
};

TEST(CliUsage, ChatCtrlCStopsTheAnswerNotTheSession) {
  // A long greedy answer (the tiny model's greedy text never ends on its own within this many
  // tokens), stopped by SIGINT once it streams.
  ChatProcess chat({"-n", "200000", "--ctx", "250000", "--temp", "0", "--show-reasoning"});
  ASSERT_GT(chat.pid, 0);
  ASSERT_TRUE(chat.wait_for_err("chat template:", 60)) << read_file(chat.err);
  chat.send("hello\n");
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (fs::file_size(chat.out) == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_GT(fs::file_size(chat.out), 0u) << read_file(chat.err);
  kill(chat.pid, SIGINT);
  EXPECT_TRUE(chat.wait_for_err("(stopped)", 30)) << read_file(chat.err);
  chat.send("/quit\n");
  EXPECT_EQ(chat.wait_exit(30), 0) << read_file(chat.err);
}

TEST(CliUsage, ChatCtrlCTwiceAtThePromptLeaves) {
  ChatProcess chat({"-n", "4"});
  ASSERT_GT(chat.pid, 0);
  ASSERT_TRUE(chat.wait_for_err("chat template:", 60)) << read_file(chat.err);
  int status = -1;
  for (int i = 0; i < 20 && status < 0; ++i) {  // a signal that lands just before the read blocks is not seen
    kill(chat.pid, SIGINT);
    status = chat.wait_exit(0.5);
  }
  EXPECT_EQ(status, 0) << read_file(chat.err);
  EXPECT_TRUE(contains(read_file(chat.err), "Ctrl-C again")) << read_file(chat.err);
}

TEST(CliUsage, ChatDropsTheOldestTurnsWhenTheContextIsFull) {
  std::string input;
  for (int i = 0; i < 8; ++i)
    input += "message number " + std::to_string(i) + " with a few more words to fill the context quickly\n";
  input += "/quit\n";
  fs::path in = fresh_dir("chat_full") / "in.txt";
  write_file(in, input);
  ProcessResult r = run_process({"/bin/sh", "-c",
                                 std::string("exec '") + INKLING_BINARY + "' chat -m '" + tiny().string() +
                                     "' -n 8 --ctx 160 --reasoning-effort none < '" + in.string() + "'"});
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_TRUE(contains(r.err, "context full: dropped the oldest")) << r.describe();
  EXPECT_TRUE(contains(r.err, "/reset")) << r.describe();
  EXPECT_EQ(r.error_lines().size(), 0u) << r.describe();
}

// A message that is not UTF-8 is refused by itself (its own byte offset) and the next one works.
TEST(CliUsage, ChatRefusesAMessageThatIsNotUtf8AndGoesOn) {
  fs::path in = fresh_dir("chat_utf8") / "in.txt";
  write_file(in, "bad \xff byte\nfine\n/quit\n");
  ProcessResult r = run_process({"/bin/sh", "-c",
                                 std::string("exec '") + INKLING_BINARY + "' chat -m '" + tiny().string() +
                                     "' -n 2 --reasoning-effort none < '" + in.string() + "'"});
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  ASSERT_EQ(r.error_lines().size(), 1u) << r.describe();
  EXPECT_TRUE(contains(r.error_lines()[0], "this message is not valid UTF-8 (byte offset 4)")) << r.describe();
  EXPECT_FALSE(r.out.empty()) << r.describe();  // the answer to "fine"
}

}  // namespace
}  // namespace inkling
