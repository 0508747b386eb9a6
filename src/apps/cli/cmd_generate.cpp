// inkling generate: prompt (text or ids) -> tokens, streamed.
#include <omp.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "apps/cli/commands.h"
#include "model/config.h"
#include "model/gguf_checkpoint.h"
#include "model/synth.h"
#include "io/text_file.h"
#include "runtime/chat/chat_template.h"
#include "runtime/grammar/json_schema.h"
#include "runtime/generate/generator.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tensor/error.h"

namespace inkling::cli {

namespace {

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || item.find_first_not_of(" \t", used) != std::string::npos || value < INT32_MIN || value > INT32_MAX)
      throw Error("--prompt-ids: \"" + item + "\" is not an integer token id");
    ids.push_back(int32_t(value));
  }
  if (ids.empty()) throw Error("--prompt-ids is empty");
  return ids;
}

// Writes a float32 .npy of shape [rows, cols].
void write_npy(const std::string& path, const std::vector<float>& data, int64_t rows, int64_t cols) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                       std::to_string(cols) + "), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write("\x93NUMPY\x01\x00", 8);
  uint16_t length = uint16_t(header.size());
  out.write(reinterpret_cast<const char*>(&length), 2);
  out.write(header.data(), std::streamsize(header.size()));
  out.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size() * 4));
  if (!out) throw Error("cannot write " + path);
}

// Fails now, before the weights load, when `path` cannot be written (the file is written at the end).
void check_writable(const std::string& path, const char* option) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(std::string("cannot write ") + option + " file " + path + ": " + std::strerror(errno));
}

std::string join_ids(const std::vector<int32_t>& ids) {
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) line += (i ? "," : "") + std::to_string(ids[i]);
  return line;
}

}  // namespace

Runner add_generate(CLI::App& app) {
  struct Args {
    std::string model, prompt, prompt_ids, logits_out;
    int n = 128;
    RuntimeArgs runtime;
    SamplingArgs sampling;
    bool print_ids = false, no_special = false;
    bool chat = false, show_reasoning = false;  // --chat: through the chat template
    std::string system, reasoning_effort, chat_template;
    std::string grammar_file, schema_file;  // constrained output (raw generation)
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  app.add_option("-m,--model", args->model, "checkpoint directory or .gguf file (default: a synthetic demo checkpoint)");
  auto* prompt = app.add_option("-p,--prompt", args->prompt, "prompt text (raw: no chat template; see --chat)");
  auto* ids = app.add_option("--prompt-ids", args->prompt_ids, "prompt as comma-separated token ids (bypasses the tokenizer)");
  prompt->excludes(ids);
  app.add_option("-n,--max-tokens", args->n, "tokens to generate")->capture_default_str();
  args->sampling.add_to(app);
  args->runtime.add_to(app, "context limit in tokens (prompt + generation)");
  app.add_flag("--print-ids", args->print_ids,
               "after the text, print the generated ids as one comma-separated line, last on stdout");
  app.add_flag("--no-special", args->no_special, "treat special-token strings in -p as plain text");
  app.add_flag("--chat", args->chat, "treat -p as a user message: render it through the chat template, stream the answer");
  auto* system = app.add_option("--system", args->system, "with --chat: a system message");
  auto* effort = app.add_option("--reasoning-effort", args->reasoning_effort,
                                "with --chat: " + reasoning_effort_choices() +
                                    " (default: the template's, 0.9 = high for Inkling's)");
  auto* show = app.add_flag("--show-reasoning", args->show_reasoning, "with --chat: show the reasoning (dimmed on a terminal)");
  auto* chat_template = app.add_option("--chat-template", args->chat_template,
                                       "with --chat: Jinja template file (overrides the checkpoint's)");
  app.add_option("--logits-out", args->logits_out,
                 "write float32 .npy [n_generated, vocab]: row i = the logits that chose generated token i");
  auto* grammar_option = app.add_option("--grammar", args->grammar_file, "constrain the output to a GBNF grammar file (docs/grammar.md)");
  auto* schema_option = app.add_option("--json-schema", args->schema_file, "constrain the output to JSON valid under a JSON Schema file");
  auto* json_option = app.add_flag("--json", args->json, "constrain the output to a JSON object");
  grammar_option->excludes(schema_option)->excludes(json_option);
  schema_option->excludes(json_option);
  return [args, system, effort, show, chat_template] {
    // Every check that needs no weights comes first.
    RunOptions run = args->runtime.apply();
    args->sampling.check();
    if (args->n <= 0) throw Error("-n must be positive, got " + std::to_string(args->n));
    if (!args->chat)
      for (const CLI::Option* option : {system, effort, show, chat_template})
        if (option->count() > 0) throw Error(option->get_name() + " needs --chat (it applies to the chat template)");
    if (!args->reasoning_effort.empty()) parse_reasoning_effort(args->reasoning_effort);
    if (args->chat && !args->prompt_ids.empty()) throw Error("--chat takes a text prompt (-p), not --prompt-ids");
    const bool constrained = !args->grammar_file.empty() || !args->schema_file.empty() || args->json;
    if (constrained && args->chat) throw Error("--grammar, --json-schema and --json apply to raw generation (not --chat yet)");
    // The grammar is compiled before the weights load: a bad schema is an error in milliseconds.
    std::shared_ptr<const grammar::Grammar> output_grammar;
    if (!args->grammar_file.empty())
      output_grammar = std::make_shared<grammar::Grammar>(
          grammar::parse_gbnf(read_text_file(args->grammar_file, size_t(16) << 20, "a grammar file")));
    if (!args->schema_file.empty())
      output_grammar = std::make_shared<grammar::Grammar>(grammar::compile_json_schema(
          std::string_view(read_text_file(args->schema_file, size_t(16) << 20, "a JSON Schema file"))));
    if (args->json) output_grammar = std::make_shared<grammar::Grammar>(grammar::parse_gbnf(grammar::free_json_gbnf(true)));
    if (args->prompt.empty() && args->prompt_ids.empty())
      throw Error("give a prompt with -p TEXT or --prompt-ids 1,2,3");
    require_utf8(args->prompt, "--prompt");
    require_utf8(args->system, "--system");
    std::vector<int32_t> prompt;
    if (!args->prompt_ids.empty()) prompt = parse_ids(args->prompt_ids);
    if (!args->logits_out.empty()) check_writable(args->logits_out, "--logits-out");

    std::string model_dir = model_or_demo(args->model);
    const ModelConfig config = load_checkpoint_config(model_dir);
    for (int32_t id : prompt)
      if (id < 0 || id >= config.text.unpadded_vocab_size)
        throw Error("--prompt-ids: token id " + std::to_string(id) + " is out of range for this model (vocabulary 0.." +
                    std::to_string(config.text.unpadded_vocab_size - 1) + ")");
    std::optional<Tokenizer> tokenizer = model_tokenizer(model_dir);
    if (args->chat) {
      if (!tokenizer) throw Error(missing_tokenizer(model_dir) + "; --chat needs one");
      nlohmann::ordered_json messages = nlohmann::ordered_json::array();
      if (!args->system.empty()) messages.push_back({{"role", "system"}, {"content", args->system}});
      messages.push_back({{"role", "user"}, {"content", args->prompt}});
      ChatRenderOptions render;
      if (!args->reasoning_effort.empty()) render.reasoning_effort = parse_reasoning_effort(args->reasoning_effort);
      prompt = model_chat_template(model_dir, *tokenizer, args->chat_template).encode(*tokenizer, messages, render);
    } else if (prompt.empty()) {
      if (!tokenizer) throw Error(missing_tokenizer(model_dir) + "; use --prompt-ids");
      prompt = tokenizer->encode(args->prompt, !args->no_special);
      if (prompt.empty()) throw Error("the prompt encodes to no tokens");
    }
    if (int64_t(prompt.size()) + 1 > run.context)
      throw Error("the prompt is " + count_of(int64_t(prompt.size()), "token") + ", which leaves no room in --ctx " +
                  std::to_string(run.context));
    if (!tokenizer && !args->print_ids) {
      std::fprintf(stderr, "%s; printing the generated token ids\n", missing_tokenizer(model_dir).c_str());
      args->print_ids = true;
    }
    const SamplingParams sampling = args->sampling.params(model_dir);

    auto checkpoint = open_for_inference(model_dir, args->runtime);
    InklingModel model(*checkpoint, run);
    show_prefill_progress(model);
    SequenceState state = model.new_sequence();
    GenerateOptions options;
    options.max_tokens = args->n;
    options.sampling = sampling;
    options.stop_ids = {checkpoint->config().eos_token_id};
    std::optional<grammar::GrammarMatcher> matcher;
    if (output_grammar) {
      if (!tokenizer) throw Error(missing_tokenizer(model_dir) + "; a grammar needs one");
      matcher.emplace(output_grammar, grammar::TokenVocabulary::from_tokenizer(*tokenizer, int32_t(model.vocab()), options.stop_ids));
      options.constraint = &*matcher;
    }

    std::vector<float> all_logits;
    std::optional<IncrementalDecoder> decoder;
    std::optional<ChatStream> chat_stream;
    if (args->chat) chat_stream.emplace(*tokenizer, args->show_reasoning);
    if (tokenizer && !args->chat) decoder.emplace(*tokenizer, /*skip_special=*/true);
    bool echoed = false;
    TokenCallback on_token = [&](int32_t token, std::span<const float> logits) {
      // The prompt is echoed once its prefill went through (an error before that prints only the error).
      if (decoder && !echoed && !args->prompt.empty()) std::fputs(args->prompt.c_str(), stdout);
      echoed = true;
      if (!args->logits_out.empty()) all_logits.insert(all_logits.end(), logits.begin(), logits.end());
      if (chat_stream) chat_stream->push(token);
      if (decoder && token != checkpoint->config().eos_token_id) {
        std::fputs(decoder->push(token).c_str(), stdout);
        std::fflush(stdout);
      }
      return true;
    };
    GenerateResult result = generate(model, state, prompt, options, on_token);
    if (decoder) std::printf("%s\n", decoder->flush().c_str());
    if (chat_stream) chat_stream->finish();
    if (!args->logits_out.empty())
      write_npy(args->logits_out, all_logits, int64_t(result.tokens.size()), model.vocab());
    if (args->print_ids) std::printf("%s\n", join_ids(result.tokens).c_str());
    std::fflush(stdout);  // the text ends before the statistics line on a shared terminal
    std::fprintf(stderr, "prompt: %s, %.2f s, %.1f tok/s | generated: %s, %.2f tok/s | stop: %s\n",
                 count_of(result.prompt_tokens, "token").c_str(), result.prompt_seconds,
                 double(result.prompt_tokens) / std::max(result.prompt_seconds, 1e-9),
                 count_of(int64_t(result.tokens.size()), "token").c_str(),
                 result.tokens.size() > 1 ? double(result.tokens.size() - 1) / std::max(result.generate_seconds, 1e-9) : 0.0,
                 result.stop_reason.c_str());
    return 0;
  };
}

}  // namespace inkling::cli
