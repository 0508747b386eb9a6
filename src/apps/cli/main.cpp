// inkling: one binary, one subcommand per job. Library errors become one line on stderr and
// exit code 2; nothing here lets an exception escape.
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <string>
#include <vector>

#include "apps/cli/commands.h"
#include "tensor/error.h"

#ifndef INKLING_VERSION
#define INKLING_VERSION "unknown"
#endif

namespace {

struct Subcommand {
  const char* name;
  const char* description;
  inkling::cli::Runner (*add)(CLI::App&);
};

const std::vector<Subcommand>& subcommands() {
  using namespace inkling::cli;
  static const std::vector<Subcommand> list = {
      {"generate", "generate text or token ids from a prompt (no -m: a synthetic demo model)", add_generate},
      {"chat", "interactive chat through the chat template (no -m: a synthetic demo model)", add_chat},
      {"tokenize", "print the token ids of a text", add_tokenize},
      {"render", "print the prompt the chat template makes of a conversation", add_render},
      {"inspect", "describe a checkpoint: layout, config, layers, parameters, dtypes", add_inspect},
      {"synth", "write a random-weight checkpoint in a release layout", add_synth},
      {"serve", "OpenAI- and Anthropic-compatible HTTP server (no -m: a synthetic demo model)", add_serve},
      {"bench", "measure prompt and decode speed against the machine's bandwidth and FMA peak", add_bench},
      {"bench-grammar", "measure grammar compile time and allowed-token mask time per token on schemas", add_bench_grammar},
      {"quantize", "convert an original f32/bf16 checkpoint to mlx-4bit, mlx-8bit or nvfp4, or any checkpoint to a GGUF file", add_quantize},
  };
  return list;
}

std::string command_list() {
  std::string out;
  for (const Subcommand& s : subcommands()) out += std::string(out.empty() ? "" : ", ") + s.name;
  return out;
}

// CLI11 reads "-hello" as -h plus junk and prints the help with exit 0; no option of ours starts
// with -h, so such a word is a mistake (usually a text that starts with '-').
const char* clustered_help(int argc, char** argv) {
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) return nullptr;
    if (argv[i][0] == '-' && argv[i][1] == 'h' && argv[i][2] != '\0') return argv[i];
  }
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"inkling: run Inkling language models on your own machine", "inkling"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("inkling ") + INKLING_VERSION);
  std::map<CLI::App*, inkling::cli::Runner> runners;
  for (const Subcommand& s : subcommands()) {
    CLI::App* sub = app.add_subcommand(s.name, s.description);
    runners[sub] = s.add(*sub);
  }
  app.footer("Run `inkling COMMAND --help` for a command's options; `inkling --version` for the version.\n");

  if (argc < 2) {
    std::fputs(app.help().c_str(), stderr);
    return 2;
  }
  const std::string first = argv[1];
  if (first == "help") {  // `inkling help` and `inkling help COMMAND`, as git and cargo have them
    if (argc == 2) {
      std::fputs(app.help().c_str(), stdout);
      return 0;
    }
    for (const auto& [sub, run] : runners)
      if (sub->get_name() == argv[2]) {
        std::fputs(sub->help().c_str(), stdout);
        return 0;
      }
    std::fprintf(stderr, "error: unknown command \"%s\"; commands: %s\n", argv[2], command_list().c_str());
    return 2;
  }
  if (first.size() > 2 && first[0] == '-' && first[1] == 'h') {  // "-hello" before any command
    std::fprintf(stderr, "error: unknown option \"%s\"; a command comes first: %s (inkling --help)\n", first.c_str(),
                 command_list().c_str());
    return 2;
  }
  if (first[0] != '-') {
    bool known = false;
    for (const Subcommand& s : subcommands()) known = known || first == s.name;
    if (!known) {
      std::fprintf(stderr, "error: unknown command \"%s\"; commands: %s (inkling --help)\n", first.c_str(),
                   command_list().c_str());
      return 2;
    }
  }
  if (const char* word = clustered_help(argc, argv)) {
    std::fprintf(stderr,
                 "error: unknown option \"%s\" (a text that starts with '-' goes after --, e.g. inkling %s ... -- %s)\n",
                 word, first.c_str(), word);
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  try {
    for (const auto& [sub, run] : runners)
      if (sub->parsed()) return run();
  } catch (const inkling::Error& e) {
    std::fflush(stdout);  // what was already printed ends before the error line
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
