// Callable and attribute-bearing objects the renderer creates.
#pragma once

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "runtime/jinja/renderer.h"

namespace inkling::jinja {

class NativeFn : public Object {
 public:
  using Fn = std::function<Value(Renderer&, const CallArgs&)>;
  NativeFn(std::string name, Fn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  std::string type_name() const override { return "builtin_function_or_method"; }
  bool is_callable() const override { return true; }
  Value call(Renderer& r, const CallArgs& a) const override { return fn_(r, a); }
  std::string repr() const override { return "<built-in function " + name_ + ">"; }

 private:
  std::string name_;
  Fn fn_;
};

class BoundMethod : public Object {
 public:
  BoundMethod(Value self, std::string name) : self_(std::move(self)), name_(std::move(name)) {}
  std::string type_name() const override { return "builtin_function_or_method"; }
  bool is_callable() const override { return true; }
  Value call(Renderer& r, const CallArgs& a) const override { return call_method(r, self_, name_, a); }
  std::string repr() const override {
    return "<built-in method " + name_ + " of " + self_.type_name() + " object>";
  }

 private:
  Value self_;
  std::string name_;
};

class Namespace : public Object {
 public:
  Dict attrs;
  std::string type_name() const override { return "Namespace"; }
  Value get_attr(const std::string& name) const override {
    if (const Value* v = attrs.find(name)) return *v;
    return Value::undefined("'Namespace' object has no attribute '" + name + "'");
  }
  bool set_attr(const std::string& name, const Value& v) override {
    attrs.set(Value::string(name), v);
    return true;
  }
  // Python's dict repr prints a dict already being printed as {...}: a namespace holding itself.
  std::string repr() const override {
    thread_local std::vector<const Namespace*> printing;
    if (std::find(printing.begin(), printing.end(), this) != printing.end()) return "<Namespace {...}>";
    printing.push_back(this);
    struct Pop {
      ~Pop() { printing.pop_back(); }
    } pop;
    return "<Namespace " + Value::dict(attrs).repr() + ">";
  }
  // Empties the namespace into `sink`, which breaks any cycle through it.
  void release_into(std::vector<std::pair<Value, Value>>& sink) {
    for (auto& item : attrs.items) sink.push_back(std::move(item));
    attrs.items.clear();
  }
};

class Macro : public Object {
 public:
  Macro(const Stmt* stmt, std::string name, Frame* parent, Value caller = {})
      : stmt_(stmt), name_(std::move(name)), parent_(parent), caller_(std::move(caller)) {}
  std::string type_name() const override { return "Macro"; }
  bool is_callable() const override { return true; }
  Value call(Renderer& r, const CallArgs& a) const override {
    return r.call_macro(*stmt_, name_, parent_, a, caller_);
  }
  Value get_attr(const std::string& name) const override {
    if (name == "name") return Value::string(name_);
    return Object::get_attr(name);
  }
  std::string repr() const override { return "<Macro '" + name_ + "'>"; }

 private:
  const Stmt* stmt_;
  std::string name_;
  Frame* parent_;
  Value caller_;
};

}  // namespace inkling::jinja
