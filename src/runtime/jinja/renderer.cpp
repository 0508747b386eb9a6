#include "runtime/jinja/renderer.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "runtime/jinja/objects.h"
#include "tensor/error.h"
#include "tensor/stack_guard.h"

namespace inkling::jinja {
namespace {

// Python's recursion limit, in the levels a template sees (macro calls, recursive loops); the
// stack guard bounds the frames beneath them whatever each level costs.
constexpr int kMaxDepth = 400;

[[noreturn]] void undefined_error(const Value& v) {
  const std::string& hint = v.undefined_hint();
  throw Error("UndefinedError: " + (hint.empty() ? std::string("value is undefined") : hint));
}

class LoopObject : public Object {
 public:
  LoopObject(std::shared_ptr<const ValueList> items, int depth0, const Stmt* stmt, Frame* frame)
      : items_(std::move(items)), depth0_(depth0), stmt_(stmt), frame_(frame) {}
  size_t index0 = 0;

  std::string type_name() const override { return "LoopContext"; }
  bool is_callable() const override { return stmt_->recursive; }
  Value call(Renderer& r, const CallArgs& a) const override {
    if (!stmt_->recursive) return Object::call(r, a);
    if (a.positional.size() != 1) throw Error("loop() takes exactly one argument");
    std::string out;
    r.run_for(*stmt_, a.positional[0], *frame_, depth0_ + 1, out);
    return Value::string(out);
  }
  Value get_attr(const std::string& name) const override {
    int64_t n = static_cast<int64_t>(items_->size());
    int64_t i = static_cast<int64_t>(index0);
    if (name == "index") return Value::integer(i + 1);
    if (name == "index0") return Value::integer(i);
    if (name == "revindex") return Value::integer(n - i);
    if (name == "revindex0") return Value::integer(n - i - 1);
    if (name == "first") return Value::boolean(i == 0);
    if (name == "last") return Value::boolean(i == n - 1);
    if (name == "length") return Value::integer(n);
    if (name == "depth") return Value::integer(depth0_ + 1);
    if (name == "depth0") return Value::integer(depth0_);
    if (name == "previtem")
      return i > 0 ? (*items_)[index0 - 1] : Value::undefined("there is no previous item");
    if (name == "nextitem")
      return i + 1 < n ? (*items_)[index0 + 1] : Value::undefined("there is no next item");
    if (name == "cycle") {
      size_t idx = index0;
      return Value::object(std::make_shared<NativeFn>("cycle", [idx](Renderer&, const CallArgs& a) {
        if (a.positional.empty()) throw Error("no items for cycling given");
        return a.positional[idx % a.positional.size()];
      }));
    }
    if (name == "changed") {
      auto self = this;
      return Value::object(std::make_shared<NativeFn>("changed", [self](Renderer&, const CallArgs& a) {
        Value v = Value::tuple(a.positional);
        if (self->has_last_ && values_equal(self->last_changed_, v)) return Value::boolean(false);
        self->last_changed_ = v;
        self->has_last_ = true;
        return Value::boolean(true);
      }));
    }
    return Value::undefined("'LoopContext' object has no attribute '" + name + "'");
  }
  std::string repr() const override {
    return "<LoopContext " + std::to_string(index0 + 1) + "/" + std::to_string(items_->size()) + ">";
  }
  // loop.changed(loop) would keep the loop alive through its own memory.
  void forget() const {
    last_changed_ = Value();
    has_last_ = false;
  }

 private:
  std::shared_ptr<const ValueList> items_;
  int depth0_;
  const Stmt* stmt_;
  Frame* frame_;
  mutable Value last_changed_;
  mutable bool has_last_ = false;
};

int64_t normalize_index(int64_t i, int64_t n) { return i < 0 ? i + n : i; }

bool is_ascii(const std::string& s) {
  for (unsigned char c : s)
    if (c >= 0x80) return false;
  return true;
}

// Byte offset of every code point, plus the end: indexing a long non-ASCII string must not copy
// each character into its own string.
std::vector<uint32_t> code_point_offsets(const std::string& s) {
  std::vector<uint32_t> offsets;
  for (size_t k = 0; k < s.size(); ++k)
    if ((static_cast<unsigned char>(s[k]) & 0xC0) != 0x80) offsets.push_back(static_cast<uint32_t>(k));
  offsets.push_back(static_cast<uint32_t>(s.size()));
  return offsets;
}

[[noreturn]] void overflow(const std::string& op) {
  throw Error("integer overflow in '" + op + "': the result does not fit in 64 bits");
}

int64_t checked_power(int64_t base, int64_t exponent) {
  int64_t result = 1;
  while (exponent > 0) {
    if (exponent & 1)
      if (__builtin_mul_overflow(result, base, &result)) overflow("**");
    exponent >>= 1;
    // Squaring overflows only for |base| >= 2, and the exponent left still multiplies it in.
    if (exponent > 0 && __builtin_mul_overflow(base, base, &base)) overflow("**");
  }
  return result;
}

}  // namespace

const Value* Frame::find(const std::string& name) const {
  for (const Frame* f = this; f; f = f->parent)
    for (auto it = f->vars.rbegin(); it != f->vars.rend(); ++it)
      if (it->first == name) return &it->second;
  return nullptr;
}

void Frame::set(const std::string& name, Value v) {
  for (auto& [k, val] : vars) {
    if (k == name) {
      val = std::move(v);
      return;
    }
  }
  vars.emplace_back(name, std::move(v));
}

ValueList Renderer::iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined: return {};
    case Kind::List:
    case Kind::Tuple: return v.items();
    case Kind::Dict: {
      ValueList keys;
      for (const auto& kv : v.mapping().items) keys.push_back(kv.first);
      return keys;
    }
    case Kind::String: {
      check_value_bytes(uint64_t{utf8_length(v.str())} * sizeof(Value), "iterating over a string");
      ValueList out;
      for (auto& c : utf8_chars(v.str())) out.push_back(Value::string(std::move(c)));
      return out;
    }
    case Kind::Object:
      if (auto ns = dynamic_cast<const Namespace*>(&v.object_ref())) return iterate(Value::dict(ns->attrs));
      [[fallthrough]];
    default: throw Error("'" + v.type_name() + "' object is not iterable");
  }
}

Value get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Kind::Undefined: undefined_error(obj);
    case Kind::Dict:
      if (has_method(obj, name)) return Value::object(std::make_shared<BoundMethod>(obj, name));
      if (const Value* v = obj.mapping().find(name)) return *v;
      return Value::undefined("'dict object' has no attribute '" + name + "'");
    case Kind::Object: return obj.object_ref().get_attr(name);
    default:
      if (has_method(obj, name)) return Value::object(std::make_shared<BoundMethod>(obj, name));
      return Value::undefined("'" + obj.type_name() + " object' has no attribute '" + name + "'");
  }
}

Value get_item(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Kind::Undefined: undefined_error(obj);
    case Kind::Dict:
      if (const Value* v = obj.mapping().find(key)) return *v;
      break;
    case Kind::List:
    case Kind::Tuple:
      if (key.is_int() || key.is_bool()) {
        int64_t n = static_cast<int64_t>(obj.items().size());
        int64_t i = normalize_index(key.as_int(), n);
        if (i >= 0 && i < n) return obj.items()[static_cast<size_t>(i)];
        return Value::undefined(obj.type_name() + " object has no element " + std::to_string(key.as_int()));
      }
      break;
    case Kind::String:
      if (key.is_int() || key.is_bool()) {
        const std::string& s = obj.str();
        int64_t i = key.as_int();
        if (is_ascii(s)) {
          int64_t n = static_cast<int64_t>(s.size());
          i = normalize_index(i, n);
          if (i >= 0 && i < n) return Value::string(std::string(1, s[static_cast<size_t>(i)]));
        } else {
          std::vector<uint32_t> at = code_point_offsets(s);
          int64_t n = static_cast<int64_t>(at.size()) - 1;
          i = normalize_index(i, n);
          if (i >= 0 && i < n) return Value::string(s.substr(at[static_cast<size_t>(i)], at[static_cast<size_t>(i) + 1] - at[static_cast<size_t>(i)]));
        }
        return Value::undefined("str object has no element " + std::to_string(key.as_int()));
      }
      break;
    default: break;
  }
  if (key.is_string()) {
    Value v = get_attr(obj, key.str());
    if (!v.is_undefined() || obj.is_object()) return v;
  }
  return Value::undefined("'" + obj.type_name() + " object' has no attribute " + key.repr());
}

Value slice_value(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
  for (const Value* v : {&start_v, &stop_v, &step_v})
    if (!v->is_none() && !v->is_undefined() && !v->is_int() && !v->is_bool())
      throw Error("slice indices must be integers or None");
  const int64_t step = step_v.is_none() || step_v.is_undefined() ? 1 : step_v.as_int();
  if (step == 0) throw Error("slice step cannot be zero");
  // Calls visit(i) for each index Python's slice of a length-n sequence yields, without a
  // vector of indices (a slice of a 64 MiB string would need 512 MB of them).
  auto each_index = [&](int64_t n, auto&& visit) {
    auto clamp = [&](const Value& v, int64_t def) {
      if (v.is_none() || v.is_undefined()) return def;
      int64_t i = v.as_int();
      if (i < 0) i = i < -n ? -n - 1 : i + n;
      if (step > 0) return std::clamp<int64_t>(i, 0, n);
      return std::clamp<int64_t>(i, -1, n - 1);
    };
    int64_t start = clamp(start_v, step > 0 ? 0 : n - 1);
    int64_t stop = clamp(stop_v, step > 0 ? n : -1);
    for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
      visit(static_cast<size_t>(i));
      if (__builtin_add_overflow(i, step, &i)) break;  // past either end of any sequence
    }
  };
  if (obj.is_string()) {
    const std::string& s = obj.str();
    std::string out;
    if (is_ascii(s)) {
      each_index(static_cast<int64_t>(s.size()), [&](size_t i) { out += s[i]; });
    } else {
      std::vector<uint32_t> at = code_point_offsets(s);
      each_index(static_cast<int64_t>(at.size()) - 1, [&](size_t i) { out.append(s, at[i], at[i + 1] - at[i]); });
    }
    return Value::string(out);
  }
  if (obj.is_sequence_like()) {
    ValueList out;
    each_index(static_cast<int64_t>(obj.items().size()), [&](size_t i) { out.push_back(obj.items()[i]); });
    return obj.kind() == Kind::Tuple ? Value::tuple(out) : Value::list(out);
  }
  if (obj.is_undefined()) undefined_error(obj);
  throw Error("'" + obj.type_name() + "' object is not subscriptable");
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Kind::String:
      if (!item.is_string())
        throw Error("'in <string>' requires string as left operand, not " + item.type_name());
      return container.str().find(item.str()) != std::string::npos;
    case Kind::List:
    case Kind::Tuple:
      for (const Value& v : container.items())
        if (values_equal(v, item)) return true;
      return false;
    case Kind::Dict: return container.mapping().find(item) != nullptr;
    case Kind::Undefined: return false;  // Undefined iterates as empty, so `x in undefined` is False
    default: throw Error("argument of type '" + container.type_name() + "' is not iterable");
  }
}

Value Renderer::lookup(const std::string& name, Frame& f) {
  if (const Value* v = f.find(name)) return *v;
  auto it = globals_.find(name);
  if (it != globals_.end()) return it->second;
  return Value::undefined("'" + name + "' is undefined");
}

Renderer::~Renderer() {
  std::vector<std::pair<Value, Value>> contents;
  for (const auto& ns : namespaces_) ns->release_into(contents);
  // `contents` dies here: lists and dicts inside are bounded in depth, namespaces now empty.
}

std::string Renderer::render(const Body& body, Frame& root) {
  StackScope scope;
  root_ = &root;
  std::string out;
  exec(body, root, out);
  return out;
}

void Renderer::step() {
  if (++steps_ > limits_.max_steps)
    throw Error("the template exceeded its budget of " + std::to_string(limits_.max_steps) + " evaluation steps");
  if (stack_exhausted()) throw Error("the template nests calls, loops or expressions too deeply for the stack");
}

void Renderer::charge(const Value& created) {
  uint64_t bytes = 0;
  if (created.is_string()) bytes = created.str().size();
  else if (created.is_sequence_like()) bytes = uint64_t{created.items().size()} * sizeof(Value);
  else if (created.is_dict()) bytes = uint64_t{created.mapping().items.size()} * 2 * sizeof(Value);
  allocated_ += bytes;
  if (allocated_ > limits_.max_allocated_bytes)
    throw Error("the template built more than its budget of " + format_bytes(limits_.max_allocated_bytes) +
                " of strings and lists");
}

void Renderer::check_output(const std::string& out) const {
  if (out.size() > limits_.max_output_bytes)
    throw Error("the template's output exceeded its budget of " + format_bytes(limits_.max_output_bytes));
}

Flow Renderer::exec(const Body& body, Frame& f, std::string& out) {
  for (const auto& s : body) {
    Flow flow = exec_stmt(*s, f, out);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

void Renderer::assign_targets(const std::vector<std::string>& targets, const Value& v, Frame& f) {
  if (targets.size() == 1) {
    f.set(targets[0], v);
    return;
  }
  ValueList items = iterate(v);
  if (items.size() != targets.size())
    throw Error(items.size() < targets.size()
                    ? "not enough values to unpack (expected " + std::to_string(targets.size()) + ", got " +
                          std::to_string(items.size()) + ")"
                    : "too many values to unpack (expected " + std::to_string(targets.size()) + ")");
  for (size_t k = 0; k < targets.size(); ++k) f.set(targets[k], items[k]);
}

void Renderer::run_for(const Stmt& s, const Value& iterable, Frame& f, int depth, std::string& out) {
  if (depth > kMaxDepth) throw Error("maximum recursion depth exceeded in a recursive loop");
  ValueList all = iterate(iterable);
  auto items = std::make_shared<ValueList>();
  if (s.cond) {
    for (const Value& v : all) {
      Frame probe{{}, &f};
      assign_targets(s.targets, v, probe);
      if (eval(*s.cond, probe).truthy()) items->push_back(v);
    }
  } else {
    *items = std::move(all);
  }
  if (items->empty()) {
    Frame scope{{}, &f};
    exec(s.else_body, scope, out);
    return;
  }
  auto loop = std::make_shared<LoopObject>(items, depth, &s, &f);
  Value loop_value = Value::object(loop);
  for (size_t k = 0; k < items->size(); ++k) {
    step();
    loop->index0 = k;
    Frame scope{{}, &f};
    scope.vars.emplace_back("loop", loop_value);
    assign_targets(s.targets, (*items)[k], scope);
    Flow flow = exec(s.body, scope, out);
    if (flow == Flow::kBreak) break;
  }
  loop->forget();
}

Value Renderer::call_macro(const Stmt& m, const std::string& name, Frame* parent, const CallArgs& args,
                           const Value& caller) {
  if (depth_ + 1 > kMaxDepth) throw Error("maximum recursion depth exceeded in macro '" + name + "'");
  ++depth_;
  struct Leave {
    int& depth;
    ~Leave() { --depth; }
  } leave{depth_};
  Frame scope{{}, parent ? parent : root_};
  size_t n = m.params.size();
  if (args.positional.size() > n)
    throw Error("macro '" + name + "' takes not more than " + std::to_string(n) + " argument(s)");
  std::vector<bool> bound(n, false);
  for (size_t k = 0; k < args.positional.size(); ++k) {
    scope.vars.emplace_back(m.params[k].first, args.positional[k]);
    bound[k] = true;
  }
  for (const auto& [key, value] : args.keyword) {
    size_t k = 0;
    while (k < n && m.params[k].first != key) ++k;
    if (key == "caller" && k == n) continue;
    if (k == n) throw Error("macro '" + name + "' takes no keyword argument '" + key + "'");
    if (bound[k]) throw Error("macro '" + name + "' got multiple values for argument '" + key + "'");
    scope.vars.emplace_back(key, value);
    bound[k] = true;
  }
  for (size_t k = 0; k < n; ++k) {
    if (bound[k]) continue;
    if (m.params[k].second) scope.vars.emplace_back(m.params[k].first, eval(*m.params[k].second, scope));
    else scope.vars.emplace_back(m.params[k].first, Value::undefined("parameter '" + m.params[k].first + "' was not provided"));
  }
  const Value* kw_caller = args.keyword_arg("caller");
  if (!caller.is_undefined()) scope.vars.emplace_back("caller", caller);
  else if (kw_caller) scope.vars.emplace_back("caller", *kw_caller);
  std::string out;
  int saved_line = line_;
  exec(m.body, scope, out);
  line_ = saved_line;
  return Value::string(std::move(out));
}

Flow Renderer::exec_stmt(const Stmt& s, Frame& f, std::string& out) {
  line_ = s.line;
  step();
  switch (s.type) {
    case StmtType::kOutput:
      out += s.text;
      check_output(out);
      return Flow::kNormal;
    case StmtType::kEmit:
      out += eval(*s.expr, f).to_string();
      check_output(out);
      return Flow::kNormal;
    case StmtType::kIf:
      for (const auto& [cond, body] : s.branches)
        if (eval(*cond, f).truthy()) return exec(body, f, out);
      return exec(s.else_body, f, out);
    case StmtType::kFor: run_for(s, eval(*s.expr, f), f, 0, out); return Flow::kNormal;
    case StmtType::kSet: {
      Value v = eval(*s.expr, f);
      if (!s.attr.empty()) {
        Value target = lookup(s.targets[0], f);
        if (!target.is_object() || !target.object_ref().set_attr(s.attr, v))
          throw Error("cannot assign attribute on non-namespace object");
      } else {
        assign_targets(s.targets, v, f);
      }
      return Flow::kNormal;
    }
    case StmtType::kSetBlock: {
      std::string body;
      Frame scope{{}, &f};
      exec(s.body, scope, body);
      Value v = Value::string(std::move(body));
      if (s.filter) {
        // The filter chain's innermost base is null: it stands for the block's text.
        std::vector<const Expr*> chain;
        for (const Expr* e = s.filter.get(); e; e = e->a.get()) chain.push_back(e);
        for (auto it = chain.rbegin(); it != chain.rend(); ++it)
          v = apply_filter(*this, (*it)->name, v, eval_args(**it, f));
      }
      line_ = s.line;
      if (!s.attr.empty()) {
        Value target = lookup(s.targets[0], f);
        if (!target.is_object() || !target.object_ref().set_attr(s.attr, v))
          throw Error("cannot assign attribute on non-namespace object");
      } else {
        f.set(s.targets[0], v);
      }
      return Flow::kNormal;
    }
    case StmtType::kMacro:
      f.set(s.text, Value::object(std::make_shared<Macro>(&s, s.text, f.parent ? &f : nullptr)));
      return Flow::kNormal;
    case StmtType::kCallBlock: {
      Value caller = Value::object(std::make_shared<Macro>(&s, "caller", &f));
      Value callee = eval(*s.expr->a, f);
      CallArgs args = eval_args(*s.expr, f);
      args.keyword.emplace_back("caller", caller);
      out += call(callee, args).to_string();
      check_output(out);
      return Flow::kNormal;
    }
    case StmtType::kFilterBlock: {
      std::string body;
      Frame scope{{}, &f};
      exec(s.body, scope, body);
      Value v = Value::string(std::move(body));
      std::vector<const Expr*> chain;
      for (const Expr* e = s.filter.get(); e; e = e->a.get()) chain.push_back(e);
      for (auto it = chain.rbegin(); it != chain.rend(); ++it)
        v = apply_filter(*this, (*it)->name, v, eval_args(**it, f));
      out += v.to_string();
      check_output(out);
      return Flow::kNormal;
    }
    case StmtType::kBreak: return Flow::kBreak;
    case StmtType::kContinue: return Flow::kContinue;
    case StmtType::kWith: {
      Frame scope{{}, &f};
      for (const auto& [name, expr] : s.params) scope.vars.emplace_back(name, eval(*expr, f));
      return exec(s.body, scope, out);
    }
    case StmtType::kScope: return exec(s.body, f, out);
  }
  return Flow::kNormal;
}

CallArgs Renderer::eval_args(const Expr& e, Frame& f) {
  CallArgs args;
  for (const auto& a : e.args) args.positional.push_back(eval(*a, f));
  if (e.star)
    for (Value& v : iterate(eval(*e.star, f))) args.positional.push_back(std::move(v));
  for (const auto& [k, v] : e.kwargs) args.keyword.emplace_back(k, eval(*v, f));
  if (e.dstar) {
    Value d = eval(*e.dstar, f);
    if (!d.is_dict()) throw Error("argument after ** must be a mapping");
    for (const auto& [k, v] : d.mapping().items) args.keyword.emplace_back(k.to_string(), v);
  }
  return args;
}

Value Renderer::call(const Value& callee, const CallArgs& args) {
  if (callee.is_undefined()) undefined_error(callee);
  if (!callee.is_callable()) throw Error("'" + callee.type_name() + "' object is not callable");
  return callee.object_ref().call(*this, args);
}

Value Renderer::eval_call(const Expr& e, Frame& f) {
  Value callee = eval(*e.a, f);
  CallArgs args = eval_args(e, f);
  line_ = e.line;
  return call(callee, args);
}

Value Renderer::eval(const Expr& e, Frame& f) {
  step();
  Value v = eval_node(e, f);
  switch (e.type) {
    case ExprType::kLiteral:
    case ExprType::kName:
    case ExprType::kGetAttr:
    case ExprType::kGetItem: break;  // these share what already exists
    default: charge(v);
  }
  return v;
}

Value Renderer::eval_node(const Expr& e, Frame& f) {
  switch (e.type) {
    case ExprType::kLiteral: return e.value;
    case ExprType::kName: return lookup(e.name, f);
    case ExprType::kList:
    case ExprType::kTuple: {
      ValueList items;
      items.reserve(e.args.size());
      for (const auto& a : e.args) items.push_back(eval(*a, f));
      return e.type == ExprType::kList ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
    case ExprType::kDict: {
      Dict d;
      for (size_t k = 0; k < e.args.size(); ++k) d.set(eval(*e.args[k], f), eval(*e.values[k], f));
      return Value::dict(std::move(d));
    }
    case ExprType::kUnary: {
      Value v = eval(*e.a, f);
      if (e.name == "not") return Value::boolean(!v.truthy());
      if (v.is_undefined()) undefined_error(v);
      if (!v.is_number()) throw Error("bad operand type for unary " + e.name + ": '" + v.type_name() + "'");
      if (e.name == "+") return v.is_bool() ? Value::integer(v.as_int()) : v;
      if (v.is_float()) return Value::floating(-v.as_double());
      if (v.as_int() == std::numeric_limits<int64_t>::min()) overflow("-");
      return Value::integer(-v.as_int());
    }
    case ExprType::kAnd: {
      Value l = eval(*e.a, f);
      return l.truthy() ? eval(*e.b, f) : l;
    }
    case ExprType::kOr: {
      Value l = eval(*e.a, f);
      return l.truthy() ? l : eval(*e.b, f);
    }
    case ExprType::kBinary: {
      Value l = eval(*e.a, f);
      Value r = eval(*e.b, f);
      line_ = e.line;
      return eval_binary(e.name, l, r);
    }
    case ExprType::kCompare: {
      Value left = eval(*e.a, f);
      for (size_t k = 0; k < e.ops.size(); ++k) {
        Value right = eval(*e.args[k], f);
        const std::string& op = e.ops[k];
        bool ok;
        if (op == "==") ok = values_equal(left, right);
        else if (op == "!=") ok = !values_equal(left, right);
        else if (op == "in") ok = contains(right, left);
        else if (op == "notin") ok = !contains(right, left);
        else {
          if (left.is_undefined()) undefined_error(left);
          if (right.is_undefined()) undefined_error(right);
          if (op == "<") ok = value_less(left, right);
          else if (op == ">") ok = value_less(right, left);
          else if (op == "<=") ok = !value_less(right, left);
          else ok = !value_less(left, right);
        }
        if (!ok) return Value::boolean(false);
        left = std::move(right);
      }
      return Value::boolean(true);
    }
    case ExprType::kCond:
      if (eval(*e.a, f).truthy()) return eval(*e.b, f);  // a: condition, b: value
      return e.c ? eval(*e.c, f) : Value::undefined("the inline if-expression evaluated to false and no else section was defined.");
    case ExprType::kGetAttr: return get_attr(eval(*e.a, f), e.name);
    case ExprType::kGetItem: return get_item(eval(*e.a, f), eval(*e.b, f));
    case ExprType::kSlice: {
      Value obj = eval(*e.a, f);
      Value start = e.b ? eval(*e.b, f) : Value::none();
      Value stop = e.c ? eval(*e.c, f) : Value::none();
      Value step = e.d ? eval(*e.d, f) : Value::none();
      return slice_value(obj, start, stop, step);
    }
    case ExprType::kCall: return eval_call(e, f);
    case ExprType::kFilter: {
      Value input = eval(*e.a, f);
      CallArgs args = eval_args(e, f);
      line_ = e.line;
      return apply_filter(*this, e.name, input, args);
    }
    case ExprType::kTest: {
      Value input = e.a->type == ExprType::kName && !f.find(e.a->name) && !globals_.count(e.a->name)
                        ? Value::undefined("'" + e.a->name + "' is undefined")
                        : eval(*e.a, f);
      CallArgs args = eval_args(e, f);
      line_ = e.line;
      bool r = apply_test(*this, e.name, input, args);
      return Value::boolean(e.ops.empty() ? r : !r);
    }
  }
  return {};
}

static int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

Value Renderer::eval_binary(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string left = a.to_string(), right = b.to_string();
    check_value_bytes(uint64_t{left.size()} + right.size(), "'~'");
    return Value::string(left + right);
  }
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  if (op == "%" && a.is_string()) return percent_format(a.str(), b);
  if (a.is_number() && b.is_number()) {
    bool fl = a.is_float() || b.is_float();
    double x = a.as_double(), y = b.as_double();
    int64_t i = a.as_int(), j = b.as_int();
    int64_t r = 0;
    if (op == "+") {
      if (fl) return Value::floating(x + y);
      if (__builtin_add_overflow(i, j, &r)) overflow(op);
      return Value::integer(r);
    }
    if (op == "-") {
      if (fl) return Value::floating(x - y);
      if (__builtin_sub_overflow(i, j, &r)) overflow(op);
      return Value::integer(r);
    }
    if (op == "*") {
      if (fl) return Value::floating(x * y);
      if (__builtin_mul_overflow(i, j, &r)) overflow(op);
      return Value::integer(r);
    }
    if (op == "/") {
      if (y == 0) throw Error("division by zero");
      return Value::floating(x / y);
    }
    if (op == "//") {
      if (y == 0) throw Error("integer division or modulo by zero");
      if (fl) return Value::floating(std::floor(x / y));
      if (i == std::numeric_limits<int64_t>::min() && j == -1) overflow(op);
      return Value::integer(floor_div(i, j));
    }
    if (op == "%") {
      if (y == 0) throw Error("integer division or modulo by zero");
      if (fl) {
        double m = std::fmod(x, y);
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        return Value::floating(m);
      }
      if (j == -1) return Value::integer(0);  // also INT64_MIN % -1, which the CPU traps on
      int64_t m = i % j;  // i - floor(i / j) * j could overflow; the remainder cannot
      if (m != 0 && ((m < 0) != (j < 0))) m += j;
      return Value::integer(m);
    }
    if (op == "**") {
      if (!fl && j >= 0) return Value::integer(checked_power(i, j));
      return Value::floating(std::pow(x, y));
    }
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      check_value_bytes(uint64_t{a.str().size()} + b.str().size(), "'+'");
      return Value::string(a.str() + b.str());
    }
    if (a.is_sequence_like() && a.kind() == b.kind()) {
      check_value_bytes((uint64_t{a.items().size()} + b.items().size()) * sizeof(Value), "'+'");
      ValueList items = a.items();
      items.insert(items.end(), b.items().begin(), b.items().end());
      return a.kind() == Kind::Tuple ? Value::tuple(std::move(items)) : Value::list(std::move(items));
    }
  }
  if (op == "*") {
    const Value* seq = a.is_number() ? &b : &a;
    const Value* count = a.is_number() ? &a : &b;
    if ((count->is_int() || count->is_bool()) && (seq->is_string() || seq->is_sequence_like())) {
      uint64_t n = static_cast<uint64_t>(std::max<int64_t>(0, count->as_int()));
      uint64_t unit = seq->is_string() ? seq->str().size() : seq->items().size() * sizeof(Value);
      check_value_bytes(n, unit, "'*'");
      if (unit == 0) n = std::min<uint64_t>(n, 1);  // "" * 10**18 is "" without the loop
      if (seq->is_string()) {
        std::string out;
        out.reserve(n * unit);
        for (uint64_t k = 0; k < n; ++k) out += seq->str();
        return Value::string(out);
      }
      ValueList items;
      for (uint64_t k = 0; k < n; ++k) items.insert(items.end(), seq->items().begin(), seq->items().end());
      return seq->kind() == Kind::Tuple ? Value::tuple(items) : Value::list(items);
    }
  }
  throw Error("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
}

}  // namespace inkling::jinja
