// Jinja2-compatible chat-template engine. Parse once, render many times (the server
// renders per request); output matches Python Jinja2 under HF transformers' settings:
// sandboxed, trim_blocks, lstrip_blocks, loopcontrols, autoescape off, HF's tojson,
// raise_exception and strftime_now.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "runtime/jinja/limits.h"
#include "runtime/jinja/value.h"

namespace inkling::jinja {

struct Stmt;
using NativeFunction = std::function<Value(const CallArgs& args)>;

class Template {
 public:
  // Throws inkling::Error "<name>:<line>: template syntax error: ..." on malformed input.
  static Template parse(std::string_view source, std::string name = "template");

  // Renders with `context` as the template's variables (dict order is kept).
  // Throws inkling::Error "<name>:<line>: ..." for runtime errors, raise_exception and a render
  // that exceeds its limits (limits.h).
  std::string render(const nlohmann::ordered_json& context) const;

  void set_limits(const RenderLimits& limits) { limits_ = limits; }

  // Extra globals; they shadow the builtins (range, namespace, strftime_now...) but
  // context variables shadow them.
  void set_global(const std::string& name, Value value);
  void set_function(const std::string& name, NativeFunction fn);

  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::shared_ptr<const std::vector<std::unique_ptr<Stmt>>> body_;
  std::map<std::string, Value> globals_;
  RenderLimits limits_;
};

}  // namespace inkling::jinja
