// inkling serve: the OpenAI- and Anthropic-compatible HTTP server (apps/server) around one
// inference loop (runtime/serve).
#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "apps/cli/commands.h"
#include "apps/server/server.h"
#include "io/gguf.h"
#include "io/text_file.h"
#include "runtime/chat/chat_template.h"
#include "runtime/serve/engine.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tensor/error.h"

namespace inkling::cli {

namespace {

std::string read_key_file(const std::string& path) {
  std::string key = read_text_file(path, 64 << 10, "an --api-key-file");
  while (!key.empty() && (key.back() == '\n' || key.back() == '\r' || key.back() == ' ')) key.pop_back();
  if (key.empty()) throw Error("--api-key-file " + path + " is empty");
  return key;
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace

Runner add_serve(CLI::App& app) {
  struct Args {
    std::string model, host = "127.0.0.1", api_key, api_key_file, alias, cors, chat_template;
    int port = 8080, parallel = 4, test_step_delay_ms = 0;
    int64_t batch_tokens = 256, checkpoint_every = 1024;
    double kv_budget_mib = 0, cache_ram_mib = 1024, max_step_ms = 0;
    size_t max_body = 8u << 20;
    RuntimeArgs runtime;
    bool test_scripts = false;
  };
  auto args = std::make_shared<Args>();
  app.add_option("-m,--model", args->model, "checkpoint directory or .gguf file (default: the synthetic demo checkpoint)");
  app.add_option("--host", args->host, "address to listen on")->capture_default_str();
  app.add_option("--port", args->port, "port to listen on (0: any free port, printed at start)")->capture_default_str();
  auto* key = app.add_option("--api-key", args->api_key,
                             "require this key (Authorization: Bearer KEY or x-api-key: KEY) on every route but /health and the chat page");
  app.add_option("--api-key-file", args->api_key_file, "read the key from a file (keeps it out of the process list)")
      ->excludes(key);
  app.add_option("--parallel", args->parallel,
                 "requests in flight at once, stepped together in one batch; more wait in a queue")
      ->capture_default_str();
  app.add_option("--batch-tokens", args->batch_tokens,
                 "tokens per batched step: one per generating request, the rest for prompt chunks")
      ->capture_default_str();
  app.add_option("--max-step-ms", args->max_step_ms,
                 "while requests generate, cut new prompts' chunks so a step takes about this long at most "
                 "(learnt from the steps run): streams keep their pace, new prompts wait longer for their first "
                 "token; a prompt still advances 16 tokens a step (0: no cut, prompts take all of --batch-tokens)")
      ->capture_default_str();
  app.add_option("--kv-budget", args->kv_budget_mib,
                 "MiB of KV cache and state for running requests; a request reserves its prompt + max_tokens "
                 "(0: --parallel full contexts)")
      ->capture_default_str();
  app.add_option("--cache-ram", args->cache_ram_mib,
                 "MiB of prompt-cache snapshots (end of prompts and responses, long prompts every "
                 "--checkpoint-every tokens), least recently used dropped first (0: off)")
      ->capture_default_str();
  app.add_option("--checkpoint-every", args->checkpoint_every,
                 "prompt-cache snapshot interval within long prompts, in tokens (0: only at their end)")
      ->capture_default_str();
  app.add_option("--alias", args->alias, "model name reported by /v1/models and in responses (default: the directory name)");
  app.add_option("--cors-origins", args->cors, "comma-separated origins allowed by CORS, or * (default: CORS off)");
  app.add_option("--max-body", args->max_body, "largest request body in bytes (larger: 413)")->capture_default_str();
  app.add_option("--chat-template", args->chat_template, "Jinja chat template file (overrides the checkpoint's)");
  args->runtime.add_to(app, "context per request in tokens (prompt + generation)");
  app.add_flag("--test-scripts", args->test_scripts,
               "TESTS ONLY: honour the request field \"inkling_test_script\", a text whose tokens replace sampling "
               "(so a random-weight model can write reasoning and tool calls)");
  app.add_option("--test-step-delay-ms", args->test_step_delay_ms,
                 "TESTS ONLY: sleep this long after every step of a sequence (makes prefill and decode slow enough to "
                 "interrupt)");
  return [args] {
    if (args->batch_tokens < 1 || args->batch_tokens > 65536)
      throw Error("--batch-tokens must be 1..65536, got " + std::to_string(args->batch_tokens));
    if (!(args->kv_budget_mib >= 0 && args->kv_budget_mib < 1e9)) throw Error("--kv-budget must be 0..1e9 MiB");
    if (!(args->cache_ram_mib >= 0 && args->cache_ram_mib < 1e9)) throw Error("--cache-ram must be 0..1e9 MiB");
    if (args->checkpoint_every < 0) throw Error("--checkpoint-every must not be negative");
    if (!(args->max_step_ms >= 0 && args->max_step_ms <= 3.6e6)) throw Error("--max-step-ms must be 0..3600000");
    RunOptions run = args->runtime.apply();
    run.max_chunk = args->batch_tokens;
    if (args->parallel < 1 || args->parallel > 256) throw Error("--parallel must be 1..256, got " + std::to_string(args->parallel));
    if (args->parallel > args->batch_tokens)
      throw Error("--parallel " + std::to_string(args->parallel) + " needs --batch-tokens of at least as many");
    if (args->port < 0 || args->port > 65535) throw Error("--port must be 0..65535, got " + std::to_string(args->port));
    if (args->max_body < 1024) throw Error("--max-body must be at least 1024 bytes");
    if (args->test_step_delay_ms < 0) throw Error("--test-step-delay-ms must not be negative");
    server::ServerOptions options;
    options.host = args->host;
    options.port = args->port;
    options.api_key = args->api_key_file.empty() ? args->api_key : read_key_file(args->api_key_file);
    options.cors_origins = split_list(args->cors);
    options.max_body = args->max_body;
    options.allow_scripts = args->test_scripts;
    options.http_threads = 2 * args->parallel + 16;

    const std::string model_dir = model_or_demo(args->model);
    if (!std::filesystem::is_directory(model_dir) && !GgufModelFiles::looks_like_gguf(model_dir))
      throw Error("-m " + model_dir + ": no such checkpoint directory or .gguf file");
    std::optional<Tokenizer> found = model_tokenizer(model_dir);
    if (!found) throw Error(missing_tokenizer(model_dir) + "; the server needs one");
    Tokenizer tokenizer = std::move(*found);
    ChatTemplate chat_template = model_chat_template(model_dir, tokenizer, args->chat_template);
    options.default_sampling = generation_defaults(model_dir);
    options.model_name = !args->alias.empty() ? args->alias
                                              : std::filesystem::path(model_dir).lexically_normal().filename().string();
    if (options.model_name.empty()) options.model_name = std::filesystem::path(model_dir).parent_path().filename().string();

    // SIGINT / SIGTERM are taken by one thread (sigwait) so the server stops cleanly; a closed
    // client socket must not kill the process.
    signal(SIGPIPE, SIG_IGN);
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);

    server::ServerState state;
    state.tokenizer = &tokenizer;
    state.chat_template = &chat_template;
    server::HttpServer http(options, state);
    http.start();
    std::fprintf(stderr, "listening on http://%s:%d (model \"%s\", %d slots, context %lld, chat template: %s%s%s)\n",
                 options.host.c_str(), http.port(), options.model_name.c_str(), args->parallel, (long long)run.context,
                 chat_template.origin().c_str(), options.api_key.empty() ? "" : ", API key required",
                 options.allow_scripts ? ", TEST SCRIPTS ON" : "");
    std::fflush(stderr);
    std::thread signal_thread([&] {
      int received = 0;
      sigwait(&signals, &received);
      std::fprintf(stderr, "signal %d: stopping\n", received);
      if (serve::Engine* engine = state.engine.load()) engine->cancel_all();  // in-flight requests end now
      http.stop();
    });
    signal_thread.detach();

    auto checkpoint = open_for_inference(model_dir, args->runtime);
    InklingModel model(*checkpoint, run);
    serve::EngineOptions engine_options;
    engine_options.parallel = args->parallel;
    engine_options.prefill_chunk = model.max_step_tokens();
    engine_options.batch_tokens = model.max_step_tokens();
    engine_options.kv_budget = int64_t(args->kv_budget_mib * 1048576.0);
    engine_options.cache_budget = int64_t(args->cache_ram_mib * 1048576.0);
    engine_options.checkpoint_every = args->checkpoint_every;
    engine_options.max_step_seconds = args->max_step_ms / 1000.0;
    engine_options.allow_scripts = args->test_scripts;
    engine_options.test_step_delay_ms = args->test_step_delay_ms;
    engine_options.stop_ids = {checkpoint->config().eos_token_id};
    if (checkpoint->config().eos_token_id != 200006) engine_options.stop_ids.push_back(200006);
    serve::Engine engine(model, tokenizer, engine_options);
    state.engine = &engine;
    char step_ms[32];
    std::snprintf(step_ms, sizeof step_ms, "%g", args->max_step_ms);
    const std::string step_target =
        args->max_step_ms > 0 ? std::string(" (prompts cut to keep steps under ") + step_ms + " ms while requests generate)" : "";
    std::fprintf(stderr,
                 "ready: %s, weights in %s, %s precision; batches of up to %d requests / %lld tokens per step%s; KV "
                 "budget %lld MiB (%lld MiB per full context); prompt cache %lld MiB\n",
                 model_dir.c_str(), weight_memory_label(*checkpoint), args->runtime.precision_label().c_str(),
                 args->parallel,
                 (long long)engine.options().batch_tokens, step_target.c_str(), (long long)(engine.options().kv_budget >> 20),
                 (long long)((model.state_bytes(run.context) + (1 << 20) - 1) >> 20), (long long)args->cache_ram_mib);
    std::fflush(stderr);
    std::fflush(stderr);
    http.wait();
    state.engine = nullptr;
    return 0;
  };
}

}  // namespace inkling::cli
