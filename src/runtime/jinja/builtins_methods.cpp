// Python str/dict/list methods, Jinja tests, globals and printf-style formatting.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <set>

#include "runtime/jinja/objects.h"
#include "tensor/error.h"

namespace inkling::jinja {
namespace {

// printf-style widths and precisions come from the template; Python would pad to any size.
constexpr size_t kMaxFormatWidth = size_t{1} << 20;

size_t format_field_number(const std::string& digits, const char* what) {
  size_t n = 0;
  for (char c : digits) {
    n = n * 10 + static_cast<size_t>(c - '0');
    if (n > kMaxFormatWidth)
      throw Error(std::string("format ") + what + " " + digits + " is over the limit of " +
                  std::to_string(kMaxFormatWidth));
  }
  return n;
}

std::string printf_piece(const std::string& spec, auto value) {
  int n = std::snprintf(nullptr, 0, spec.c_str(), value);
  if (n < 0) throw Error("format: cannot format with '" + spec + "'");
  std::string out(static_cast<size_t>(n) + 1, '\0');
  std::snprintf(out.data(), out.size(), spec.c_str(), value);
  out.resize(static_cast<size_t>(n));
  return out;
}

bool is_py_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string strip_chars(const std::string& s, const Value* chars, bool left, bool right) {
  auto strip = [&](char c) {
    if (!chars || chars->is_none()) return is_py_space(c);
    return chars->str().find(c) != std::string::npos;
  };
  size_t b = 0, e = s.size();
  if (left)
    while (b < e && strip(s[b])) ++b;
  if (right)
    while (e > b && strip(s[e - 1])) --e;
  return s.substr(b, e - b);
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

ValueList split(const std::string& s, const Value* sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (!sep || sep->is_none()) {
    // Runs of whitespace, no empty strings.
    std::vector<std::pair<size_t, size_t>> words;
    size_t k = 0;
    while (k < s.size()) {
      while (k < s.size() && is_py_space(s[k])) ++k;
      if (k >= s.size()) break;
      size_t start = k;
      while (k < s.size() && !is_py_space(s[k])) ++k;
      words.emplace_back(start, k);
    }
    if (maxsplit < 0 || static_cast<size_t>(maxsplit) >= words.size()) {
      for (auto [b, e] : words) parts.push_back(s.substr(b, e - b));
    } else if (!from_right) {
      for (int64_t w = 0; w < maxsplit; ++w) parts.push_back(s.substr(words[w].first, words[w].second - words[w].first));
      parts.push_back(strip_chars(s.substr(words[maxsplit].first), nullptr, false, true));
    } else {
      size_t first = words.size() - static_cast<size_t>(maxsplit);
      parts.push_back(strip_chars(s.substr(0, words[first - 1].second), nullptr, true, false));
      for (size_t w = first; w < words.size(); ++w) parts.push_back(s.substr(words[w].first, words[w].second - words[w].first));
    }
  } else {
    const std::string& d = sep->str();
    if (d.empty()) throw Error("empty separator");
    std::vector<size_t> hits;
    for (size_t p = s.find(d); p != std::string::npos; p = s.find(d, p + d.size())) hits.push_back(p);
    if (maxsplit >= 0 && static_cast<size_t>(maxsplit) < hits.size()) {
      if (from_right) hits.erase(hits.begin(), hits.end() - maxsplit);
      else hits.resize(static_cast<size_t>(maxsplit));
    }
    size_t prev = 0;
    for (size_t h : hits) {
      parts.push_back(s.substr(prev, h - prev));
      prev = h + d.size();
    }
    parts.push_back(s.substr(prev));
  }
  ValueList out;
  for (auto& p : parts) out.push_back(Value::string(std::move(p)));
  return out;
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  if (from.empty()) {
    auto chars = utf8_chars(s);
    int64_t n = 0;
    if (count < 0 || static_cast<uint64_t>(count) > chars.size()) count = static_cast<int64_t>(chars.size()) + 1;
    check_value_bytes(uint64_t{s.size()} + static_cast<uint64_t>(count) * to.size(), "replace");
    for (const auto& c : chars) {
      if (n < count) {
        out += to;
        ++n;
      }
      out += c;
    }
    if (count < 0 || n < count) out += to;
    return out;
  }
  size_t prev = 0;
  int64_t n = 0;
  for (size_t p = s.find(from); p != std::string::npos && (count < 0 || n < count); p = s.find(from, prev)) {
    out.append(s, prev, p - prev);
    out += to;
    if (out.size() > kMaxValueBytes) check_value_bytes(out.size(), "replace");
    prev = p + from.size();
    ++n;
  }
  return out + s.substr(prev);
}

std::string capitalize(const std::string& s) {
  std::string out = lower(s);
  if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
  return out;
}

// Python's str.title(): a letter after a non-letter is upper-cased, others lowered.
std::string py_title(const std::string& s) {
  std::string out = s;
  bool prev_cased = false;
  for (char& c : out) {
    unsigned char u = static_cast<unsigned char>(c);
    if (std::isalpha(u)) {
      c = static_cast<char>(prev_cased ? std::tolower(u) : std::toupper(u));
      prev_cased = true;
    } else {
      prev_cased = u >= 0x80 && prev_cased;
    }
  }
  return out;
}

Value str_format(const std::string& fmt, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t k = 0; k < fmt.size(); ++k) {
    char c = fmt[k];
    if (c == '{' && k + 1 < fmt.size() && fmt[k + 1] == '{') {
      out += '{';
      ++k;
    } else if (c == '}' && k + 1 < fmt.size() && fmt[k + 1] == '}') {
      out += '}';
      ++k;
    } else if (c == '{') {
      size_t end = fmt.find('}', k);
      if (end == std::string::npos) throw Error("Single '{' encountered in format string");
      std::string field = fmt.substr(k + 1, end - k - 1);
      std::string spec;
      if (size_t colon = field.find(':'); colon != std::string::npos) {
        spec = field.substr(colon + 1);
        field = field.substr(0, colon);
      }
      Value v;
      if (field.empty()) {
        if (auto_index >= args.positional.size()) throw Error("Replacement index out of range for positional args tuple");
        v = args.positional[auto_index++];
      } else if (std::isdigit(static_cast<unsigned char>(field[0]))) {
        size_t i = 0;
        for (char d : field) {
          if (!std::isdigit(static_cast<unsigned char>(d))) throw Error("KeyError: '" + field + "'");
          i = std::min<size_t>(i * 10 + static_cast<size_t>(d - '0'), args.positional.size());
        }
        if (i >= args.positional.size()) throw Error("Replacement index out of range for positional args tuple");
        v = args.positional[i];
      } else if (const Value* kv = args.keyword_arg(field)) {
        v = *kv;
      } else {
        throw Error("KeyError: '" + field + "'");
      }
      if (spec.empty()) out += v.to_string();
      else out += percent_format("%" + spec, v).str();
      if (out.size() > kMaxValueBytes) check_value_bytes(out.size(), "format");
      k = end;
    } else {
      out += c;
    }
  }
  return Value::string(out);
}

const std::set<std::string> kStrMethods = {"upper", "lower", "strip", "lstrip", "rstrip", "split", "rsplit",
                                           "startswith", "endswith", "replace", "find", "rfind", "count", "format",
                                           "join", "title", "capitalize", "splitlines", "isdigit", "isalpha",
                                           "isalnum", "isspace", "isupper", "islower", "index", "swapcase"};
const std::set<std::string> kDictMethods = {"get", "items", "keys", "values", "copy"};
const std::set<std::string> kListMethods = {"index", "count", "copy"};

}  // namespace

bool has_method(const Value& self, const std::string& name) {
  if (self.is_string()) return kStrMethods.count(name) > 0;
  if (self.is_dict()) return kDictMethods.count(name) > 0;
  if (self.is_sequence_like()) return kListMethods.count(name) > 0;
  return false;
}

Value call_method(Renderer& r, const Value& self, const std::string& name, const CallArgs& a) {
  (void)r;
  auto arg = [&](size_t i) -> const Value* { return i < a.positional.size() ? &a.positional[i] : nullptr; };
  auto need_str = [&](const Value* v, const char* what) -> const std::string& {
    if (!v || !v->is_string()) throw Error(std::string(what) + " argument must be str");
    return v->str();
  };
  if (self.is_string()) {
    const std::string& s = self.str();
    if (name == "upper") return Value::string(upper(s));
    if (name == "lower") return Value::string(lower(s));
    if (name == "strip") return Value::string(strip_chars(s, arg(0), true, true));
    if (name == "lstrip") return Value::string(strip_chars(s, arg(0), true, false));
    if (name == "rstrip") return Value::string(strip_chars(s, arg(0), false, true));
    if (name == "split" || name == "rsplit") {
      const Value* sep = a.get("sep", 0);
      const Value* maxsplit = a.get("maxsplit", 1);
      return Value::list(split(s, sep, maxsplit ? maxsplit->as_int() : -1, name == "rsplit"));
    }
    if (name == "startswith" || name == "endswith") {
      const Value* p = arg(0);
      ValueList prefixes = p && p->is_sequence_like() ? p->items() : ValueList{p ? *p : Value()};
      for (const Value& v : prefixes) {
        const std::string& x = need_str(&v, name.c_str());
        if (name == "startswith" ? s.compare(0, x.size(), x) == 0
                                 : s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0)
          return Value::boolean(true);
      }
      return Value::boolean(false);
    }
    if (name == "replace") {
      const Value* c = a.get("count", 2);
      return Value::string(replace_all(s, need_str(arg(0), "replace"), need_str(arg(1), "replace"), c ? c->as_int() : -1));
    }
    if (name == "find" || name == "rfind" || name == "index") {
      const std::string& x = need_str(arg(0), name.c_str());
      size_t p = name == "rfind" ? s.rfind(x) : s.find(x);
      if (p == std::string::npos) {
        if (name == "index") throw Error("substring not found");
        return Value::integer(-1);
      }
      return Value::integer(static_cast<int64_t>(utf8_length(s.substr(0, p))));
    }
    if (name == "count") {
      const std::string& x = need_str(arg(0), "count");
      if (x.empty()) return Value::integer(static_cast<int64_t>(utf8_length(s) + 1));
      int64_t n = 0;
      for (size_t p = s.find(x); p != std::string::npos; p = s.find(x, p + x.size())) ++n;
      return Value::integer(n);
    }
    if (name == "format") return str_format(s, a);
    if (name == "join") {
      std::string out;
      bool first = true;
      for (const Value& v : Renderer::iterate(arg(0) ? *arg(0) : Value())) {
        if (!first) out += s;
        first = false;
        out += need_str(&v, "join");
        if (out.size() > kMaxValueBytes) check_value_bytes(out.size(), "join");
      }
      return Value::string(out);
    }
    if (name == "title") return Value::string(py_title(s));
    if (name == "capitalize") return Value::string(capitalize(s));
    if (name == "swapcase") {
      std::string out = s;
      for (char& c : out) {
        unsigned char u = static_cast<unsigned char>(c);
        c = static_cast<char>(std::isupper(u) ? std::tolower(u) : std::toupper(u));
      }
      return Value::string(out);
    }
    if (name == "splitlines") {
      ValueList out;
      size_t prev = 0;
      for (size_t k = 0; k < s.size(); ++k) {
        if (s[k] == '\n' || s[k] == '\r') {
          out.push_back(Value::string(s.substr(prev, k - prev)));
          if (s[k] == '\r' && k + 1 < s.size() && s[k + 1] == '\n') ++k;
          prev = k + 1;
        }
      }
      if (prev < s.size()) out.push_back(Value::string(s.substr(prev)));
      return Value::list(out);
    }
    auto all_of = [&](int (*pred)(int)) {
      if (s.empty()) return Value::boolean(false);
      return Value::boolean(std::all_of(s.begin(), s.end(), [&](char c) { return pred(static_cast<unsigned char>(c)) != 0; }));
    };
    if (name == "isdigit") return all_of(::isdigit);
    if (name == "isalpha") return all_of(::isalpha);
    if (name == "isalnum") return all_of(::isalnum);
    if (name == "isspace") return all_of(::isspace);
    if (name == "isupper" || name == "islower") {
      bool cased = false;
      for (char c : s) {
        unsigned char u = static_cast<unsigned char>(c);
        if (std::isalpha(u)) {
          cased = true;
          if (name == "isupper" ? std::islower(u) : std::isupper(u)) return Value::boolean(false);
        }
      }
      return Value::boolean(cased);
    }
  } else if (self.is_dict()) {
    const Dict& d = self.mapping();
    if (name == "get") {
      if (!arg(0)) throw Error("get expected at least 1 argument, got 0");
      if (const Value* v = d.find(*arg(0))) return *v;
      return arg(1) ? *arg(1) : Value::none();
    }
    if (name == "items") {
      ValueList out;
      for (const auto& [k, v] : d.items) out.push_back(Value::tuple({k, v}));
      return Value::list(out);
    }
    if (name == "keys" || name == "values") {
      ValueList out;
      for (const auto& [k, v] : d.items) out.push_back(name == "keys" ? k : v);
      return Value::list(out);
    }
    if (name == "copy") return self;
  } else if (self.is_sequence_like()) {
    if (name == "copy") return self;
    if (!arg(0)) throw Error(name + "() takes exactly one argument (0 given)");
    int64_t n = 0;
    for (size_t k = 0; k < self.items().size(); ++k) {
      if (values_equal(self.items()[k], *arg(0))) {
        if (name == "index") return Value::integer(static_cast<int64_t>(k));
        ++n;
      }
    }
    if (name == "index") throw Error(arg(0)->repr() + " is not in list");
    return Value::integer(n);
  }
  throw Error("'" + self.type_name() + "' object has no attribute '" + name + "'");
}

Value percent_format(const std::string& fmt, const Value& args) {
  ValueList positional = args.kind() == Kind::Tuple ? args.items() : ValueList{args};
  size_t next = 0;
  bool used_mapping = false;
  std::string out;
  for (size_t k = 0; k < fmt.size(); ++k) {
    if (fmt[k] != '%') {
      out += fmt[k];
      continue;
    }
    if (++k >= fmt.size()) throw Error("incomplete format");
    if (fmt[k] == '%') {
      out += '%';
      continue;
    }
    Value v;
    bool have_value = false;
    if (fmt[k] == '(') {
      size_t end = fmt.find(')', k);
      if (end == std::string::npos) throw Error("incomplete format key");
      if (!args.is_dict()) throw Error("format requires a mapping");
      std::string key = fmt.substr(k + 1, end - k - 1);
      const Value* found = args.mapping().find(key);
      if (!found) throw Error("KeyError: '" + key + "'");
      v = *found;
      have_value = true;
      used_mapping = true;
      k = end + 1;
    }
    std::string flags;
    while (k < fmt.size() && std::string("-+ #0").find(fmt[k]) != std::string::npos) flags += fmt[k++];
    std::string width, precision;
    while (k < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[k]))) width += fmt[k++];
    if (k < fmt.size() && fmt[k] == '.') {
      precision = ".";
      ++k;
      while (k < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[k]))) precision += fmt[k++];
    }
    if (k >= fmt.size()) throw Error("incomplete format");
    char conv = fmt[k];
    if (!have_value) {
      if (next >= positional.size()) throw Error("not enough arguments for format string");
      v = positional[next++];
    }
    std::string piece;
    std::string spec = "%" + flags + width + precision;
    size_t w = width.empty() ? 0 : format_field_number(width, "width");
    size_t p = precision.size() > 1 ? format_field_number(precision.substr(1), "precision") : 0;
    switch (conv) {
      case 's':
      case 'r':
      case 'a': {
        std::string s = conv == 's' ? v.to_string() : v.repr();
        if (precision.size() > 1) {
          auto chars = utf8_chars(s);
          if (chars.size() > p) {
            s.clear();
            for (size_t c = 0; c < p; ++c) s += chars[c];
          }
        }
        size_t len = utf8_length(s);
        if (len < w) s = flags.find('-') != std::string::npos ? s + std::string(w - len, ' ') : std::string(w - len, ' ') + s;
        piece = s;
        break;
      }
      case 'd':
      case 'i':
      case 'u':
      case 'x':
      case 'X':
      case 'o': {
        if (!v.is_number()) throw Error(std::string("%") + conv + " format: a real number is required, not " + v.type_name());
        long long i = v.as_int();
        if (v.is_float()) {
          double t = std::trunc(v.as_double());
          if (std::isnan(t)) throw Error("cannot convert float NaN to integer");
          if (!truncated_fits_int64(t))
            throw Error(std::string("%") + conv + " format: " + format_float(v.as_double()) + " does not fit in 64 bits");
          i = static_cast<long long>(t);
        }
        char c = conv == 'i' || conv == 'u' ? 'd' : conv;
        piece = printf_piece(spec + "ll" + c, i);
        break;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G': {
        if (!v.is_number()) throw Error(std::string("must be real number, not ") + v.type_name());
        piece = printf_piece(spec + conv, v.as_double());
        break;
      }
      case 'c': {
        if (v.is_string()) {
          if (utf8_length(v.str()) != 1) throw Error("%c requires int or char");
          piece = v.str();
        } else if (v.is_int() || v.is_bool()) {
          int64_t cp = v.as_int();
          if (cp < 0 || cp > 0x10FFFF) throw Error("%c arg not in range(0x110000)");
          piece = utf8_encode(static_cast<uint32_t>(cp));
        } else {
          throw Error("%c requires int or char");
        }
        break;
      }
      default: throw Error(std::string("unsupported format character '") + conv + "'");
    }
    out += piece;
    if (out.size() > kMaxValueBytes) check_value_bytes(out.size(), "format");
  }
  if (!used_mapping && args.kind() == Kind::Tuple && next < positional.size())
    throw Error("not all arguments converted during string formatting");
  return Value::string(out);
}

void add_builtin_globals(std::map<std::string, Value>& g) {
  auto fn = [&](const std::string& name, NativeFn::Fn f) {
    g[name] = Value::object(std::make_shared<NativeFn>(name, std::move(f)));
  };
  fn("range", [](Renderer&, const CallArgs& a) {
    int64_t start = 0, stop = 0, step = 1;
    auto num = [](const Value& v) {
      if (!v.is_int() && !v.is_bool()) throw Error("'" + v.type_name() + "' object cannot be interpreted as an integer");
      return v.as_int();
    };
    if (a.positional.size() == 1) stop = num(a.positional[0]);
    else if (a.positional.size() >= 2) {
      start = num(a.positional[0]);
      stop = num(a.positional[1]);
      if (a.positional.size() >= 3) step = num(a.positional[2]);
    } else throw Error("range expected at least 1 argument, got 0");
    if (step == 0) throw Error("range() arg 3 must not be zero");
    ValueList out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
      if (out.size() >= 100000) throw Error("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
      out.push_back(Value::integer(i));
      if (__builtin_add_overflow(i, step, &i)) break;  // the next value is past any 64-bit stop
    }
    return Value::list(out);
  });
  fn("namespace", [](Renderer& r, const CallArgs& a) {
    auto ns = std::make_shared<Namespace>();
    r.adopt(ns);
    for (const Value& p : a.positional) {
      if (!p.is_dict()) throw Error("namespace() positional argument must be a mapping");
      for (const auto& [k, v] : p.mapping().items) ns->attrs.set(k, v);
    }
    for (const auto& [k, v] : a.keyword) ns->attrs.set(Value::string(k), v);
    return Value::object(ns);
  });
  fn("dict", [](Renderer&, const CallArgs& a) {
    Dict d;
    for (const Value& p : a.positional)
      if (p.is_dict()) d = p.mapping();
    for (const auto& [k, v] : a.keyword) d.set(Value::string(k), v);
    return Value::dict(d);
  });
  fn("lipsum", [](Renderer&, const CallArgs&) {
    return Value::string("Lorem ipsum dolor sit amet, consectetur adipiscing elit.");
  });
  fn("raise_exception", [](Renderer&, const CallArgs& a) -> Value {
    throw Error("TemplateError: " + (a.positional.empty() ? std::string() : a.positional[0].to_string()));
  });
  fn("strftime_now", [](Renderer&, const CallArgs& a) {
    std::string format = a.positional.empty() ? "%Y-%m-%d" : a.positional[0].to_string();
    std::time_t t = std::time(nullptr);
    std::tm tm{};
    localtime_r(&t, &tm);
    char buf[256];
    size_t n = std::strftime(buf, sizeof buf, format.c_str(), &tm);
    return Value::string(std::string(buf, n));
  });
  fn("cycler", [](Renderer&, const CallArgs& a) {
    struct Cycler : Object {
      ValueList items;
      mutable size_t pos = 0;
      std::string type_name() const override { return "Cycler"; }
      Value get_attr(const std::string& name) const override {
        if (name == "current") return items.empty() ? Value::undefined() : items[pos % items.size()];
        if (name == "next")
          return Value::object(std::make_shared<NativeFn>("next", [this](Renderer&, const CallArgs&) {
            if (items.empty()) throw Error("cycler has no items");
            return items[pos++ % items.size()];
          }));
        if (name == "reset")
          return Value::object(std::make_shared<NativeFn>("reset", [this](Renderer&, const CallArgs&) {
            pos = 0;
            return Value::none();
          }));
        return Object::get_attr(name);
      }
    };
    auto c = std::make_shared<Cycler>();
    c->items = a.positional;
    return Value::object(c);
  });
  fn("joiner", [](Renderer&, const CallArgs& a) {
    std::string sep = a.positional.empty() ? ", " : a.positional[0].to_string();
    auto used = std::make_shared<bool>(false);
    return Value::object(std::make_shared<NativeFn>("joiner", [sep, used](Renderer&, const CallArgs&) {
      if (!*used) {
        *used = true;
        return Value::string("");
      }
      return Value::string(sep);
    }));
  });
}

bool has_test(const std::string& name) {
  static const std::set<std::string> kTests = {
      "defined", "undefined", "none", "string", "mapping", "sequence", "number", "integer", "float", "boolean",
      "true", "false", "iterable", "callable", "in", "odd", "even", "divisibleby", "eq", "equalto", "==", "ne", "!=",
      "lt", "lessthan", "<", "le", "<=", "gt", "greaterthan", ">", "ge", ">=", "sameas", "lower", "upper", "escaped",
      "filter", "test"};
  return kTests.count(name) > 0;
}

bool apply_test(Renderer& r, const std::string& name, const Value& v, const CallArgs& a) {
  (void)r;
  auto arg = [&]() -> const Value& {
    if (a.positional.empty()) throw Error("test '" + name + "' requires an argument");
    return a.positional[0];
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  if (name == "sequence") return v.is_string() || v.is_sequence_like() || v.is_dict() || v.is_undefined();
  if (name == "iterable") return v.is_string() || v.is_sequence_like() || v.is_dict() || v.is_undefined();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "callable") return v.is_callable() || v.is_undefined();  // Undefined defines __call__
  if (name == "escaped") return false;
  if (name == "in") return contains(arg(), v);
  if (name == "odd" || name == "even") {
    if (!v.is_int() && !v.is_bool()) throw Error("test '" + name + "' requires an integer");
    bool odd = (v.as_int() % 2) != 0;
    return name == "odd" ? odd : !odd;
  }
  if (name == "divisibleby") {
    const Value& d = arg();
    if (d.as_double() == 0) throw Error("integer division or modulo by zero");
    if (v.is_float() || d.is_float()) return std::fmod(v.as_double(), d.as_double()) == 0;
    return v.as_int() % d.as_int() == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return values_equal(v, arg());
  if (name == "ne" || name == "!=") return !values_equal(v, arg());
  if (name == "lt" || name == "lessthan" || name == "<") return value_less(v, arg());
  if (name == "le" || name == "<=") return !value_less(arg(), v);
  if (name == "gt" || name == "greaterthan" || name == ">") return value_less(arg(), v);
  if (name == "ge" || name == ">=") return !value_less(v, arg());
  if (name == "sameas") return v.same_as(arg());
  if (name == "lower" || name == "upper") {
    CallArgs none;  // Jinja2 tests str(value)
    return call_method(r, Value::string(v.to_string()), name == "lower" ? "islower" : "isupper", none).as_bool();
  }
  if (name == "filter") return arg().is_string() && has_filter(arg().str());
  if (name == "test") return arg().is_string() && has_test(arg().str());
  throw Error("No test named '" + name + "'.");
}

}  // namespace inkling::jinja
