// Subcommands of the `inkling` binary. Each registers its options on the CLI11 app and returns
// the function that runs it (after parsing). Errors are thrown as inkling::Error.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "model/forward.h"
#include "runtime/generate/sampler.h"

#include "runtime/chat/chat_template.h"
#include "runtime/chat/output_parser.h"
#include "runtime/tokenizer/tokenizer.h"

namespace inkling::cli {

using Runner = std::function<int()>;

Runner add_synth(CLI::App& app);
Runner add_inspect(CLI::App& app);
Runner add_quantize(CLI::App& app);
Runner add_generate(CLI::App& app);
Runner add_chat(CLI::App& app);      // cmd_chat.cpp
Runner add_tokenize(CLI::App& app);  // cmd_chat.cpp
Runner add_render(CLI::App& app);    // cmd_chat.cpp
Runner add_bench(CLI::App& app);
Runner add_bench_grammar(CLI::App& app);  // cmd_bench_grammar.cpp
Runner add_serve(CLI::App& app);    // cmd_serve.cpp

// Options of every command that runs the model (generate, chat, bench).
struct RuntimeArgs {
  std::string kv_dtype = "bf16";
  int threads = 0;
  int64_t ctx = 4096;
  bool fast = false;
  bool llama_rounding = false;
  bool batch_invariant = false;
  bool mmap = false;
  void add_to(CLI::App& app, const char* ctx_help);
  // Validates, applies the thread count, and returns the model's run options.
  RunOptions apply() const;
  // "exact", "fast" or "llama.cpp rounding", then ", batch-invariant" when it is on: for tables and logs.
  std::string precision_label() const {
    return std::string(llama_rounding ? "llama.cpp rounding" : fast ? "fast" : "exact") +
           (batch_invariant ? ", batch-invariant" : "");
  }
};

// Opens a checkpoint to run: the weights copied into huge pages (with progress for large ones)
// unless --mmap is given or the kernel has transparent huge pages off; says which on stderr.
std::unique_ptr<Checkpoint> open_for_inference(const std::string& dir, const RuntimeArgs& runtime);
// "huge pages" or "mmap": where open_for_inference put the weights of `checkpoint`.
const char* weight_memory_label(const Checkpoint& checkpoint);

// Sampling options of generate and chat. An option not given takes the checkpoint's default
// from generation_config.json (as transformers and vLLM do), else greedy.
struct SamplingArgs {
  float temp = 0.0f, top_p = 1.0f, min_p = 0.0f, repeat_penalty = 1.0f, presence_penalty = 0.0f,
        frequency_penalty = 0.0f;
  int top_k = 0;
  int64_t seed = 0;  // -1: a random seed, printed
  void add_to(CLI::App& app);
  // The options as given, validated (without the checkpoint's defaults): call before loading.
  void check() const;
  // The sampling to use with -m `model`; prints it and where its defaults came from on stderr
  // ("sampling: ...").
  SamplingParams params(const std::string& model) const;

 private:
  std::vector<CLI::Option*> options_;  // in the order of the fields above: temp, top_p, min_p, ...
  SamplingParams given(const SamplingParams& defaults) const;
};

// The sampling defaults of -m MODEL: generation_config.json in its side-file directory (greedy
// when do_sample is false), else for a GGUF model its general.sampling.* metadata, else greedy;
// a request's or option's own value overrides them.
SamplingParams generation_defaults(const std::string& model);
// Where generation_defaults(model) takes them from: "generation_config.json", "GGUF metadata",
// or "" (greedy, no source).
std::string sampling_defaults_source(const std::string& model);
// The general.sampling.* keys of a GGUF file (llama.cpp's converter copies generation_config.json
// into temp, top_k, top_p, min_p, penalty_repeat, ...) as sampling defaults: greedy when the file
// has none of them; throws naming the file for a value out of range.
inline constexpr const char* kGgufSamplingPrefix = "general.sampling.";
SamplingParams gguf_sampling_defaults(const GgufFile& file);
// "greedy" or "temperature 0.7, top-k 40, top-p 0.95, seed 0" (only what is on).
std::string describe_sampling(const SamplingParams& params);

// Shows the progress of long prefills of `model` on a terminal (stderr).
void show_prefill_progress(InklingModel& model);
// "1 token", "2 tokens".
std::string count_of(int64_t n, const char* singular);

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
// -m DIR, or the demo checkpoint (written on first use, or again when files of it are missing,
// with a note on stderr).
std::string model_or_demo(const std::string& model);
// Where a -m argument's tokenizer.json, tokenizer_config.json, generation_config.json and chat
// template are: the directory itself, or for a .gguf file the directory holding it.
std::string side_files_dir(const std::string& model);
// "M has no tokenizer.json" for -m M, saying for a GGUF model without a vocabulary in its
// metadata where to put one.
std::string missing_tokenizer(const std::string& model);
// The tokenizer of -m M: tokenizer.json (with tokenizer_config.json) in its side-file directory,
// else a GGUF model's tokenizer.ggml.* metadata; nullopt when it has neither.
std::optional<Tokenizer> model_tokenizer(const std::string& model);
// The chat template of -m M, whose tokenizer is `tokenizer`: `override_path` when given, else the
// side files' (tokenizer_config.json, chat_template.jinja) beside a tokenizer.json, else a GGUF
// model's tokenizer.chat_template, else chat_template.jinja beside it or the built-in one.
ChatTemplate model_chat_template(const std::string& model, const Tokenizer& tokenizer, const std::string& override_path);

// Prints one streamed chat turn (cmd_chat.cpp): the answer on stdout as it arrives; reasoning
// hidden, or with show_reasoning shown (dimmed on a terminal); tool calls as "[tool call] ..."
// lines; malformed calls as warnings on stderr.
class ChatStream {
 public:
  ChatStream(const Tokenizer& tokenizer, bool show_reasoning);
  void push(int32_t id);
  // Ends the turn (flushes a turn cut short by the token limit) and the line.
  void finish();
  const OutputParser& parser() const { return parser_; }

 private:
  void print(const std::vector<ChatEvent>& events);
  OutputParser parser_;
  bool show_reasoning_, terminal_;
  bool in_reasoning_ = false, printed_ = false;
};

}  // namespace inkling::cli
