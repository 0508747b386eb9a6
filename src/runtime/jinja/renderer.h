// Walks a parse tree with a scope chain; shared by statements, filters and methods.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/jinja/ast.h"
#include "runtime/jinja/limits.h"
#include "runtime/jinja/value.h"

namespace inkling::jinja {

struct Frame {
  std::vector<std::pair<std::string, Value>> vars;
  Frame* parent = nullptr;

  const Value* find(const std::string& name) const;
  void set(const std::string& name, Value v);
};

enum class Flow { kNormal, kBreak, kContinue };

class Namespace;

class Renderer {
 public:
  Renderer(const std::map<std::string, Value>& globals, const RenderLimits& limits = {})
      : globals_(globals), limits_(limits) {}
  // Empties every namespace the render created: they may hold one another in cycles.
  ~Renderer();
  Renderer(const Renderer&) = delete;
  Renderer& operator=(const Renderer&) = delete;

  std::string render(const Body& body, Frame& root);

  Value eval(const Expr& e, Frame& f);
  Flow exec(const Body& body, Frame& f, std::string& out);
  Value call(const Value& callee, const CallArgs& args);
  Value lookup(const std::string& name, Frame& f);

  // Renders `stmt`'s loop body over `iterable` (recursive loops re-enter here).
  void run_for(const Stmt& s, const Value& iterable, Frame& f, int depth, std::string& out);
  Value call_macro(const Stmt& macro, const std::string& name, Frame* parent, const CallArgs& args,
                   const Value& caller);

  int line() const { return line_; }
  Frame* root() const { return root_; }

  // namespace() registers what it creates, so the render's end can break their cycles.
  void adopt(std::shared_ptr<Namespace> ns) { namespaces_.push_back(std::move(ns)); }

  // Items of anything Python could iterate (dict -> keys, str -> chars).
  static ValueList iterate(const Value& v);

 private:
  Flow exec_stmt(const Stmt& s, Frame& f, std::string& out);
  Value eval_node(const Expr& e, Frame& f);
  Value eval_binary(const std::string& op, const Value& a, const Value& b);
  void step();
  void charge(const Value& created);
  void check_output(const std::string& out) const;
  Value eval_call(const Expr& e, Frame& f);
  CallArgs eval_args(const Expr& e, Frame& f);
  void assign_targets(const std::vector<std::string>& targets, const Value& v, Frame& f);

  const std::map<std::string, Value>& globals_;
  RenderLimits limits_;
  Frame* root_ = nullptr;
  int line_ = 0;
  int depth_ = 0;
  uint64_t steps_ = 0;
  uint64_t allocated_ = 0;
  std::vector<std::shared_ptr<Namespace>> namespaces_;
};

// Python-compatible operations used by both the renderer and the builtins.
Value get_attr(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);
Value slice_value(const Value& obj, const Value& start, const Value& stop, const Value& step);
bool contains(const Value& container, const Value& item);
Value percent_format(const std::string& fmt, const Value& args);

// Builtins (builtins_*.cpp).
Value apply_filter(Renderer& r, const std::string& name, const Value& input, const CallArgs& args);
bool apply_test(Renderer& r, const std::string& name, const Value& input, const CallArgs& args);
bool has_filter(const std::string& name);
bool has_test(const std::string& name);
Value call_method(Renderer& r, const Value& self, const std::string& name, const CallArgs& args);
bool has_method(const Value& self, const std::string& name);
void add_builtin_globals(std::map<std::string, Value>& globals);

}  // namespace inkling::jinja
