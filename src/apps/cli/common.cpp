#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "apps/cli/commands.h"

namespace inkling::cli {

Progress::Progress(std::string label) : label_(std::move(label)), terminal_(isatty(2)) {}

void Progress::operator()(uint64_t done, uint64_t total) {
  int percent = total ? int(100.0 * double(done) / double(total)) : 100;
  if (percent == last_percent_) return;
  // Off a terminal, report in 10% steps so logs stay short.
  if (!terminal_ && percent / 10 == last_percent_ / 10 && percent != 100) return;
  last_percent_ = percent;
  std::fprintf(stderr, "%s%s %3d%%  %.2f / %.2f GB%s", terminal_ ? "\r" : "", label_.c_str(), percent,
               double(done) / 1e9, double(total) / 1e9, terminal_ ? "" : "\n");
  std::fflush(stderr);
}

void Progress::finish() {
  if (terminal_ && last_percent_ >= 0) std::fprintf(stderr, "\n");
}

std::string demo_checkpoint_dir() {
  const char* cache = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  std::string base = cache ? cache : (home ? std::string(home) + "/.cache" : "/tmp");
  return base + "/inkling/demo-tiny-bf16";
}

}  // namespace inkling::cli
