#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include <algorithm>
#include <chrono>
#include <climits>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "apps/cli/commands.h"
#include "io/resident_memory.h"
#include "io/text_file.h"
#include "kernels/thread_pool.h"
#include "model/gguf_checkpoint.h"
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
  app.add_flag("--llama-rounding", llama_rounding,
               "GGUF weights: round the activations of each product exactly as llama.cpp's CPU kernels do for "
               "its weight type (Q8_0, Q8_1 or Q8_K), and attention's Q, K and V to f16 as its flash attention "
               "does; an agreement experiment (docs/gguf.md: F32 files match llama.cpp to ~7e-5, quantized ones "
               "only to llama.cpp's own spread); implies --fast");
  app.add_flag("--batch-invariant", batch_invariant,
               "bit-for-bit reproducible logits: prompt tokens take the decode kernels, so a token's logits never "
               "depend on how its sequence was chunked, batched with others, cached or decoded (prefill ~1.7x "
               "slower; default: prefilled and decoded positions differ by f32 rounding)");
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
  const uint64_t copied = checkpoint->resident_memory().size(), huge = checkpoint->resident_huge_page_bytes();
  std::fprintf(stderr, "weights: %.2f GB copied in %.2f s, %.2f GB of it in huge pages%s\n", double(copied) / 1e9,
               seconds, double(huge) / 1e9,
               huge * 2 < copied ? " (the kernel had few free huge pages; decode may run slower, --mmap starts faster)"
                                 : "");
  return checkpoint;
}

const char* weight_memory_label(const Checkpoint& checkpoint) {
  return checkpoint.resident_memory().empty() ? "mmap" : "huge pages";
}

RunOptions RuntimeArgs::apply() const {
  // The thread pool reads INKLING_THREADS itself and falls back to all CPUs on a bad value; a
  // typo should not pass silently.
  if (const char* env = std::getenv("INKLING_THREADS"); env && threads == 0) {
    char* end = nullptr;
    const long value = std::strtol(env, &end, 10);
    if (end == env || *end != '\0' || value < 1 || value > kernels::kMaxThreads)
      throw Error("INKLING_THREADS must be a number 1.." + std::to_string(kernels::kMaxThreads) + ", got \"" +
                  std::string(env) + "\"");
  }
  if (threads < 0 || threads > kernels::kMaxThreads)
    throw Error("--threads must be 0.." + std::to_string(kernels::kMaxThreads) + " (0 = all cores), got " +
                std::to_string(threads));
  if (kv_dtype != "f32" && kv_dtype != "bf16") throw Error("--kv-dtype must be f32 or bf16, got \"" + kv_dtype + "\"");
  if (ctx <= 0) throw Error("--ctx must be positive");
  kernels::set_thread_count(threads);
  RunOptions run;
  run.kv_dtype = kv_dtype == "f32" ? DType::F32 : DType::BF16;
  run.context = ctx;
  run.fast = fast || llama_rounding;
  run.llama_rounding = llama_rounding;
  run.batch_invariant = batch_invariant;
  return run;
}

void SamplingArgs::add_to(CLI::App& app) {
  options_ = {
      app.add_option("--temp", temp, "temperature (0 = greedy)"),
      app.add_option("--top-p", top_p, "nucleus sampling mass (1 = off)"),
      app.add_option("--min-p", min_p, "drop tokens below min-p x the top probability (0 = off)"),
      app.add_option("--repeat-penalty", repeat_penalty, "repetition penalty (1 = off)"),
      app.add_option("--presence-penalty", presence_penalty, "presence penalty (0 = off)"),
      app.add_option("--frequency-penalty", frequency_penalty, "frequency penalty (0 = off)"),
      app.add_option("--top-k", top_k, "keep the k most likely tokens (0 = off)"),
  };
  app.add_option("--seed", seed, "sampling seed; -1 = a random one (printed)")->capture_default_str();
  app.footer(
      "Sampling: options not given take the checkpoint's defaults from generation_config.json (temperature, "
      "top_p, top_k, min_p, repetition_penalty) as transformers and vLLM do; for a .gguf file without that "
      "file beside it, from its general.sampling.* metadata (temp, top_k, top_p, min_p, penalty_repeat) as "
      "llama.cpp does; without either (or with do_sample false) decoding is greedy. stderr says which "
      "sampling ran.\n");
}

SamplingParams SamplingArgs::given(const SamplingParams& defaults) const {
  SamplingParams p = defaults;
  auto set = [&](size_t i, auto& field, auto value) {
    if (options_.size() > i && options_[i]->count() > 0) field = value;
  };
  set(0, p.temperature, temp);
  set(1, p.top_p, top_p);
  set(2, p.min_p, min_p);
  set(3, p.repetition_penalty, repeat_penalty);
  set(4, p.presence_penalty, presence_penalty);
  set(5, p.frequency_penalty, frequency_penalty);
  set(6, p.top_k, top_k);
  return p;
}

void SamplingArgs::check() const {
  if (seed < -1) throw Error("--seed must be >= 0, or -1 for a random seed; got " + std::to_string(seed));
  given(SamplingParams{}).validate();
}

SamplingParams SamplingArgs::params(const std::string& model) const {
  check();
  const std::string source_name = sampling_defaults_source(model);
  const bool from_file = !source_name.empty();
  SamplingParams p = given(generation_defaults(model));
  p.seed = seed >= 0 ? uint64_t(seed) : std::random_device{}();
  p.validate();
  bool overridden = false;
  for (const CLI::Option* option : options_) overridden = overridden || option->count() > 0;
  const std::string source = !from_file ? "" : " (" + source_name + (overridden ? " + options)" : ")");
  std::fprintf(stderr, "sampling: %s%s\n", describe_sampling(p).c_str(), source.c_str());
  return p;
}

std::string sampling_defaults_source(const std::string& model) {
  if (std::filesystem::exists(side_files_dir(model) + "/generation_config.json")) return "generation_config.json";
  if (!GgufModelFiles::looks_like_gguf(model)) return "";
  const GgufFile first = GgufFile::open(GgufModelFiles::resolve(model));
  for (const std::string& key : first.keys())
    if (key.rfind(kGgufSamplingPrefix, 0) == 0) return "GGUF metadata";
  return "";
}

SamplingParams gguf_sampling_defaults(const GgufFile& file) {
  SamplingParams p;
  bool any = false;
  for (const std::string& key : file.keys()) any = any || key.rfind(kGgufSamplingPrefix, 0) == 0;
  if (!any) return p;
  // As llama.cpp reads them: a key present is a default to sample with (the converter copies
  // generation_config.json's values, not its do_sample); a key absent leaves that filter off,
  // and the temperature at 1.
  auto number = [&](const char* name, double fallback) {
    const std::string key = std::string(kGgufSamplingPrefix) + name;
    return file.find(key) ? file.number(key) : fallback;
  };
  p.temperature = float(number("temp", 1.0));
  p.top_k = int(std::clamp(number("top_k", 0), -1.0, double(INT32_MAX)));
  p.top_p = float(number("top_p", 1.0));
  p.min_p = float(number("min_p", 0.0));
  p.repetition_penalty = float(number("penalty_repeat", 1.0));
  try {
    p.validate();
  } catch (const Error& e) {
    throw Error(file.label() + ": " + kGgufSamplingPrefix + "*: " + e.what());
  }
  return p;
}

SamplingParams generation_defaults(const std::string& model) {
  SamplingParams p;
  const std::string path = side_files_dir(model) + "/generation_config.json";
  if (!std::filesystem::exists(path)) {
    if (!GgufModelFiles::looks_like_gguf(model)) return p;
    return gguf_sampling_defaults(GgufFile::open(GgufModelFiles::resolve(model)));
  }
  nlohmann::json config = nlohmann::json::parse(read_text_file(path, kMaxConfigFileBytes, "a generation_config.json"),
                                                nullptr, false);
  if (!config.is_object()) throw Error(path + ": invalid JSON");
  if (!config.value("do_sample", false)) return p;
  auto number = [&](const char* key, double fallback) {
    return config.contains(key) && config[key].is_number() ? config[key].get<double>() : fallback;
  };
  p.temperature = float(number("temperature", 1.0));
  p.top_p = float(number("top_p", 1.0));
  p.top_k = int(number("top_k", 0));
  p.min_p = float(number("min_p", 0.0));
  p.repetition_penalty = float(number("repetition_penalty", 1.0));
  try {
    p.validate();
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
  return p;
}

std::string describe_sampling(const SamplingParams& p) {
  auto number = [](double value) {
    std::ostringstream out;
    out << value;
    return out.str();
  };
  std::string out = p.temperature == 0.0f ? "greedy" : "temperature " + number(p.temperature);
  if (p.temperature != 0.0f) {
    if (p.top_k > 0) out += ", top-k " + std::to_string(p.top_k);
    if (p.top_p < 1.0f) out += ", top-p " + number(p.top_p);
    if (p.min_p > 0.0f) out += ", min-p " + number(p.min_p);
  }
  if (p.repetition_penalty != 1.0f) out += ", repeat-penalty " + number(p.repetition_penalty);
  if (p.presence_penalty != 0.0f) out += ", presence-penalty " + number(p.presence_penalty);
  if (p.frequency_penalty != 0.0f) out += ", frequency-penalty " + number(p.frequency_penalty);
  if (p.temperature != 0.0f) out += ", seed " + std::to_string(p.seed);
  return out;
}

void show_prefill_progress(InklingModel& model) {
  if (!isatty(2)) return;
  model.on_prefill_progress = [last = int64_t(-1)](int64_t done, int64_t total) mutable {
    if (total < 2 * 512) return;  // short prompts finish before a line would help
    const int64_t percent = 100 * done / total;
    if (percent == last) return;
    last = percent;
    std::fprintf(stderr, "\rprompt %3lld%%  %lld / %lld tokens%s", (long long)percent, (long long)done, (long long)total,
                 done == total ? "\r\033[K" : "");
    std::fflush(stderr);
  };
}

std::string count_of(int64_t n, const char* singular) {
  return std::to_string(n) + " " + singular + (n == 1 ? "" : "s");
}

std::string demo_checkpoint_dir() {
  const char* cache = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  std::string base = cache ? cache : (home ? std::string(home) + "/.cache" : "/tmp");
  return base + "/inkling/demo-tiny-bf16";
}

namespace {

// What the demo checkpoint in `dir` lacks ("" when complete): its config, tokenizer, index, or a
// shard the index names (a synth cut short, or a file removed by hand).
std::string demo_missing(const std::string& dir) {
  namespace fs = std::filesystem;
  for (const char* name : {"config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors.index.json"})
    if (!fs::exists(dir + "/" + name)) return name;
  std::ifstream in(dir + "/model.safetensors.index.json");
  nlohmann::json index = nlohmann::json::parse(in, nullptr, false);
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    return "model.safetensors.index.json (unreadable)";
  for (const auto& [tensor, shard] : index["weight_map"].items())
    if (!shard.is_string() || !fs::exists(dir + "/" + shard.get<std::string>()))
      return shard.is_string() ? shard.get<std::string>() : "model.safetensors.index.json (unreadable)";
  return "";
}

}  // namespace

// A path that does not exist is named itself, not as a missing tokenizer.json in its parent.
std::string side_files_dir(const std::string& model) {
  if (!std::filesystem::exists(model)) throw Error(model + ": no such file or directory");
  return checkpoint_side_dir(model).string();
}

std::string missing_tokenizer(const std::string& model) {
  if (!GgufModelFiles::looks_like_gguf(model)) return model + " has no tokenizer.json";
  return model + " is a GGUF model without a vocabulary in its metadata (tokenizer.ggml.tokens) and " +
         side_files_dir(model) + " has no tokenizer.json: put the checkpoint's tokenizer.json (and " +
         "tokenizer_config.json) beside the .gguf file";
}

namespace {

bool has_tokenizer_json(const std::string& model) {
  return std::filesystem::exists(side_files_dir(model) + "/tokenizer.json");
}

}  // namespace

std::optional<Tokenizer> model_tokenizer(const std::string& model) {
  if (has_tokenizer_json(model)) return Tokenizer::from_dir(side_files_dir(model));
  if (!GgufModelFiles::looks_like_gguf(model)) return std::nullopt;
  const std::unique_ptr<GgufModelFiles> gguf = GgufModelFiles::open(model);
  if (!Tokenizer::gguf_has_vocabulary(*gguf)) return std::nullopt;
  return Tokenizer::from_gguf(*gguf);
}

ChatTemplate model_chat_template(const std::string& model, const Tokenizer& tokenizer, const std::string& override_path) {
  const std::string files = side_files_dir(model);
  if (!override_path.empty() || has_tokenizer_json(model) || !GgufModelFiles::looks_like_gguf(model))
    return ChatTemplate::from_dir(files, override_path);
  if (std::optional<ChatTemplate> from_metadata = ChatTemplate::from_gguf(*GgufModelFiles::open(model), tokenizer))
    return std::move(*from_metadata);
  return ChatTemplate::from_dir(files);
}

// -m DIR, or the demo checkpoint (written on first use, and again when a file of it is missing).
std::string model_or_demo(const std::string& model) {
  if (!model.empty()) return model;
  std::string dir = demo_checkpoint_dir();
  const bool exists = std::filesystem::exists(dir);
  const std::string missing = exists ? demo_missing(dir) : "";
  if (!exists || !missing.empty()) {
    if (exists) {
      std::fprintf(stderr, "the demo checkpoint in %s lacks %s: writing it again\n", dir.c_str(), missing.c_str());
      std::filesystem::remove_all(dir);
    } else {
      std::fprintf(stderr, "no -m given: writing the synthetic demo checkpoint (tiny, bf16) to %s\n", dir.c_str());
    }
    SynthOptions options;
    options.format = parse_target_format("original-bf16");
    options.preset = SynthPreset::Tiny;
    Progress progress("synth tiny");
    options.progress = std::ref(progress);
    write_synthetic_checkpoint(dir, options);
    progress.finish();
  }
  std::fprintf(stderr, "demo model: random weights, so the text is noise; pass -m DIR for a real checkpoint (README: \"Run a real model\")\n");
  return dir;
}

}  // namespace inkling::cli
