#include "apps/server/http_util.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <algorithm>
#include <random>

#include "io/json_depth.h"

namespace inkling::server {

ApiError bad_request(const std::string& message, const std::string& param) {
  return ApiError(400, "invalid_request_error", message, param);
}

namespace {

constexpr int kMaxBodyDepth = 64;

}  // namespace

json parse_body(const std::string& body) {
  if (json_nesting_depth(body) > kMaxBodyDepth)
    throw bad_request("the request body nests deeper than " + std::to_string(kMaxBodyDepth) + " levels");
  json value = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) throw bad_request("the request body is not valid JSON");
  if (!value.is_object()) throw bad_request("the request body must be a JSON object");
  return value;
}

const json* field(const json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

static ApiError wrong_type(const char* key, const char* expected) {
  return bad_request(std::string("\"") + key + "\" must be " + expected, key);
}

std::optional<std::string> get_string(const json& object, const char* key) {
  const json* v = field(object, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) throw wrong_type(key, "a string");
  return v->get<std::string>();
}

std::optional<double> get_number(const json& object, const char* key) {
  const json* v = field(object, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) throw wrong_type(key, "a number");
  double d = v->get<double>();
  if (!std::isfinite(d)) throw wrong_type(key, "a finite number");
  return d;
}

std::optional<int64_t> get_integer(const json& object, const char* key) {
  const json* v = field(object, key);
  if (!v) return std::nullopt;
  if (v->is_number_integer()) return v->get<int64_t>();
  if (v->is_number_float()) {
    double d = v->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) return int64_t(d);
  }
  throw wrong_type(key, "an integer");
}

std::optional<bool> get_bool(const json& object, const char* key) {
  const json* v = field(object, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) throw wrong_type(key, "a boolean");
  return v->get<bool>();
}

const json* get_array(const json& object, const char* key) {
  const json* v = field(object, key);
  if (v && !v->is_array()) throw wrong_type(key, "an array");
  return v;
}

const json* get_object(const json& object, const char* key) {
  const json* v = field(object, key);
  if (v && !v->is_object()) throw wrong_type(key, "an object");
  return v;
}

std::vector<int32_t> get_token_ids(const json& ids, int64_t vocab_size, const std::string& param) {
  std::vector<int32_t> out;
  out.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string where = param + "[" + std::to_string(i) + "]";
    if (!ids[i].is_number_integer()) throw bad_request(where + " is not an integer token id", param);
    const int64_t id = ids[i].get<int64_t>();
    if (id < 0 || id >= vocab_size)
      throw bad_request(where + " = " + std::to_string(id) + " is outside the vocabulary (0.." +
                            std::to_string(vocab_size - 1) + ")",
                        param);
    out.push_back(int32_t(id));
  }
  return out;
}

std::vector<std::string> get_strings(const json& object, const char* key) {
  const json* v = field(object, key);
  if (!v) return {};
  if (v->is_string()) return {v->get<std::string>()};
  if (!v->is_array()) throw wrong_type(key, "a string or an array of strings");
  std::vector<std::string> out;
  for (const json& item : *v) {
    if (!item.is_string()) throw wrong_type(key, "a string or an array of strings");
    out.push_back(item.get<std::string>());
  }
  return out;
}

std::string dump(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string random_id(const std::string& prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* hex = "0123456789abcdef";
  std::string id = prefix;
  uint64_t a = rng(), b = rng();
  for (int i = 0; i < 16; ++i) id += hex[(a >> (4 * i)) & 15];
  for (int i = 0; i < 8; ++i) id += hex[(b >> (4 * i)) & 15];
  return id;
}

int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

namespace {

// "a.b.c.d" or an IPv6 text and a port, from a socket address.
bool endpoint(const sockaddr_storage& address, std::string& host, int& port) {
  char text[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&address);
    if (!inet_ntop(AF_INET, &a->sin_addr, text, sizeof text)) return false;
    port = ntohs(a->sin_port);
  } else if (address.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&address);
    if (!inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text)) return false;
    port = ntohs(a->sin6_port);
  } else {
    return false;
  }
  host = text;
  return true;
}

}  // namespace

ConnectionWatch::ConnectionWatch(const std::string& local_addr, int local_port, const std::string& remote_addr,
                                 int remote_port)
    : local_addr_(local_addr), remote_addr_(remote_addr), local_port_(local_port), remote_port_(remote_port) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return;
  while (dirent* entry = readdir(dir)) {
    char* end = nullptr;
    long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end) continue;
    struct stat info;
    if (fstat(int(fd), &info) != 0 || !S_ISSOCK(info.st_mode)) continue;
    if (same_peer(int(fd))) {
      fd_ = int(fd);
      break;
    }
  }
  closedir(dir);
}

bool ConnectionWatch::same_peer(int fd) const {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  std::string host;
  int port = 0;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return false;
  if (!endpoint(address, host, port) || host != remote_addr_ || port != remote_port_) return false;
  length = sizeof address;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return false;
  return endpoint(address, host, port) && host == local_addr_ && port == local_port_;
}

bool ConnectionWatch::closed() {
  if (fd_ < 0) return false;
  // The descriptor may have been closed and reused for another connection meanwhile.
  if (!same_peer(fd_)) return true;
  char byte;
  ssize_t n = recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return true;  // orderly shutdown by the peer
  if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return true;
  return false;
}

}  // namespace inkling::server
