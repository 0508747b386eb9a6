// The chat REPL's input: line editing and history (libedit) when stdin is a terminal, plain
// getline otherwise; Ctrl-C as a flag the REPL reads instead of the end of the process.
#pragma once

#include <optional>
#include <string>

namespace inkling::cli {

// While one exists, SIGINT (Ctrl-C) sets a flag instead of ending the process.
class InterruptGuard {
 public:
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;
  // True once Ctrl-C was pressed since the last clear().
  static bool interrupted();
  static void clear();
};

class LineReader {
 public:
  // `history_file`: where an interactive session keeps its lines ("" = none).
  explicit LineReader(std::string history_file);
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  bool interactive() const { return interactive_; }
  // One line without its line ending; nullopt at the end of input or when Ctrl-C ended the read
  // (InterruptGuard::interrupted() tells which).
  std::optional<std::string> read(const char* prompt);
  // Remembers a line for recall with the up arrow (interactive sessions).
  void remember(const std::string& line);

 private:
  bool interactive_;
  bool editing_ = false;
  std::string history_file_;
};

// ${XDG_STATE_HOME:-~/.local/state}/inkling/chat_history, its folder created; "" without a home.
std::string default_history_file();

}  // namespace inkling::cli
