#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include <chrono>
#include <filesystem>
#include <functional>

#include "apps/cli/commands.h"
#include "io/resident_memory.h"
#include "kernels/thread_pool.h"
#include "model/synth.h"
#include "tensor/error.h"

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

void RuntimeArgs::add_to(CLI::App& app, const char* ctx_help) {
  app.add_option("-t,--threads", threads, "threads (0 = all cores)")->capture_default_str();
  app.add_option("--kv-dtype", kv_dtype, "KV cache dtype: f32 | bf16")->capture_default_str();
  app.add_option("--ctx", ctx, ctx_help)->capture_default_str();
  app.add_flag("--fast", fast,
               "llama.cpp-style precision: bf16 activations in prefill products and bf16 decode, int8 (VNNI) "
               "activations for 4-bit decode (default: exact f32 activations)");
  app.add_flag("--mmap", mmap,
               "use the weights in place in the checkpoint's file mappings: ready at once, but decode reads "
               "them through 4 KiB pages and runs slower (default: copy them into transparent huge pages)");
}

std::unique_ptr<Checkpoint> open_for_inference(const std::string& dir, const RuntimeArgs& runtime) {
  std::fprintf(stderr, "loading %s ...\n", dir.c_str());
  CheckpointOptions options;
  if (runtime.mmap) return Checkpoint::open(dir, options);
  const HugePageMode mode = transparent_huge_page_mode();
  if (mode != HugePageMode::Always && mode != HugePageMode::Madvise) {
    std::fprintf(stderr, "transparent huge pages are \"%s\" in this kernel (/sys/kernel/mm/transparent_hugepage/enabled): "
                         "using the weights in place in the file mappings\n", huge_page_mode_name(mode));
    return Checkpoint::open(dir, options);
  }
  options.memory = WeightMemory::HugePages;
  Progress progress("copying weights into huge pages");
  // Small checkpoints copy in well under a second: no progress lines for them.
  options.progress = [&progress](uint64_t done, uint64_t total) {
    if (total >= (uint64_t(1) << 30)) progress(done, total);
  };
  auto start = std::chrono::steady_clock::now();
  std::unique_ptr<Checkpoint> checkpoint = Checkpoint::open(dir, options);
  progress.finish();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const uint64_t copied = checkpoint->store().resident_bytes(), huge = checkpoint->store().resident_huge_page_bytes();
  std::fprintf(stderr, "weights: %.2f GB copied in %.2f s, %.2f GB of it in huge pages%s\n", double(copied) / 1e9,
               seconds, double(huge) / 1e9,
               huge * 2 < copied ? " (the kernel had few free huge pages; decode may run slower, --mmap starts faster)"
                                 : "");
  return checkpoint;
}

const char* weight_memory_label(const Checkpoint& checkpoint) {
  return checkpoint.store().resident_bytes() > 0 ? "huge pages" : "mmap";
}

RunOptions RuntimeArgs::apply() const {
  if (threads < 0 || threads > kernels::kMaxThreads)
    throw Error("--threads must be 0.." + std::to_string(kernels::kMaxThreads) + " (0 = all cores), got " +
                std::to_string(threads));
  if (kv_dtype != "f32" && kv_dtype != "bf16") throw Error("--kv-dtype must be f32 or bf16, got \"" + kv_dtype + "\"");
  if (ctx <= 0) throw Error("--ctx must be positive");
  kernels::set_thread_count(threads);
  RunOptions run;
  run.kv_dtype = kv_dtype == "f32" ? DType::F32 : DType::BF16;
  run.context = ctx;
  run.fast = fast;
  return run;
}

void SamplingArgs::add_to(CLI::App& app) {
  app.add_option("--temp", temp, "temperature (0 = greedy)")->capture_default_str();
  app.add_option("--top-k", top_k, "keep the k most likely tokens (0 = off)")->capture_default_str();
  app.add_option("--top-p", top_p, "nucleus sampling mass (1 = off)")->capture_default_str();
  app.add_option("--min-p", min_p, "drop tokens below min-p x the top probability (0 = off)")->capture_default_str();
  app.add_option("--repeat-penalty", repeat_penalty, "repetition penalty (1 = off)")->capture_default_str();
  app.add_option("--presence-penalty", presence_penalty, "presence penalty")->capture_default_str();
  app.add_option("--frequency-penalty", frequency_penalty, "frequency penalty")->capture_default_str();
  app.add_option("--seed", seed, "sampling seed")->capture_default_str();
}

SamplingParams SamplingArgs::params() const {
  SamplingParams p;
  p.temperature = temp;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.repetition_penalty = repeat_penalty;
  p.presence_penalty = presence_penalty;
  p.frequency_penalty = frequency_penalty;
  p.seed = seed;
  p.validate();
  return p;
}

std::string demo_checkpoint_dir() {
  const char* cache = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  std::string base = cache ? cache : (home ? std::string(home) + "/.cache" : "/tmp");
  return base + "/inkling/demo-tiny-bf16";
}

// -m DIR, or the demo checkpoint (written on first use).
std::string model_or_demo(const std::string& model) {
  if (!model.empty()) return model;
  std::string dir = demo_checkpoint_dir();
  if (!std::filesystem::exists(dir + "/config.json")) {
    std::fprintf(stderr, "no -m given: writing the synthetic demo checkpoint (tiny, bf16) to %s\n", dir.c_str());
    SynthOptions options;
    options.format = parse_target_format("original-bf16");
    options.preset = SynthPreset::Tiny;
    Progress progress("synth tiny");
    options.progress = std::ref(progress);
    write_synthetic_checkpoint(dir, options);
    progress.finish();
  }
  std::fprintf(stderr, "demo model: random weights, so the text is noise; pass -m DIR for a real checkpoint\n");
  return dir;
}

}  // namespace inkling::cli
