#include "apps/cli/line_reader.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#ifdef INKLING_HAVE_LIBEDIT
#include <editline/readline.h>
#endif

namespace inkling::cli {

namespace {

volatile sig_atomic_t interrupt_flag = 0;
struct sigaction previous_action;

void on_interrupt(int) { interrupt_flag = 1; }

constexpr int kHistoryLines = 1000;

}  // namespace

InterruptGuard::InterruptGuard() {
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART: a blocked read returns, so the prompt sees the Ctrl-C
  sigaction(SIGINT, &action, &previous_action);
}

InterruptGuard::~InterruptGuard() { sigaction(SIGINT, &previous_action, nullptr); }

bool InterruptGuard::interrupted() { return interrupt_flag != 0; }
void InterruptGuard::clear() { interrupt_flag = 0; }

LineReader::LineReader(std::string history_file)
    : interactive_(isatty(fileno(stdin)) != 0), history_file_(std::move(history_file)) {
#ifdef INKLING_HAVE_LIBEDIT
  if (interactive_) {
    editing_ = true;
    rl_readline_name = "inkling";
    rl_catch_signals = 0;  // Ctrl-C reaches InterruptGuard's handler and ends readline()
    rl_outstream = stderr;  // the prompt goes where the REPL's notes go; stdout stays the answers
    using_history();
    stifle_history(kHistoryLines);
    if (!history_file_.empty()) read_history(history_file_.c_str());
  }
#endif
}

LineReader::~LineReader() {
#ifdef INKLING_HAVE_LIBEDIT
  if (editing_ && !history_file_.empty()) write_history(history_file_.c_str());
#endif
}

std::optional<std::string> LineReader::read(const char* prompt) {
  std::string line;
#ifdef INKLING_HAVE_LIBEDIT
  if (editing_) {
    char* text = readline(prompt);
    if (!text) return std::nullopt;
    line = text;
    std::free(text);
    return line;
  }
#endif
  if (interactive_) {
    std::fputs(prompt, stderr);
    std::fflush(stderr);
  }
  if (!std::getline(std::cin, line)) {
    std::cin.clear();  // after a Ctrl-C the next read may go on
    std::clearerr(stdin);
    if (!InterruptGuard::interrupted()) std::cin.setstate(std::ios::eofbit);
    return std::nullopt;
  }
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return line;
}

void LineReader::remember(const std::string& line) {
#ifdef INKLING_HAVE_LIBEDIT
  if (editing_ && !line.empty()) add_history(line.c_str());
#else
  (void)line;
#endif
}

std::string default_history_file() {
  std::string base;
  if (const char* state = std::getenv("XDG_STATE_HOME"); state && *state)
    base = state;
  else if (const char* home = std::getenv("HOME"); home && *home)
    base = std::string(home) + "/.local/state";
  else
    return "";
  std::error_code ec;
  std::filesystem::create_directories(base + "/inkling", ec);
  return ec ? "" : base + "/inkling/chat_history";
}

}  // namespace inkling::cli
