// inkling chat (interactive REPL), tokenize and render: the chat template on the command line.
#include <omp.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "apps/cli/commands.h"
#include "apps/cli/line_reader.h"
#include "io/gguf.h"
#include "io/text_file.h"
#include "model/synth.h"
#include "runtime/chat/chat_template.h"
#include "runtime/generate/generator.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tensor/error.h"

namespace inkling::cli {

namespace {

using json = nlohmann::ordered_json;

constexpr const char* kDim = "\033[2m";
constexpr const char* kReset = "\033[0m";

std::string read_file(const std::string& path, const char* what) {
  return read_text_file(path, kMaxInputFileBytes, std::string("a ") + what + " file");
}

json read_json(const std::string& path, const char* what) {
  std::string text = read_file(path, what);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    std::string message = e.what();
    for (char& c : message)
      if (c == '\n') c = ' ';
    throw Error(path + ": invalid JSON: " + message);
  }
}


}  // namespace

ChatStream::ChatStream(const Tokenizer& tokenizer, bool show_reasoning)
    : parser_(tokenizer), show_reasoning_(show_reasoning), terminal_(isatty(fileno(stdout)) != 0) {}

void ChatStream::print(const std::vector<ChatEvent>& events) {
  for (const auto& e : events) {
    switch (e.kind) {
      case ChatEvent::Kind::Reasoning:
        if (!show_reasoning_) break;
        if (!in_reasoning_ && terminal_) std::fputs(kDim, stdout);
        in_reasoning_ = true;
        std::fputs(e.text.c_str(), stdout);
        printed_ = true;
        break;
      case ChatEvent::Kind::Content:
      case ChatEvent::Kind::ToolCall:
        if (in_reasoning_) {
          if (terminal_) std::fputs(kReset, stdout);
          std::fputs("\n\n", stdout);
          in_reasoning_ = false;
        }
        if (e.kind == ChatEvent::Kind::Content) {
          std::fputs(e.text.c_str(), stdout);
        } else {
          std::printf("%s[tool call] %s %s\n", printed_ ? "\n" : "", e.name.c_str(), e.arguments.c_str());
        }
        printed_ = true;
        break;
      case ChatEvent::Kind::Error:
        std::fflush(stdout);
        std::fprintf(stderr, "\nwarning: %s\n", e.text.c_str());
        break;
      case ChatEvent::Kind::End:
        if (in_reasoning_ && terminal_) std::fputs(kReset, stdout);
        in_reasoning_ = false;
        break;
      case ChatEvent::Kind::ToolCallStart:
      case ChatEvent::Kind::ToolCallDelta:
        break;  // this parser does not stream calls: each arrives whole as ToolCall
    }
  }
  std::fflush(stdout);
}

void ChatStream::push(int32_t id) { print(parser_.push(id)); }

void ChatStream::finish() {
  print(parser_.finish());
  std::fputs("\n", stdout);
  std::fflush(stdout);
}

namespace {

constexpr const char* kSlashCommands =
    "Commands: /reset (forget the conversation), /effort X (reasoning effort: " /* choices follow */;

std::string slash_help() {
  return std::string(kSlashCommands) + reasoning_effort_choices() +
         "), /help, /quit or /exit (or Ctrl-D). Ctrl-C stops an answer; at the prompt, twice leaves. Arrow keys "
         "edit the line and recall earlier ones (history in ~/.local/state/inkling/chat_history).";
}

// Drops the oldest turns (a user message and what answered it; a system message stays) until the
// rendered conversation plus `room` tokens fits `context`. Returns the turns dropped; the prompt
// of what is left goes to `ids`.
int drop_oldest_turns(json& history, const ChatTemplate& chat_template, const Tokenizer& tokenizer,
                      const ChatRenderOptions& render, int64_t context, int64_t room, std::vector<int32_t>& ids) {
  int dropped = 0;
  ids = chat_template.encode(tokenizer, history, render);
  while (int64_t(ids.size()) + room > context) {
    size_t first = history.size() && history[0]["role"] == "system" ? 1 : 0;
    // The newest user message (the last entry) always stays.
    if (history.size() <= first + 1) break;
    size_t end = first + 1;  // the user message, then everything up to the next user message
    while (end + 1 < history.size() && history[end]["role"] != "user") ++end;
    history.erase(history.begin() + std::ptrdiff_t(first), history.begin() + std::ptrdiff_t(end));
    ++dropped;
    ids = chat_template.encode(tokenizer, history, render);
  }
  return dropped;
}

}  // namespace

Runner add_chat(CLI::App& app) {
  struct Args {
    std::string model, system, effort, chat_template;
    int n = 512;
    RuntimeArgs runtime{.ctx = 8192};
    SamplingArgs sampling;
    bool show_reasoning = false;
  };
  auto args = std::make_shared<Args>();
  app.add_option("-m,--model", args->model, "checkpoint directory or .gguf file (default: a synthetic demo checkpoint)");
  app.add_option("--system", args->system, "system message");
  app.add_option("--reasoning-effort", args->effort,
                 reasoning_effort_choices() + " (default: the template's, 0.9 = high for Inkling's)");
  app.add_flag("--show-reasoning", args->show_reasoning, "show the model's reasoning (dimmed on a terminal)");
  app.add_option("--chat-template", args->chat_template, "Jinja chat template file (overrides the checkpoint's)");
  app.add_option("-n,--max-tokens", args->n, "most tokens per answer")->capture_default_str();
  args->sampling.add_to(app);
  args->runtime.add_to(app, "context limit in tokens (the whole conversation; when full, the oldest turns are dropped)");
  app.footer(slash_help() + "\n" + app.get_footer());
  return [args] {
    RunOptions run = args->runtime.apply();
    args->sampling.check();
    if (args->n <= 0) throw Error("-n must be positive, got " + std::to_string(args->n));
    ChatRenderOptions render;
    if (!args->effort.empty()) render.reasoning_effort = parse_reasoning_effort(args->effort);
    require_utf8(args->system, "--system");
    std::string model_dir = model_or_demo(args->model);
    std::optional<Tokenizer> found = model_tokenizer(model_dir);
    if (!found) throw Error(missing_tokenizer(model_dir));
    Tokenizer tokenizer = std::move(*found);
    ChatTemplate chat_template = model_chat_template(model_dir, tokenizer, args->chat_template);
    const SamplingParams sampling = args->sampling.params(model_dir);
    auto checkpoint = open_for_inference(model_dir, args->runtime);
    InklingModel model(*checkpoint, run);
    show_prefill_progress(model);
    SequenceState state = model.new_sequence();
    GenerateOptions options;
    options.max_tokens = args->n;
    options.sampling = sampling;
    options.stop_ids = {kEosToken};
    if (checkpoint->config().eos_token_id != kEosToken) options.stop_ids.push_back(checkpoint->config().eos_token_id);
    // Room an answer keeps in the context: -n, at most half of it.
    const int64_t answer_room = std::min<int64_t>(args->n, run.context / 2);

    json history = json::array();
    auto reset = [&] {
      history = json::array();
      if (!args->system.empty()) history.push_back({{"role", "system"}, {"content", args->system}});
    };
    reset();
    InterruptGuard interrupts;
    LineReader reader(isatty(fileno(stdin)) ? default_history_file() : "");  // piped input keeps no history
    std::fprintf(stderr, "chat template: %s. Commands: /reset, /effort X, /quit (or Ctrl-D); chat --help for more.\n",
                 chat_template.origin().c_str());
    bool interrupted_at_prompt = false;
    while (true) {
      InterruptGuard::clear();
      std::optional<std::string> read = reader.read("> ");
      if (!read) {
        if (!InterruptGuard::interrupted()) break;  // end of input
        if (interrupted_at_prompt) break;           // the second Ctrl-C in a row
        interrupted_at_prompt = true;
        std::fprintf(stderr, "\n(Ctrl-C again, /quit or Ctrl-D to leave)\n");
        continue;
      }
      interrupted_at_prompt = false;
      std::string line = *read;
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
      if (line.empty()) continue;
      reader.remember(line);
      if (line == "/quit" || line == "/exit") break;
      if (line == "/reset") {
        reset();
        state = model.new_sequence();
        std::fprintf(stderr, "(conversation cleared)\n");
        continue;
      }
      if (line == "/help" || line == "/?") {
        std::fprintf(stderr, "%s\n", slash_help().c_str());
        continue;
      }
      if (line.rfind("/effort", 0) == 0) {
        std::string value = line.size() > 7 ? line.substr(8) : "";
        try {
          render.reasoning_effort = parse_reasoning_effort(value);
          std::fprintf(stderr, "(reasoning effort: %s)\n", value.c_str());
        } catch (const Error& e) {
          std::fprintf(stderr, "error: %s\n", e.what());
        }
        continue;
      }
      if (line[0] == '/') {
        std::fprintf(stderr, "unknown command %s; commands: /reset, /effort X, /help, /quit\n", line.c_str());
        continue;
      }
      try {
        require_utf8(line, "this message");
      } catch (const Error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        continue;
      }
      history.push_back({{"role", "user"}, {"content", line}});
      try {
        std::vector<int32_t> ids;
        const int dropped = drop_oldest_turns(history, chat_template, tokenizer, render, run.context, answer_room, ids);
        if (dropped > 0)
          std::fprintf(stderr, "(context full: dropped the oldest %s; /reset clears the conversation, --ctx raises the limit)\n",
                       count_of(dropped, "turn").c_str());
        if (int64_t(ids.size()) + 1 > run.context)
          throw Error("this message needs " + count_of(int64_t(ids.size()), "token") + " with the template, more than --ctx " +
                      std::to_string(run.context));
        // Reuse the cache when the conversation so far is a prefix of the new prompt.
        std::span<const int32_t> feed(ids);
        if (state.tokens.size() < ids.size() && std::equal(state.tokens.begin(), state.tokens.end(), ids.begin()))
          feed = feed.subspan(state.tokens.size());
        else
          state = model.new_sequence();
        ChatStream stream(tokenizer, args->show_reasoning);
        TokenCallback on_token = [&](int32_t token, std::span<const float>) {
          stream.push(token);
          return !InterruptGuard::interrupted();  // Ctrl-C ends the answer, not the session
        };
        GenerateResult result = generate(model, state, feed, options, on_token);
        stream.finish();
        json reply = stream.parser().message();
        reply.erase("tool_calls");  // no tool results can follow in this REPL
        history.push_back(reply);
        if (result.stop_reason == "callback")
          std::fprintf(stderr, "(stopped)\n");
        else if (result.stop_reason != "stop_token")
          std::fprintf(stderr, "(answer cut: %s)\n", result.stop_reason.c_str());
      } catch (const Error& e) {
        history.erase(history.end() - 1);
        state = model.new_sequence();
        std::fprintf(stderr, "error: %s\n", e.what());
      }
    }
    if (reader.interactive()) std::fputs("\n", stderr);
    return 0;
  };
}

Runner add_tokenize(CLI::App& app) {
  struct Args {
    std::string model, text;
    bool no_special = false;
  };
  auto args = std::make_shared<Args>();
  app.add_option("-m,--model", args->model, "checkpoint directory (its tokenizer.json)")->required();
  app.add_option("text", args->text, "text to encode (one that starts with '-' goes after --)")->required();
  app.add_flag("--no-special", args->no_special, "treat special-token strings as plain text");
  app.footer("Prints the ids comma-separated, the form generate --prompt-ids takes.\n");
  return [args] {
    require_utf8(args->text, "the text");
    std::optional<Tokenizer> tokenizer = model_tokenizer(args->model);
    if (!tokenizer) throw Error(missing_tokenizer(args->model));
    std::vector<int32_t> ids = tokenizer->encode(args->text, !args->no_special);
    std::string line;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) line += ',';
      line += std::to_string(ids[i]);
    }
    std::printf("%s\n", line.c_str());
    return 0;
  };
}

Runner add_render(CLI::App& app) {
  struct Args {
    std::string model, messages, tools, effort, chat_template;
    bool no_generation_prompt = false;
  };
  auto args = std::make_shared<Args>();
  app.add_option("-m,--model", args->model, "checkpoint directory (its chat template)");
  app.add_option("--messages", args->messages, "JSON file: an array of {role, content, ...} messages")->required();
  app.add_option("--tools", args->tools, "JSON file: an array of tool declarations");
  app.add_option("--reasoning-effort", args->effort, reasoning_effort_choices());
  app.add_option("--chat-template", args->chat_template, "Jinja chat template file (overrides the checkpoint's)");
  app.add_flag("--no-generation-prompt", args->no_generation_prompt, "leave out the trailing <|message_model|>");
  return [args] {
    if (args->model.empty() && args->chat_template.empty()) throw Error("give a checkpoint with -m DIR or a --chat-template FILE");
    if (!args->model.empty() && !std::filesystem::is_directory(args->model) && !GgufModelFiles::looks_like_gguf(args->model))
      throw Error(args->model + " is not a directory (-m takes a checkpoint directory or a .gguf file)");
    ChatRenderOptions options;
    options.add_generation_prompt = !args->no_generation_prompt;
    if (!args->effort.empty()) options.reasoning_effort = parse_reasoning_effort(args->effort);
    json messages = read_json(args->messages, "messages");
    if (!args->tools.empty()) options.tools = read_json(args->tools, "tools");
    std::optional<Tokenizer> tokenizer;  // a GGUF model's template takes its special tokens' texts
    if (!args->model.empty() && args->chat_template.empty()) tokenizer = model_tokenizer(args->model);
    ChatTemplate chat_template =
        args->model.empty() ? ChatTemplate::from_source(read_file(args->chat_template, "chat template"), args->chat_template)
        : tokenizer         ? model_chat_template(args->model, *tokenizer, args->chat_template)
                            : ChatTemplate::from_dir(side_files_dir(args->model), args->chat_template);
    std::string prompt = chat_template.render(messages, options);
    std::fwrite(prompt.data(), 1, prompt.size(), stdout);
    std::fputs("\n", stdout);
    return 0;
  };
}

}  // namespace inkling::cli
