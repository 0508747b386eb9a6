#include "runtime/jinja/template.h"

#include <nlohmann/json.hpp>

#include "runtime/jinja/lexer.h"
#include "runtime/jinja/objects.h"
#include "runtime/jinja/parser.h"
#include "tensor/error.h"

namespace inkling::jinja {

Template Template::parse(std::string_view source, std::string name) {
  Template t;
  t.name_ = std::move(name);
  auto body = std::make_shared<Body>(parse_tokens(tokenize(source, t.name_), t.name_));
  t.body_ = std::move(body);
  add_builtin_globals(t.globals_);
  return t;
}

void Template::set_global(const std::string& name, Value value) { globals_[name] = std::move(value); }

void Template::set_function(const std::string& name, NativeFunction fn) {
  globals_[name] = Value::object(
      std::make_shared<NativeFn>(name, [fn = std::move(fn)](Renderer&, const CallArgs& a) { return fn(a); }));
}

std::string Template::render(const nlohmann::ordered_json& context) const {
  if (!context.is_object() && !context.is_null()) throw Error(name_ + ": render context must be a JSON object");
  Frame root;
  try {
    if (context.is_object())
      for (auto it = context.begin(); it != context.end(); ++it)
        root.vars.emplace_back(it.key(), Value::from_json(it.value()));
  } catch (const Error& e) {
    throw Error(name_ + ": render context: " + e.what());
  }
  Renderer renderer(globals_, limits_);
  try {
    return renderer.render(*body_, root);
  } catch (const Error& e) {
    throw Error(source_location(name_, renderer.line()) + ": " + e.what());
  } catch (const std::bad_alloc&) {
    throw Error(source_location(name_, renderer.line()) + ": out of memory while rendering");
  } catch (const std::length_error& e) {
    throw Error(source_location(name_, renderer.line()) + ": a string or list grew too large (" + e.what() + ")");
  }
}

}  // namespace inkling::jinja
