#include "apps/server/server.h"

#include <dirent.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

#include "apps/server/front_door.h"
#include "apps/server/page.h"
#include "runtime/serve/prompt.h"
#include "tensor/error.h"

namespace inkling::server {

namespace {

using Clock = std::chrono::steady_clock;

// What the log line and the metrics say about the request a thread is serving.
struct RequestRecord {
  Clock::time_point start;
  int64_t prompt_tokens = -1, generated_tokens = -1, reasoning_tokens = 0;
  std::string note;
};
thread_local RequestRecord current_record;

// Compares every byte of the key whatever the given text, so the time says nothing of it.
bool constant_time_equal(const std::string& given, const std::string& key) {
  unsigned char diff = given.size() == key.size() ? 0 : 1;
  for (size_t i = 0; i < key.size(); ++i) {
    const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff |= static_cast<unsigned char>(g ^ static_cast<unsigned char>(key[i]));
  }
  return diff == 0 && !key.empty();
}

bool is_anthropic_route(const std::string& path) { return path.rfind("/v1/messages", 0) == 0; }

// Cancels a request when the HTTP side lets go of it (the stream ended, or was never read).
struct CancelOnRelease {
  explicit CancelOnRelease(std::shared_ptr<serve::RequestHandle> h) : handle(std::move(h)) {}
  CancelOnRelease(const CancelOnRelease&) = delete;
  CancelOnRelease& operator=(const CancelOnRelease&) = delete;
  std::shared_ptr<serve::RequestHandle> handle;
  ~CancelOnRelease() {
    if (handle) handle->cancel();
  }
};

}  // namespace

struct HttpServer::Impl {
  ServerOptions options;
  ServerState* state;
  httplib::Server http;
  std::thread thread;
  int bound_port = -1;

  std::mutex metrics_mutex;
  ResponseStore responses;
  std::map<std::pair<std::string, int>, int64_t> requests;  // (route, status) -> count

  void send_error(const httplib::Request& req, httplib::Response& res, const ApiError& error) {
    res.status = error.status;
    json body = is_anthropic_route(req.path) ? anthropic_error(error) : openai_error(error);
    res.set_content(dump(body), "application/json");
    current_record.note = error.what();
  }

  DoorContext door_context(const serve::Engine& engine) const {
    DoorContext c;
    c.tokenizer = state->tokenizer;
    c.model_name = options.model_name;
    c.default_sampling = options.default_sampling;
    c.context = engine.context();
    c.allow_scripts = options.allow_scripts;
    c.responses = const_cast<ResponseStore*>(&responses);
    return c;
  }

  serve::Engine& ready_engine() {
    serve::Engine* engine = state->engine.load();
    if (!engine) throw ApiError(503, "unavailable_error", "the model is still loading");
    if (!engine->alive()) throw ApiError(503, "unavailable_error", "the inference loop has stopped; restart the server");
    return *engine;
  }

  std::vector<int32_t> encode(const serve::Request& request) {
    try {
      return serve::encode_prompt(request, *state->tokenizer, *state->chat_template);
    } catch (const Error& e) {
      throw bad_request(std::string("cannot build the prompt: ") + e.what(), "messages");
    }
  }

  void check_prompt(const std::vector<int32_t>& prompt, const serve::Engine& engine) {
    if (prompt.empty()) throw bad_request("the prompt encodes to no tokens", "prompt");
    if (int64_t(prompt.size()) + 1 > engine.context()) {
      ApiError error(400, "invalid_request_error",
                     "the prompt is " + std::to_string(prompt.size()) + " tokens, which leaves no room in the context of " +
                         std::to_string(engine.context()) + " tokens (start the server with a larger --ctx)");
      error.param = "messages";
      error.extra = {{"n_prompt_tokens", prompt.size()}, {"n_ctx", engine.context()}};
      throw error;
    }
  }

  // The generation routes: parse, encode, submit, then answer in one body or as a stream.
  void generate(const httplib::Request& req, httplib::Response& res,
                Prepared (*prepare)(const json&, const DoorContext&)) {
    serve::Engine& engine = ready_engine();
    json body = parse_body(req.body);
    Prepared prepared = prepare(body, door_context(engine));
    std::vector<int32_t> prompt = encode(prepared.request);
    check_prompt(prompt, engine);
    if (std::string why = engine.never_fits(prepared.request, prompt.size()); !why.empty()) {
      ApiError error(400, "invalid_request_error", why);
      error.param = "max_tokens";
      throw error;
    }
    const int64_t prompt_tokens = int64_t(prompt.size());
    current_record.prompt_tokens = prompt_tokens;
    prepared.responder->set_prompt_tokens(prompt_tokens);
    auto handle = engine.submit(std::move(prepared.request), std::move(prompt));
    auto watch = std::make_shared<ConnectionWatch>(req.local_addr, req.local_port, req.remote_addr, req.remote_port);

    if (!prepared.stream) {
      Turn turn;
      pump(*handle, *watch, current_record, [&](const Event& e) {
        turn.add(e);
        return true;
      });
      current_record.generated_tokens = turn.usage.completion_tokens;
      current_record.reasoning_tokens = turn.usage.reasoning_tokens;
      if (turn.finish_reason == FinishReason::Error) throw ApiError(500, "server_error", turn.error);
      if (turn.finish_reason == FinishReason::Cancelled) {
        res.status = 499;
        return;
      }
      res.set_content(dump(prepared.responder->complete(turn)), "application/json");
      return;
    }

    auto responder = std::shared_ptr<Responder>(std::move(prepared.responder));
    auto release = std::make_shared<CancelOnRelease>(handle);
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream", [this, handle, responder, release, watch](size_t, httplib::DataSink& sink) {
          RequestRecord& record = current_record;
          auto write = [&](const std::string& text) { return text.empty() || sink.write(text.data(), text.size()); };
          if (!write(responder->stream_begin())) return false;
          const bool delivered = pump(*handle, *watch, record, [&](const Event& e) {
            if (e.kind == Event::Kind::Finish && e.finish_reason == FinishReason::Cancelled) return false;
            return write(responder->stream_event(e));
          });
          if (!delivered) return false;
          sink.done();
          return true;
        });
  }

  // Hands a request's events to `deliver` until its Finish event, cancelling the request when
  // the client goes away (deliver returns false: the write failed, or the watch saw it close).
  // Returns whether every event was delivered.
  template <typename Deliver>
  bool pump(serve::RequestHandle& handle, ConnectionWatch& watch, RequestRecord& record, Deliver deliver) {
    std::vector<Event> events;
    bool done = false;
    while (!done) {
      events.clear();
      done = handle.wait(events, std::chrono::milliseconds(50));
      for (const Event& e : events) {
        if (e.kind == Event::Kind::Warning) log_warning(handle.id(), e.text);
        if (e.kind == Event::Kind::Finish) {
          record.generated_tokens = e.usage.completion_tokens;
          record.reasoning_tokens = e.usage.reasoning_tokens;
        }
        if (e.kind == Event::Kind::Finish && e.finish_reason == FinishReason::Cancelled && record.note.empty())
          record.note = "cancelled (server stopping)";
        if (!deliver(e)) {
          handle.cancel();
          if (record.note.empty()) record.note = "client disconnected";
          return false;
        }
      }
      if (!done && watch.closed()) {
        handle.cancel();  // the client left; its slot frees at the next step, the Finish follows
        record.note = "client disconnected";
      }
    }
    return true;
  }

  void log_warning(int64_t id, const std::string& text) {
    std::fprintf(stderr, "warning: request %lld: %s\n", (long long)id, text.c_str());
  }

  void route(const char* method, const std::string& path,
             std::function<void(const httplib::Request&, httplib::Response&)> handler) {
    auto wrapped = [this, handler](const httplib::Request& req, httplib::Response& res) {
      try {
        handler(req, res);
      } catch (const ApiError& e) {
        send_error(req, res, e);
      } catch (const std::exception& e) {
        send_error(req, res, ApiError(500, "server_error", std::string("internal error: ") + e.what()));
      }
    };
    if (std::string(method) == "GET") http.Get(path, wrapped);
    else http.Post(path, wrapped);
  }

  bool authorized(const httplib::Request& req) const {
    if (options.api_key.empty()) return true;
    std::string given;
    const std::string bearer = req.get_header_value("Authorization");
    if (bearer.rfind("Bearer ", 0) == 0) given = bearer.substr(7);
    else if (req.has_header("x-api-key")) given = req.get_header_value("x-api-key");
    return constant_time_equal(given, options.api_key);
  }

  void add_cors(const httplib::Request& req, httplib::Response& res) const {
    if (options.cors_origins.empty() || !req.has_header("Origin")) return;
    const std::string origin = req.get_header_value("Origin");
    bool allowed = false;
    for (const std::string& o : options.cors_origins) allowed = allowed || o == "*" || o == origin;
    if (!allowed) return;
    res.set_header("Access-Control-Allow-Origin", origin);
    res.set_header("Vary", "Origin");
    res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type, x-api-key, anthropic-version, anthropic-beta");
  }

  std::string metrics_text() {
    std::string out;
    auto line = [&](const std::string& s) { out += s + "\n"; };
    line("# HELP inkling_requests_total HTTP requests by route and status.");
    line("# TYPE inkling_requests_total counter");
    {
      std::lock_guard lock(metrics_mutex);
      for (const auto& [key, count] : requests)
        line("inkling_requests_total{route=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"} " +
             std::to_string(count));
    }
    serve::Engine* engine = state->engine.load();
    if (!engine) return out;
    const serve::EngineCounters c = engine->counters();
    int busy = 0;
    for (const auto& slot : engine->slots()) busy += slot.busy ? 1 : 0;
    auto metric = [&](const char* name, const char* type, const char* help, double value) {
      line(std::string("# HELP ") + name + " " + help);
      line(std::string("# TYPE ") + name + " " + type);
      char buffer[64];
      std::snprintf(buffer, sizeof buffer, "%.6g", value);
      line(std::string(name) + " " + buffer);
    };
    metric("inkling_prompt_tokens_total", "counter", "Prompt tokens processed.", double(c.prompt_tokens));
    metric("inkling_generated_tokens_total", "counter", "Tokens generated.", double(c.generated_tokens));
    metric("inkling_requests_finished_total", "counter", "Generation requests finished (any reason).", double(c.requests_finished));
    metric("inkling_requests_cancelled_total", "counter", "Generation requests cancelled by their client.", double(c.cancelled));
    metric("inkling_prompt_tokens_per_second", "gauge", "Prompt tokens per second over all finished requests.",
           c.prompt_seconds > 0 ? double(c.prompt_tokens) / c.prompt_seconds : 0.0);
    metric("inkling_generated_tokens_per_second", "gauge", "Generated tokens per second over all finished requests.",
           c.generation_seconds > 0 ? double(c.generated_tokens) / c.generation_seconds : 0.0);
    metric("inkling_time_to_first_token_seconds_avg", "gauge", "Mean time from arrival to the first generated token.",
           c.first_token_count ? c.first_token_seconds_sum / double(c.first_token_count) : 0.0);
    metric("inkling_prompt_cache_hits_total", "counter", "Requests that started from a kept sequence state or a snapshot.",
           double(c.cache_hits));
    metric("inkling_prompt_cache_tokens_total", "counter", "Prompt tokens taken from kept states or snapshots instead of computed.",
           double(c.cached_prompt_tokens));
    const serve::PromptCacheStats cache = engine->cache_stats();
    metric("inkling_prompt_cache_snapshots", "gauge", "State snapshots held by the prompt cache.", double(cache.entries));
    metric("inkling_prompt_cache_bytes", "gauge", "Bytes of state snapshots held (budget: --cache-ram).", double(cache.bytes));
    metric("inkling_prompt_cache_snapshot_hits_total", "counter", "Requests that started from a prompt-cache snapshot.",
           double(cache.hits));
    metric("inkling_prompt_cache_evictions_total", "counter", "Snapshots dropped to stay within the budget.",
           double(cache.evictions));
    metric("inkling_batch_steps_total", "counter", "Batched forward steps run.", double(c.steps));
    metric("inkling_batch_sequences_total", "counter", "Sequences over all steps (divided by steps: the mean batch).",
           double(c.step_sequences));
    metric("inkling_batch_tokens_total", "counter", "Tokens over all steps.", double(c.step_tokens));
    metric("inkling_batch_paced_steps_total", "counter",
           "Steps whose prompt chunks --max-step-ms cut short so generating requests keep their pace.",
           double(c.paced_steps));
    metric("inkling_kv_reserved_bytes", "gauge", "KV cache and state reserved by running requests.", double(c.kv_reserved));
    metric("inkling_kv_budget_bytes", "gauge", "The KV budget (--kv-budget).", double(c.kv_budget));
    metric("inkling_requests_waiting_for_memory", "gauge", "Queued requests that wait for KV budget.",
           double(c.waiting_for_memory));
    metric("inkling_queue_depth", "gauge", "Requests waiting for a slot.", double(engine->queue_depth()));
    metric("inkling_slots_busy", "gauge", "Slots running a request.", double(busy));
    metric("inkling_slots_total", "gauge", "Slots (--parallel).", double(engine->options().parallel));
    return out;
  }

  void setup() {
    http.new_task_queue = [threads = options.http_threads] { return new httplib::ThreadPool(size_t(threads)); };
    // SO_REUSEADDR only: cpp-httplib's default adds SO_REUSEPORT, which lets a second server
    // bind the same port and silently take half of its connections.
    http.set_socket_options([](socket_t sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    });
    http.set_payload_max_length(options.max_body);
    http.set_read_timeout(60, 0);
    http.set_write_timeout(60, 0);

    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      current_record = RequestRecord{};
      current_record.start = Clock::now();
      add_cors(req, res);
      if (req.method == "OPTIONS") {
        res.status = 204;
        return httplib::Server::HandlerResponse::Handled;
      }
      const bool page = (req.method == "GET" || req.method == "HEAD") && is_page_path(req.path);
      const bool public_route = req.path == "/health" || page;
      if (!public_route && !authorized(req)) {
        send_error(req, res, ApiError(401, "authentication_error", "invalid or missing API key"));
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    http.Options(R"(.*)", [](const httplib::Request&, httplib::Response& res) { res.status = 204; });

    http.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty() || res.is_chunked_content_provider_) return httplib::Server::HandlerResponse::Unhandled;
      if (res.status == 404) send_error(req, res, ApiError(404, "not_found_error", "no route " + req.method + " " + req.path));
      else if (res.status == 413)
        send_error(req, res, ApiError(413, "invalid_request_error",
                                      "the request body exceeds " + std::to_string(options.max_body) + " bytes (--max-body)"));
      else if (res.status == 499) return httplib::Server::HandlerResponse::Unhandled;
      else send_error(req, res, ApiError(res.status, "invalid_request_error", "the request could not be read"));
      return httplib::Server::HandlerResponse::Handled;
    }));

    http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      const RequestRecord& r = current_record;
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - r.start).count();
      std::string tokens;
      if (r.prompt_tokens >= 0)
        tokens = " prompt=" + std::to_string(r.prompt_tokens) + " generated=" + std::to_string(std::max<int64_t>(r.generated_tokens, 0));
      // Of the generated tokens, the reasoning (Messages has no usage field for it).
      if (r.reasoning_tokens > 0) tokens += " reasoning=" + std::to_string(r.reasoning_tokens);
      std::fprintf(stderr, "%s %s %d%s %.1f ms%s%s\n", req.method.c_str(), req.path.c_str(), res.status, tokens.c_str(), ms,
                   r.note.empty() ? "" : " | ", r.note.c_str());
      std::lock_guard lock(metrics_mutex);
      ++requests[{req.path, res.status}];
    });

    // The chat page: public (it asks for the key itself), under a policy that allows no inline
    // script and no other origin.
    auto page = [](const httplib::Request& req, httplib::Response& res) {
      const EmbeddedFile* file = page_file_for(req.path);
      if (!file) throw ApiError(404, "not_found_error", "no page file " + req.path);
      res.set_header("Content-Security-Policy", kPageSecurityPolicy);
      res.set_header("X-Content-Type-Options", "nosniff");
      res.set_header("Referrer-Policy", "no-referrer");
      res.set_header("Cache-Control", "no-cache");
      res.set_content(file->data, file->size, page_content_type(file->name));
    };
    route("GET", "/", page);
    route("GET", R"(/page/[^/]+)", page);
    route("GET", "/health", [this](const httplib::Request&, httplib::Response& res) {
      serve::Engine* engine = state->engine.load();
      if (!engine) {
        res.status = 503;
        res.set_content(R"({"status":"loading"})", "application/json");
      } else if (!engine->alive()) {
        res.status = 503;
        res.set_content(R"({"status":"error","error":"the inference loop has stopped"})", "application/json");
      } else {
        res.set_content(R"({"status":"ok"})", "application/json");
      }
    });
    route("GET", "/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics_text(), "text/plain; version=0.0.4");
    });
    route("GET", "/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      json model = {{"id", options.model_name}, {"object", "model"}, {"created", unix_time()}, {"owned_by", "inkling.cpp"}};
      if (serve::Engine* engine = state->engine.load()) model["context_length"] = engine->context();
      res.set_content(dump({{"object", "list"}, {"data", json::array({model})}}), "application/json");
    });
    route("GET", "/slots", [this](const httplib::Request&, httplib::Response& res) {
      serve::Engine& engine = ready_engine();
      json slots = json::array();
      for (const auto& s : engine.slots())
        slots.push_back({{"id", s.index}, {"busy", s.busy}, {"request_id", s.busy ? json(s.request_id) : json()},
                         {"prompt_tokens", s.prompt_tokens}, {"prompt_done", s.prompt_done}, {"generated", s.generated},
                         {"cached_tokens", s.cached_tokens},
                         {"n_ctx", engine.context()}});
      res.set_content(dump(slots), "application/json");
    });
    route("POST", "/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
      json body = parse_body(req.body);
      auto content = get_string(body, "content");
      if (!content) throw bad_request("\"content\" (a string) is required", "content");
      const bool special = get_bool(body, "add_special").value_or(false) || get_bool(body, "parse_special").value_or(true);
      std::vector<int32_t> ids;
      try {
        ids = state->tokenizer->encode(*content, special);
      } catch (const Error& e) {
        throw bad_request(e.what(), "content");
      }
      json tokens = json::array();
      if (get_bool(body, "with_pieces").value_or(false)) {
        for (int32_t id : ids) tokens.push_back({{"id", id}, {"piece", state->tokenizer->decode(std::vector<int32_t>{id})}});
      } else {
        for (int32_t id : ids) tokens.push_back(id);
      }
      res.set_content(dump({{"tokens", tokens}}), "application/json");
    });
    route("POST", "/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
      json body = parse_body(req.body);
      const json* tokens = get_array(body, "tokens");
      if (!tokens) throw bad_request("\"tokens\" (an array of ids) is required", "tokens");
      const std::vector<int32_t> ids = get_token_ids(*tokens, state->tokenizer->vocab_size(), "tokens");
      std::string text;
      try {
        text = state->tokenizer->decode(ids);
      } catch (const Error& e) {
        throw bad_request(e.what(), "tokens");
      }
      res.set_content(dump({{"content", text}}), "application/json");
    });
    route("POST", "/apply-template", [this](const httplib::Request& req, httplib::Response& res) {
      serve::Engine& engine = ready_engine();
      json body = parse_body(req.body);
      Prepared prepared = prepare_chat_completion(body, door_context(engine));
      std::string prompt;
      try {
        prompt = serve::render_prompt(prepared.request, *state->chat_template);
      } catch (const Error& e) {
        throw bad_request(std::string("cannot build the prompt: ") + e.what(), "messages");
      }
      res.set_content(dump({{"prompt", prompt}}), "application/json");
    });
    route("POST", "/v1/chat/completions",
          [this](const httplib::Request& req, httplib::Response& res) { generate(req, res, prepare_chat_completion); });
    route("POST", "/v1/completions",
          [this](const httplib::Request& req, httplib::Response& res) { generate(req, res, prepare_completion); });
    route("POST", "/v1/messages",
          [this](const httplib::Request& req, httplib::Response& res) { generate(req, res, prepare_message); });
    route("POST", "/v1/responses",
          [this](const httplib::Request& req, httplib::Response& res) { generate(req, res, prepare_response); });
    route("POST", "/v1/messages/count_tokens", [this](const httplib::Request& req, httplib::Response& res) {
      serve::Engine& engine = ready_engine();
      json body = parse_body(req.body);
      serve::Request r = parse_message_request(body, door_context(engine), /*for_count=*/true);
      std::vector<int32_t> prompt = encode(r);
      res.set_content(dump({{"input_tokens", prompt.size()}}), "application/json");
    });
  }
};

HttpServer::HttpServer(ServerOptions options, ServerState& state) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->state = &state;
  if (impl_->options.http_threads <= 0) impl_->options.http_threads = 24;
  impl_->setup();
}

HttpServer::~HttpServer() {
  stop();
  wait();
}

namespace {

// httplib listens with a backlog of 5 pending connections (compiled into Debian's library, so its
// macro cannot change it): with a few dozen clients reconnecting, the kernel then drops SYNs and a
// client waits out TCP's retransmission backoff (1, 3, 7, 15, 31 s; a 31 s stall in the soak).
// listen() again on the listening socket raises it; the kernel caps it at net.core.somaxconn.
constexpr int kListenBacklog = 1024;

void raise_listen_backlog(int port) {
  DIR* fds = opendir("/proc/self/fd");
  if (!fds) return;
  while (const dirent* entry = readdir(fds)) {
    const int fd = std::atoi(entry->d_name);
    if (fd <= 2 || fd == dirfd(fds)) continue;
    int listening = 0;
    socklen_t size = sizeof(listening);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &size) != 0 || !listening) continue;
    sockaddr_storage address{};
    socklen_t address_size = sizeof(address);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &address_size) != 0) continue;
    int bound = -1;
    if (address.ss_family == AF_INET) bound = ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port);
    if (address.ss_family == AF_INET6) bound = ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port);
    if (bound == port) ::listen(fd, kListenBacklog);
  }
  closedir(fds);
}

}  // namespace

void HttpServer::start() {
  const ServerOptions& o = impl_->options;
  const int port = o.port == 0 ? impl_->http.bind_to_any_port(o.host) : (impl_->http.bind_to_port(o.host, o.port) ? o.port : -1);
  if (port <= 0)
    throw Error("cannot listen on " + o.host + ":" + std::to_string(o.port) +
                " (address in use, or not an address of this machine)");
  impl_->bound_port = port;
  raise_listen_backlog(port);
  impl_->thread = std::thread([this] { impl_->http.listen_after_bind(); });
}

void HttpServer::stop() { impl_->http.stop(); }

void HttpServer::wait() {
  if (impl_->thread.joinable()) impl_->thread.join();
}

int HttpServer::port() const { return impl_->bound_port; }

}  // namespace inkling::server
