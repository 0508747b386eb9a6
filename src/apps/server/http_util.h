// Pieces every front door shares: the error a request can fail with, typed reads of JSON body
// fields that fail with a 400 naming the field, and a watch on the client's connection.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace inkling::server {

using json = nlohmann::ordered_json;

// A request the server refuses; each front door writes it in its API's error shape.
struct ApiError : std::runtime_error {
  ApiError(int status, std::string type, const std::string& message, std::string param = {})
      : std::runtime_error(message), status(status), type(std::move(type)), param(std::move(param)) {}
  int status;
  std::string type;   // OpenAI-style: invalid_request_error, authentication_error, not_found_error, ...
  std::string param;  // the body field at fault, when one is
  json extra = json::object();  // more members of the error object (n_prompt_tokens, n_ctx)
};

ApiError bad_request(const std::string& message, const std::string& param = {});

// Body parsing: every reader throws bad_request naming `key` when the value has the wrong type.
// Absent and null keys read as nothing.
json parse_body(const std::string& body);
const json* field(const json& object, const char* key);
std::optional<std::string> get_string(const json& object, const char* key);
std::optional<double> get_number(const json& object, const char* key);
std::optional<int64_t> get_integer(const json& object, const char* key);
std::optional<bool> get_bool(const json& object, const char* key);
const json* get_array(const json& object, const char* key);
const json* get_object(const json& object, const char* key);
// An array of token ids, each an integer in [0, vocab_size); errors name the entry (param[i]).
std::vector<int32_t> get_token_ids(const json& ids, int64_t vocab_size, const std::string& param);
// A string or an array of strings (stop sequences).
std::vector<std::string> get_strings(const json& object, const char* key);

// JSON text with invalid UTF-8 replaced (a token can end inside a character).
std::string dump(const json& value);

// Unique enough ids for responses and tool calls: prefix + 24 hex digits.
std::string random_id(const std::string& prefix);
int64_t unix_time();

// Finds the socket of a connection from its two endpoints (cpp-httplib hands handlers no
// socket) and tells when the peer has closed it, so a request whose client left is cancelled.
class ConnectionWatch {
 public:
  ConnectionWatch(const std::string& local_addr, int local_port, const std::string& remote_addr, int remote_port);
  // True when the client has closed or reset the connection. A connection that cannot be found
  // counts as open: the request then runs to its end.
  bool closed();

 private:
  bool same_peer(int fd) const;
  int fd_ = -1;
  std::string local_addr_, remote_addr_;
  int local_port_, remote_port_;
};

}  // namespace inkling::server
