// Subcommands of the `inkling` binary. Each registers its options on the CLI11 app and returns
// the function that runs it (after parsing). Errors are thrown as inkling::Error.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

namespace inkling::cli {

using Runner = std::function<int()>;

Runner add_synth(CLI::App& app);
Runner add_inspect(CLI::App& app);
Runner add_quantize(CLI::App& app);
Runner add_generate(CLI::App& app);
Runner add_bench(CLI::App& app);

// A progress line on stderr ("label  42%  1.2/2.9 GB"), redrawn in place on a terminal.
class Progress {
 public:
  explicit Progress(std::string label);
  void operator()(uint64_t done, uint64_t total);
  void finish();

 private:
  std::string label_;
  bool terminal_;
  int last_percent_ = -1;
};

// The demo checkpoint used when `generate` runs without -m (written on first use).
std::string demo_checkpoint_dir();

}  // namespace inkling::cli
