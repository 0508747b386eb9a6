// The engine's dynamic value: Python semantics as Jinja2 sees them (int vs float,
// insertion-ordered dicts, tuples vs lists, Undefined, callables and namespaces).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace inkling::jinja {

class Value;
class Renderer;
using ValueList = std::vector<Value>;

enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Tuple, Dict, Object };

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // Keyword `name` if given, else positional[index] if present, else nullptr.
  const Value* get(std::string_view name, size_t index) const;
  const Value* keyword_arg(std::string_view name) const;
};

// Anything with attributes or a call operator: macros, namespaces, loop objects,
// bound methods, builtin functions.
class Object {
 public:
  virtual ~Object() = default;
  virtual std::string type_name() const = 0;
  virtual Value get_attr(const std::string& name) const;
  // Returns false when the object does not accept attribute assignment.
  virtual bool set_attr(const std::string& name, const Value& value);
  virtual bool is_callable() const { return false; }
  virtual Value call(Renderer& renderer, const CallArgs& args) const;
  virtual std::string repr() const;
};

struct Dict {
  std::vector<std::pair<Value, Value>> items;
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(const Value& key, const Value& value);
};

class Value {
 public:
  Value() = default;  // Undefined
  static Value undefined(std::string hint = {});
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value floating(double f);
  static Value string(std::string s);
  static Value list(ValueList items);
  static Value tuple(ValueList items);
  static Value dict(Dict d);
  static Value object(std::shared_ptr<Object> o);
  // Throws inkling::Error when `j` nests deeper than kMaxValueNesting or holds a string over
  // kMaxValueBytes.
  static Value from_json(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_float() const { return kind_ == Kind::Float; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float || kind_ == Kind::Bool; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_sequence_like() const { return kind_ == Kind::List || kind_ == Kind::Tuple; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_object() const { return kind_ == Kind::Object; }
  bool is_callable() const { return kind_ == Kind::Object && obj_->is_callable(); }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::Bool ? (b_ ? 1 : 0) : i_; }  // bool counts as int
  double as_double() const { return kind_ == Kind::Float ? f_ : static_cast<double>(as_int()); }
  const std::string& str() const { return *s_; }
  const ValueList& items() const { return *list_; }
  const Dict& mapping() const { return *dict_; }
  Object& object_ref() const { return *obj_; }
  const std::shared_ptr<Object>& object_ptr() const { return obj_; }
  const std::string& undefined_hint() const;

  bool truthy() const;
  std::string to_string() const;  // Python str()
  std::string repr() const;       // Python repr()
  std::string type_name() const;  // Python type name for error messages
  bool same_as(const Value& other) const;
  // Levels of lists, tuples and dicts inside this value (0 for scalars and objects); bounded by
  // kMaxValueNesting, so walking a value never overflows the stack.
  int nesting() const { return nesting_; }

 private:
  static Value from_json_at(const nlohmann::ordered_json& j, int depth);
  void set_nesting_from(const Value& child);

  Kind kind_ = Kind::Undefined;
  bool b_ = false;
  uint16_t nesting_ = 0;
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<const std::string> s_;
  std::shared_ptr<const ValueList> list_;
  std::shared_ptr<const Dict> dict_;
  std::shared_ptr<Object> obj_;
};

// Python ==, with 1 == 1.0 == True.
bool values_equal(const Value& a, const Value& b);
// Python <; throws inkling::Error on unorderable types.
bool value_less(const Value& a, const Value& b);
// Whether a float with no fraction (std::trunc'd) has a 64-bit integer: 2^63 is exact as a
// double, so the test runs before any cast. False for NaN and infinities.
inline bool truncated_fits_int64(double t) { return t >= -9223372036854775808.0 && t < 9223372036854775808.0; }
// Python float repr (shortest round trip, 1e-05, 1e+16, 1.0).
std::string format_float(double f);
// Number of Unicode code points in UTF-8 text.
size_t utf8_length(std::string_view s);
// Splits UTF-8 text into code points (each a UTF-8 string).
std::vector<std::string> utf8_chars(std::string_view s);
std::string utf8_encode(uint32_t code_point);

// json.dumps with the keyword arguments HF's tojson forwards.
struct JsonOptions {
  bool ensure_ascii = false;
  bool sort_keys = false;
  bool has_indent = false;
  std::string indent;
  std::string item_separator = ", ";
  std::string key_separator = ": ";
};
std::string dump_json(const Value& v, const JsonOptions& options);

}  // namespace inkling::jinja
