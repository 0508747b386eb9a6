#include "runtime/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <nlohmann/json.hpp>
#include <cmath>
#include <cstdio>

#include "common/utf8.h"
#include "runtime/jinja/limits.h"
#include "tensor/error.h"
#include "tensor/stack_guard.h"

namespace inkling::jinja {

std::string format_bytes(uint64_t bytes) {
  if (bytes >= (uint64_t{1} << 30) && bytes % (uint64_t{1} << 30) == 0) return std::to_string(bytes >> 30) + " GiB";
  if (bytes >= (uint64_t{1} << 20) && bytes % (uint64_t{1} << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes) + " bytes";
}

void check_value_bytes(uint64_t bytes, const char* what) { check_value_bytes(bytes, 1, what); }

void check_value_bytes(uint64_t count, uint64_t unit, const char* what) {
  unsigned __int128 bytes = static_cast<unsigned __int128>(count) * unit;
  if (bytes <= kMaxValueBytes) return;
  std::string size = bytes > UINT64_MAX ? "more than " + std::to_string(UINT64_MAX) : std::to_string(static_cast<uint64_t>(bytes));
  throw Error(std::string(what) + " would build a value of " + size + " bytes, over the limit of " +
              format_bytes(kMaxValueBytes) + " for one string or list");
}

namespace {

// Throws when text a value is printed into has outgrown the one-value limit (a list repeating one
// large string prints far more than it stores).
void check_printed(const std::string& out, const char* what) {
  if (out.size() > kMaxValueBytes)
    throw Error(std::string(what) + " printed more than the limit of " + format_bytes(kMaxValueBytes) +
                " for one string");
}

}  // namespace

const Value* CallArgs::keyword_arg(std::string_view name) const {
  for (const auto& [key, value] : keyword)
    if (key == name) return &value;
  return nullptr;
}

const Value* CallArgs::get(std::string_view name, size_t index) const {
  if (const Value* v = keyword_arg(name)) return v;
  if (index < positional.size()) return &positional[index];
  return nullptr;
}

Value Object::get_attr(const std::string& name) const { return Value::undefined(name); }
bool Object::set_attr(const std::string&, const Value&) { return false; }
Value Object::call(Renderer&, const CallArgs&) const {
  throw Error("'" + type_name() + "' object is not callable");
}
std::string Object::repr() const {
  std::string out = "<";  // appended, not "<" + std::string: GCC 12 warns -Wrestrict there (PR 105329)
  return out.append(type_name()).append(" object>");
}

const Value* Dict::find(const Value& key) const {
  for (const auto& [k, v] : items)
    if (values_equal(k, key)) return &v;
  return nullptr;
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k.is_string() && k.str() == key) return &v;
  return nullptr;
}

void Dict::set(const Value& key, const Value& value) {
  for (auto& [k, v] : items) {
    if (values_equal(k, key)) {
      v = value;
      return;
    }
  }
  items.emplace_back(key, value);
}

Value Value::undefined(std::string hint) {
  Value v;
  v.s_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}
Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::Bool;
  v.b_ = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::Int;
  v.i_ = i;
  return v;
}
Value Value::floating(double f) {
  Value v;
  v.kind_ = Kind::Float;
  v.f_ = f;
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::String;
  v.s_ = std::make_shared<const std::string>(std::move(s));
  return v;
}
void Value::set_nesting_from(const Value& child) {
  if (child.nesting_ + 1 > nesting_) {
    if (child.nesting_ + 1 > kMaxValueNesting)
      throw Error("lists and dicts nested deeper than " + std::to_string(kMaxValueNesting) + " levels");
    nesting_ = static_cast<uint16_t>(child.nesting_ + 1);
  }
}

Value Value::list(ValueList items) {
  check_value_bytes(uint64_t{items.size()} * sizeof(Value), "a list");
  Value v;
  v.kind_ = Kind::List;
  v.nesting_ = 1;
  for (const Value& e : items) v.set_nesting_from(e);
  v.list_ = std::make_shared<const ValueList>(std::move(items));
  return v;
}
Value Value::tuple(ValueList items) {
  Value v = list(std::move(items));
  v.kind_ = Kind::Tuple;
  return v;
}
Value Value::dict(Dict d) {
  check_value_bytes(uint64_t{d.items.size()} * 2 * sizeof(Value), "a dict");
  Value v;
  v.kind_ = Kind::Dict;
  v.nesting_ = 1;
  for (const auto& [key, e] : d.items) {
    v.set_nesting_from(key);
    v.set_nesting_from(e);
  }
  v.dict_ = std::make_shared<const Dict>(std::move(d));
  return v;
}
Value Value::object(std::shared_ptr<Object> o) {
  Value v;
  v.kind_ = Kind::Object;
  v.obj_ = std::move(o);
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& j) { return from_json_at(j, 0); }

Value Value::from_json_at(const nlohmann::ordered_json& j, int depth) {
  if ((j.is_array() || j.is_object()) && depth >= kMaxValueNesting)
    throw Error("JSON nested deeper than " + std::to_string(kMaxValueNesting) + " levels");
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return none();
    case nlohmann::ordered_json::value_t::boolean: return boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      return integer(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float: return floating(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      check_value_bytes(j.get_ref<const std::string&>().size(), "a JSON string");
      return string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json_at(e, depth + 1));
      return list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      d.items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it)
        d.items.emplace_back(string(it.key()), from_json_at(it.value(), depth + 1));
      return dict(std::move(d));
    }
    default: return none();
  }
}

const std::string& Value::undefined_hint() const {
  static const std::string kEmpty;
  return s_ ? *s_ : kEmpty;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool: return b_;
    case Kind::Int: return i_ != 0;
    case Kind::Float: return f_ != 0.0;
    case Kind::String: return !s_->empty();
    case Kind::List:
    case Kind::Tuple: return !list_->empty();
    case Kind::Dict: return !dict_->items.empty();
    case Kind::Object: return true;
  }
  return false;
}

std::string format_float(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
  if (f == 0) return std::signbit(f) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  // sci looks like -d.ddde+XX: split into sign, digits, exponent.
  bool negative = sci[0] == '-';
  size_t start = negative ? 1 : 0;
  size_t e_pos = sci.find('e');
  std::string digits;
  for (size_t k = start; k < e_pos; ++k)
    if (sci[k] != '.') digits += sci[k];
  int exponent = std::stoi(sci.substr(e_pos + 1));
  int decpt = exponent + 1;  // value = 0.DIGITS * 10^decpt
  std::string out = negative ? "-" : "";
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
    } else if (static_cast<size_t>(decpt) >= digits.size()) {
      out += digits + std::string(decpt - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, decpt) + "." + digits.substr(decpt);
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    int e = decpt - 1;
    char exp_buf[16];
    std::snprintf(exp_buf, sizeof exp_buf, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    out += exp_buf;
  }
  return out;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80) ++n;
  return n;
}

std::vector<std::string> utf8_chars(std::string_view s) {
  std::vector<std::string> out;
  out.reserve(s.size());
  for (size_t k = 0; k < s.size();) {
    size_t len = 1;
    unsigned char c = static_cast<unsigned char>(s[k]);
    if (c >= 0xF0) len = 4;
    else if (c >= 0xE0) len = 3;
    else if (c >= 0xC0) len = 2;
    len = std::min(len, s.size() - k);
    out.emplace_back(s.substr(k, len));
    k += len;
  }
  return out;
}

std::string utf8_encode(uint32_t cp) {
  if (cp >= 0x110000) throw Error("code point out of range: " + std::to_string(cp));
  std::string out;
  append_utf8(out, cp);
  return out;
}

static std::string repr_string(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == static_cast<unsigned char>(quote)) out += std::string("\\") + quote;
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else out += static_cast<char>(c);
  }
  out += quote;
  return out;
}

std::string Value::repr() const {
  // Objects (namespaces) can hold one another without bound; lists and dicts are bounded.
  if (stack_exhausted()) throw Error("a value nested too deeply to print");
  switch (kind_) {
    case Kind::String: return repr_string(*s_);
    case Kind::List:
    case Kind::Tuple: {
      std::string out = kind_ == Kind::List ? "[" : "(";
      for (size_t k = 0; k < list_->size(); ++k) {
        if (k) out += ", ";
        out += (*list_)[k].repr();
        check_printed(out, "printing a list");
      }
      if (kind_ == Kind::Tuple && list_->size() == 1) out += ",";
      out += kind_ == Kind::List ? "]" : ")";
      return out;
    }
    case Kind::Dict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : dict_->items) {
        if (!first) out += ", ";
        first = false;
        out += k.repr() + ": " + v.repr();
        check_printed(out, "printing a dict");
      }
      return out + "}";
    }
    default: return to_string();
  }
}

std::string Value::to_string() const {
  switch (kind_) {
    case Kind::Undefined: return "";
    case Kind::None: return "None";
    case Kind::Bool: return b_ ? "True" : "False";
    case Kind::Int: return std::to_string(i_);
    case Kind::Float: return format_float(f_);
    case Kind::String: return *s_;
    case Kind::Object: return obj_->repr();
    default: return repr();
  }
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::List: return "list";
    case Kind::Tuple: return "tuple";
    case Kind::Dict: return "dict";
    case Kind::Object: return obj_->type_name();
  }
  return "object";
}

bool Value::same_as(const Value& o) const {
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None: return true;
    case Kind::Bool: return b_ == o.b_;
    case Kind::Int: return i_ == o.i_;  // CPython caches small ints; close enough
    case Kind::Float: return f_ == o.f_;
    case Kind::String: return s_ == o.s_ || *s_ == *o.s_;
    case Kind::List:
    case Kind::Tuple: return list_ == o.list_;
    case Kind::Dict: return dict_ == o.dict_;
    case Kind::Object: return obj_ == o.obj_;
  }
  return false;
}

bool values_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) {
    if (a.is_sequence_like() && b.is_sequence_like()) return false;  // [1] != (1,)
    return false;
  }
  switch (a.kind()) {
    case Kind::Undefined:
    case Kind::None: return true;
    case Kind::String: return a.str() == b.str();
    case Kind::List:
    case Kind::Tuple: {
      if (a.items().size() != b.items().size()) return false;
      for (size_t k = 0; k < a.items().size(); ++k)
        if (!values_equal(a.items()[k], b.items()[k])) return false;
      return true;
    }
    case Kind::Dict: {
      if (a.mapping().items.size() != b.mapping().items.size()) return false;
      for (const auto& [k, v] : a.mapping().items) {
        const Value* other = b.mapping().find(k);
        if (!other || !values_equal(v, *other)) return false;
      }
      return true;
    }
    case Kind::Object: return a.object_ptr() == b.object_ptr();
    default: return false;
  }
}

bool value_less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 order == code point order
  if (a.is_sequence_like() && b.kind() == a.kind()) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t k = 0; k < x.size() && k < y.size(); ++k) {
      if (!values_equal(x[k], y[k])) return value_less(x[k], y[k]);
    }
    return x.size() < y.size();
  }
  throw Error("'<' not supported between instances of '" + a.type_name() + "' and '" +
              b.type_name() + "'");
}

static void json_string(const std::string& s, bool ensure_ascii, std::string& out) {
  out += '"';
  for (size_t k = 0; k < s.size(); ++k) {
    unsigned char c = static_cast<unsigned char>(s[k]);
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    char buf[16];
    if (c < 0x20) {
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else if (c < 0x80 || !ensure_ascii) {
      out += static_cast<char>(c);
    } else {
      size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
      uint32_t cp = c & (len == 4 ? 0x07 : len == 3 ? 0x0F : 0x1F);
      for (size_t m = 1; m < len && k + m < s.size(); ++m) cp = (cp << 6) | (s[k + m] & 0x3F);
      k += len - 1;
      if (cp >= 0x10000) {
        cp -= 0x10000;
        std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
      } else {
        std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      }
      out += buf;
    }
  }
  out += '"';
}

static void dump_json_into(const Value& v, const JsonOptions& o, int depth, std::string& out) {
  auto newline = [&](int d) {
    out += '\n';
    for (int k = 0; k < d; ++k) {
      out += o.indent;
      check_printed(out, "tojson");
    }
  };
  switch (v.kind()) {
    case Kind::None: out += "null"; return;
    case Kind::Bool: out += v.as_bool() ? "true" : "false"; return;
    case Kind::Int: out += std::to_string(v.as_int()); return;
    case Kind::Float: {
      double f = v.as_double();
      if (std::isnan(f)) out += "NaN";
      else if (std::isinf(f)) out += f < 0 ? "-Infinity" : "Infinity";
      else out += format_float(f);
      return;
    }
    case Kind::String: json_string(v.str(), o.ensure_ascii, out); return;
    case Kind::List:
    case Kind::Tuple: {
      if (v.items().empty()) {
        out += "[]";
        return;
      }
      out += '[';
      bool first = true;
      for (const Value& e : v.items()) {
        if (!first) out += o.item_separator;
        first = false;
        if (o.has_indent) newline(depth + 1);
        dump_json_into(e, o, depth + 1, out);
        check_printed(out, "tojson");
      }
      if (o.has_indent) newline(depth);
      out += ']';
      return;
    }
    case Kind::Dict: {
      if (v.mapping().items.empty()) {
        out += "{}";
        return;
      }
      std::vector<std::pair<std::string, const Value*>> entries;
      for (const auto& [k, e] : v.mapping().items) {
        std::string key;
        if (k.is_string()) key = k.str();
        else if (k.is_none()) key = "null";
        else if (k.is_bool()) key = k.as_bool() ? "true" : "false";
        else if (k.is_int() || k.is_float()) key = k.to_string();
        else throw Error("keys must be str, int, float, bool or None, not " + k.type_name());
        entries.emplace_back(std::move(key), &e);
      }
      if (o.sort_keys)
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto& x, const auto& y) { return x.first < y.first; });
      out += '{';
      bool first = true;
      for (const auto& [key, e] : entries) {
        if (!first) out += o.item_separator;
        first = false;
        if (o.has_indent) newline(depth + 1);
        json_string(key, o.ensure_ascii, out);
        out += o.key_separator;
        dump_json_into(*e, o, depth + 1, out);
        check_printed(out, "tojson");
      }
      if (o.has_indent) newline(depth);
      out += '}';
      return;
    }
    case Kind::Undefined: throw Error("Object of type Undefined is not JSON serializable");
    case Kind::Object:
      throw Error("Object of type " + v.type_name() + " is not JSON serializable");
  }
}

std::string dump_json(const Value& v, const JsonOptions& options) {
  std::string out;
  dump_json_into(v, options, 0, out);
  return out;
}

}  // namespace inkling::jinja
