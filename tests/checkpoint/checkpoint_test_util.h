// Shared helpers for the checkpoint tests: a per-process temp directory, tiny synthetic
// checkpoints written once per process (through the `inkling synth` CLI), a subprocess runner
// that captures stdout / stderr / exit status / peak RSS, and small file helpers.
#pragma once

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace inkling::ckpt_test {

namespace fs = std::filesystem;

// The process-wide scratch directory; removed when the test program ends.
inline const fs::path& scratch_root() {
  static const fs::path root = [] {
    std::string pattern = (fs::temp_directory_path() / "inkling_ckpt_test_XXXXXX").string();
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    if (!mkdtemp(buffer.data())) {
      std::perror("mkdtemp");
      std::abort();
    }
    fs::path made(buffer.data());
    static struct Cleaner {
      fs::path path;
      ~Cleaner() {
        std::error_code ec;
        fs::remove_all(path, ec);
      }
    } cleaner{made};
    return made;
  }();
  return root;
}

// A fresh, empty directory under the scratch root.
inline fs::path fresh_dir(const std::string& label) {
  static int counter = 0;
  fs::path dir = scratch_root() / (label + "_" + std::to_string(counter++));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

struct ProcessResult {
  bool exited = false;  // false: killed by a signal
  int exit_code = -1;
  int signal = 0;
  std::string out, err;
  long max_rss_kb = 0;  // peak resident set of the child (ru_maxrss)

  // The stderr lines starting with "error:".
  std::vector<std::string> error_lines() const {
    std::vector<std::string> lines;
    std::stringstream stream(err);
    std::string line;
    while (std::getline(stream, line))
      if (line.rfind("error:", 0) == 0) lines.push_back(line);
    return lines;
  }
  std::string describe() const {
    std::ostringstream os;
    os << (exited ? "exit " + std::to_string(exit_code) : "signal " + std::to_string(signal)) << "\n--- stderr ---\n"
       << err << "--- stdout (first 2000 chars) ---\n"
       << out.substr(0, 2000);
    return os.str();
  }
};

inline std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

inline void write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  ASSERT_TRUE(bool(out)) << "cannot write " << path;
}

// Runs argv[0] (a path) with its arguments; stdout / stderr go to files, the exit status and
// the child's peak RSS come from wait4.
inline ProcessResult run_process(std::vector<std::string> argv_storage) {
  static int counter = 0;
  fs::path out_path = scratch_root() / ("proc_" + std::to_string(counter) + ".out");
  fs::path err_path = scratch_root() / ("proc_" + std::to_string(counter) + ".err");
  ++counter;
  std::vector<char*> argv;
  for (std::string& arg : argv_storage) argv.push_back(arg.data());
  argv.push_back(nullptr);
  ProcessResult result;
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid < 0) {
    ADD_FAILURE() << "fork failed: " << std::strerror(errno);
    return result;
  }
  if (pid == 0) {
    int out_fd = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err_fd = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int null_fd = open("/dev/null", O_RDONLY);
    if (out_fd < 0 || err_fd < 0 || null_fd < 0) _exit(127);
    dup2(null_fd, 0);
    dup2(out_fd, 1);
    dup2(err_fd, 2);
    setenv("OMP_NUM_THREADS", "2", 1);
    execv(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  struct rusage usage {};
  while (wait4(pid, &status, 0, &usage) < 0) {
    if (errno != EINTR) {
      ADD_FAILURE() << "wait4 failed: " << std::strerror(errno);
      return result;
    }
  }
  result.exited = WIFEXITED(status);
  result.exit_code = result.exited ? WEXITSTATUS(status) : -1;
  result.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  result.max_rss_kb = usage.ru_maxrss;
  result.out = read_file(out_path);
  result.err = read_file(err_path);
  std::error_code ec;
  fs::remove(out_path, ec);
  fs::remove(err_path, ec);
  return result;
}

// Runs INKLING_BINARY with `args`.
inline ProcessResult run_inkling(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {INKLING_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv);
}

// Runs INKLING_BINARY under /usr/bin/time -v when available, so the peak RSS is that of a
// process exec'd from a small parent (a child forked from this test process inherits the
// test's resident pages into ru_maxrss). `via_time` tells which measurement was used.
inline ProcessResult run_inkling_measured(const std::vector<std::string>& args, bool* via_time) {
  const char* kTime = "/usr/bin/time";
  *via_time = access(kTime, X_OK) == 0;
  if (!*via_time) return run_inkling(args);
  std::vector<std::string> argv = {kTime, "-v", INKLING_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  ProcessResult result = run_process(argv);
  const std::string key = "Maximum resident set size (kbytes):";
  size_t at = result.err.find(key);
  if (at == std::string::npos) {
    ADD_FAILURE() << "/usr/bin/time -v printed no peak RSS: " << result.err;
    return result;
  }
  result.max_rss_kb = std::atol(result.err.c_str() + at + key.size());
  return result;
}

// Synth checkpoints are cached next to the binary, keyed by the binary's size and mtime (synth
// is linked into it, so a rebuilt synth gets a fresh cache): ctest runs every test in its own
// process, and writing them once per process would dominate the run time. Entries are written
// to a temporary name and renamed into place, so parallel tests never see a half-written one.
inline const fs::path& synth_cache_dir() {
  static const fs::path dir = [] {
    fs::path binary(INKLING_BINARY);
    std::error_code ec;
    auto stamp = fs::last_write_time(binary, ec).time_since_epoch().count();
    std::string key = "v1_" + std::to_string(fs::file_size(binary, ec)) + "_" + std::to_string(stamp);
    fs::path root = binary.parent_path() / "test_checkpoint_cache";
    fs::create_directories(root, ec);
    for (const auto& entry : fs::directory_iterator(root, ec))  // caches of older binaries
      if (entry.path().filename().string().rfind(key, 0) != 0) fs::remove_all(entry.path(), ec);
    return root / key;
  }();
  return dir;
}

// The tiny synthetic checkpoint of one layout and seed, written with
// `inkling synth DIR --layout L --preset tiny --seed S`. Read-only: clone it to modify it.
inline const fs::path& synth_tiny(const std::string& layout, uint64_t seed = 11) {
  static std::map<std::pair<std::string, uint64_t>, fs::path> cache;
  auto key = std::make_pair(layout, seed);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  fs::path dir = synth_cache_dir() / (layout + "_" + std::to_string(seed));
  if (!fs::exists(dir / "config.json")) {
    fs::create_directories(synth_cache_dir());
    fs::path temp = synth_cache_dir() / (layout + "_" + std::to_string(seed) + ".tmp" + std::to_string(getpid()));
    fs::remove_all(temp);
    ProcessResult result = run_inkling({"synth", temp.string(), "--layout", layout, "--preset", "tiny", "--seed",
                                        std::to_string(seed)});
    if (!result.exited || result.exit_code != 0) {
      ADD_FAILURE() << "inkling synth " << layout << " failed: " << result.describe();
    } else {
      // The rename is atomic: other processes see the whole directory or none of it.
      std::error_code ec;
      fs::rename(temp, dir, ec);  // fails harmlessly when another process got there first
    }
    std::error_code ec;
    fs::remove_all(temp, ec);
  }
  return cache.emplace(key, dir).first->second;
}

inline std::vector<fs::path> shard_files(const fs::path& dir) {
  std::vector<fs::path> shards;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().extension() == ".safetensors") shards.push_back(entry.path());
  std::sort(shards.begin(), shards.end());
  return shards;
}

// A copy of a checkpoint directory: JSON / tokenizer files copied, shards symlinked (so the
// copy costs nothing); call materialize() before modifying a shard.
inline fs::path clone_checkpoint(const fs::path& source, const std::string& label) {
  fs::path dir = fresh_dir(label);
  for (const auto& entry : fs::directory_iterator(source)) {
    fs::path target = dir / entry.path().filename();
    if (entry.path().extension() == ".safetensors")
      fs::create_symlink(fs::absolute(entry.path()), target);
    else
      fs::copy_file(entry.path(), target);
  }
  return dir;
}

// Replaces a symlinked shard of a clone by a real copy.
inline void materialize(const fs::path& file) {
  if (!fs::is_symlink(file)) return;
  fs::path source = fs::read_symlink(file);
  fs::remove(file);
  fs::copy_file(source, file);
}

inline nlohmann::json read_json(const fs::path& path) { return nlohmann::json::parse(read_file(path)); }
inline void write_json(const fs::path& path, const nlohmann::json& value) { write_file(path, value.dump(2)); }

// Expects the CLI to have failed cleanly: exit 2, no signal, exactly one "error: ..." line
// (the last line of stderr), no "terminate called", and every keyword in that line.
inline void expect_clean_error(const ProcessResult& result, const std::vector<std::string>& keywords) {
  ASSERT_TRUE(result.exited) << "killed by a signal: " << result.describe();
  EXPECT_EQ(result.exit_code, 2) << result.describe();
  EXPECT_EQ(result.err.find("terminate called"), std::string::npos) << result.describe();
  EXPECT_EQ(result.err.find("Segmentation"), std::string::npos) << result.describe();
  std::vector<std::string> lines = result.error_lines();
  ASSERT_EQ(lines.size(), 1u) << "expected one \"error:\" line\n" << result.describe();
  // The error line is the last thing on stderr.
  std::string trimmed = result.err;
  while (!trimmed.empty() && trimmed.back() == '\n') trimmed.pop_back();
  EXPECT_EQ(trimmed.substr(trimmed.rfind('\n') == std::string::npos ? 0 : trimmed.rfind('\n') + 1), lines[0])
      << result.describe();
  for (const std::string& keyword : keywords)
    EXPECT_NE(lines[0].find(keyword), std::string::npos) << "error line lacks \"" << keyword << "\": " << lines[0];
}

// Relative RMS difference sqrt(sum (a-b)^2 / sum b^2), accumulated across calls.
struct RelativeError {
  double diff = 0.0, ref = 0.0;
  void add(const float* a, const float* b, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      double d = double(a[i]) - double(b[i]);
      diff += d * d;
      ref += double(b[i]) * double(b[i]);
    }
  }
  double value() const { return ref > 0 ? std::sqrt(diff / ref) : (diff > 0 ? INFINITY : 0.0); }
};

}  // namespace inkling::ckpt_test
