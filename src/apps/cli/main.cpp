// inkling: one binary, one subcommand per job. Library errors become one line on stderr and
// exit code 2; nothing here lets an exception escape.
#include <cstdio>
#include <exception>
#include <map>

#include "apps/cli/commands.h"
#include "tensor/error.h"

int main(int argc, char** argv) {
  CLI::App app{"inkling: run Inkling language models on your own machine"};
  app.require_subcommand(1);
  std::map<CLI::App*, inkling::cli::Runner> runners;
  auto add = [&](const char* name, const char* description, auto register_fn) {
    CLI::App* sub = app.add_subcommand(name, description);
    runners[sub] = register_fn(*sub);
  };
  add("generate", "generate text or token ids (no -m: a synthetic demo model)", inkling::cli::add_generate);
  add("chat", "interactive chat through the chat template (no -m: a synthetic demo model)", inkling::cli::add_chat);
  add("tokenize", "print the token ids of a text", inkling::cli::add_tokenize);
  add("render", "print the prompt the chat template makes of a conversation", inkling::cli::add_render);
  add("inspect", "describe a checkpoint: layout, config, layers, parameters, dtypes", inkling::cli::add_inspect);
  add("synth", "write a random-weight checkpoint in a release layout", inkling::cli::add_synth);
  add("serve", "OpenAI- and Anthropic-compatible HTTP server (no -m: a synthetic demo model)", inkling::cli::add_serve);
  add("bench", "measure prompt and decode speed against the machine's bandwidth and FMA peak", inkling::cli::add_bench);
  add("quantize", "convert an original f32/bf16 checkpoint to mlx-4bit, mlx-8bit or nvfp4", inkling::cli::add_quantize);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  try {
    for (const auto& [sub, run] : runners)
      if (sub->parsed()) return run();
  } catch (const inkling::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
