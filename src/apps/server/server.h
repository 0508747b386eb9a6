// inkling serve: HTTP routes in front of one serve::Engine.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/chat/chat_template.h"
#include "runtime/generate/sampler.h"
#include "runtime/serve/engine.h"
#include "runtime/tokenizer/tokenizer.h"

namespace inkling::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;                    // empty: no auth
  std::vector<std::string> cors_origins;  // empty: no CORS headers; "*" allows any origin
  size_t max_body = 8u << 20;
  std::string model_name = "inkling";
  bool allow_scripts = false;  // tests only
  SamplingParams default_sampling;
  int http_threads = 0;  // 0: 2 x parallel + 8
};

// Everything a running server reads. The engine is created once the model has loaded; until
// then /health answers 503 and the generation routes 503 too.
struct ServerState {
  const Tokenizer* tokenizer = nullptr;
  const ChatTemplate* chat_template = nullptr;
  std::atomic<serve::Engine*> engine{nullptr};
};

class HttpServer {
 public:
  HttpServer(ServerOptions options, ServerState& state);
  ~HttpServer();
  // Binds (throws inkling::Error naming the address when it cannot), then serves on a background
  // thread until stop().
  void start();
  void stop();
  // Blocks until the server stops.
  void wait();
  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace inkling::server
