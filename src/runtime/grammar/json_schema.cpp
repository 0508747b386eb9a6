#include "runtime/grammar/json_schema.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <vector>

#include "common/utf8.h"
#include "tensor/error.h"

namespace inkling::grammar {

namespace {

// Ordered: properties are generated in the schema's order, as clients expect.
using json = nlohmann::ordered_json;

constexpr int kMaxSchemaDepth = 64;
constexpr size_t kMaxSchemaRules = 20000;
constexpr int64_t kMaxIntegerBound = 1000000000000000000;  // 1e18: the ranges below stay in int64

// Rules every JSON grammar shares. Whitespace is bounded (one space, or one newline and an
// indent of at most 20) so a model cannot pad forever.
constexpr const char* kJsonPrimitives = R"(ws ::= ( " " | "\n" [ \t]{0,20} )?
value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( member ( "," ws member )* )? "}"
member ::= string ws ":" ws value ws
array ::= "[" ws ( element ( "," ws element )* )? "]"
element ::= value ws
string ::= "\"" char* "\""
char ::= [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
number ::= integer ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
integer ::= "-"? ( "0" | [1-9] [0-9]* )
)";

// Keywords that assert something we cannot (or do not yet) enforce: refused, never ignored.
const std::set<std::string> kUnsupported = {
    "not", "if", "then", "else", "patternProperties", "propertyNames", "dependentRequired", "dependentSchemas",
    "dependencies", "unevaluatedProperties", "unevaluatedItems", "contains", "minContains", "maxContains",
    "multipleOf", "minProperties", "maxProperties", "$dynamicRef", "$recursiveRef", "contentSchema"};

std::string gbnf_literal(std::string_view bytes) {
  std::string out = "\"";
  for (unsigned char c : bytes) append_literal_byte(out, c);
  return out + "\"";
}

std::string dump_json(const json& value) {
  try {
    return value.dump(-1, ' ', false, json::error_handler_t::strict);
  } catch (const json::exception&) {
    throw Error("JSON Schema: a const or enum value is not valid UTF-8");
  }
}

std::string join_alternatives(const std::vector<std::string>& alternatives) {
  if (alternatives.size() == 1) return alternatives[0];
  std::string out = "(";
  for (size_t i = 0; i < alternatives.size(); ++i) out += (i ? " | " : "") + alternatives[i];
  return out + ")";
}

// --- integer ranges as digit patterns ---

std::string digits_between(const std::string& a, const std::string& b);

std::string digit_class(char lo, char hi) {
  if (lo == hi) return std::string("\"") + lo + "\"";
  return std::string("[") + lo + "-" + hi + "]";
}

// Digit strings of equal length n from a to b inclusive (leading zeros allowed).
std::string digits_between(const std::string& a, const std::string& b) {
  if (a == b) return "\"" + a + "\"";
  size_t common = 0;
  while (a[common] == b[common]) ++common;
  std::string prefix = common ? "\"" + a.substr(0, common) + "\" " : "";
  const char a0 = a[common], b0 = b[common];
  const size_t rest = a.size() - common - 1;
  if (rest == 0) return "(" + prefix + digit_class(a0, b0) + ")";
  std::string ar = a.substr(common + 1), br = b.substr(common + 1);
  const bool a_zeros = ar == std::string(rest, '0'), b_nines = br == std::string(rest, '9');
  const std::string any_rest = "[0-9]{" + std::to_string(rest) + "}";
  std::vector<std::string> alts;
  char lo = a0, hi = b0;
  if (!a_zeros) {
    alts.push_back(std::string("\"") + a0 + "\" " + digits_between(ar, std::string(rest, '9')));
    ++lo;
  }
  if (!b_nines) --hi;
  if (lo <= hi) alts.push_back(digit_class(lo, hi) + " " + any_rest);
  if (!b_nines) alts.push_back(std::string("\"") + b0 + "\" " + digits_between(std::string(rest, '0'), br));
  return "(" + prefix + join_alternatives(alts) + ")";
}

// Non-negative integers in [lo, hi] written without leading zeros; hi < 0 means unbounded.
std::string naturals_between(int64_t lo, int64_t hi) {
  const std::string los = std::to_string(lo);
  std::vector<std::string> alts;
  const size_t max_len = hi < 0 ? los.size() : std::to_string(hi).size();
  for (size_t len = los.size(); len <= max_len; ++len) {
    std::string a = los;
    if (len != los.size()) {
      a.assign(len, '0');
      a[0] = '1';
    }
    std::string b = (hi >= 0 && len == max_len) ? std::to_string(hi) : std::string(len, '9');
    alts.push_back(digits_between(a, b));
  }
  if (hi < 0) alts.push_back("[1-9] [0-9]{" + std::to_string(los.size()) + ",}");
  return join_alternatives(alts);
}

bool has_bound(const json& schema, const char* key) { return schema.contains(key) && schema[key].is_number(); }

// --- the compiler ---

class SchemaCompiler {
 public:
  explicit SchemaCompiler(const json& root) : root_(root) {}

  std::string compile() {
    std::string expr = visit(root_, "root-value", 0);
    std::string out = "root ::= " + expr + "\n";
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    out += kJsonPrimitives;
    return out;
  }

 private:
  [[noreturn]] static void unsupported(const std::string& what) { throw Error("JSON Schema: " + what + " is not supported"); }

  std::string new_rule(const std::string& hint, const std::string& body) {
    std::string name = reserve_name(hint);
    rules_.push_back({name, body});
    return name;
  }

  std::string reserve_name(const std::string& hint) {
    if (used_names_.size() > kMaxSchemaRules) throw Error("JSON Schema: too large (more than 20000 rules)");
    std::string base;
    for (char c : hint) base += (std::isalnum(uint8_t(c)) || c == '-') ? c : '-';
    if (base.empty()) base = "rule";
    if (base.rfind("s-", 0) != 0) base = "s-" + base;
    base = base.substr(0, 48);
    std::string name = base;
    for (int i = 2; used_names_.count(name); ++i) name = base + "-" + std::to_string(i);
    used_names_.insert(name);
    return name;
  }

  const json& resolve(const std::string& ref) {
    if (ref.empty() || ref[0] != '#') unsupported("$ref \"" + ref + "\" (only references inside the schema, \"#...\")");
    try {
      const json& target = root_.at(json::json_pointer(ref.substr(1)));
      return target;
    } catch (const json::exception&) {
      throw Error("JSON Schema: $ref \"" + ref + "\" does not resolve");
    }
  }

  std::string visit_ref(const std::string& ref, int depth) {
    auto known = ref_rules_.find(ref);
    if (known != ref_rules_.end()) return known->second;
    const json& target = resolve(ref);
    std::string hint = ref.substr(ref.rfind('/') + 1);
    std::string name = reserve_name(hint.empty() ? "ref" : hint);
    ref_rules_[ref] = name;
    std::string body = visit(target, name, depth + 1);
    rules_.push_back({name, body});
    return name;
  }

  // Merges sibling keywords into each subschema of a combinator (allOf members, anyOf
  // branches): properties are united, required lists concatenated, other keywords overridden.
  json merged(json base, const json& extra) {
    if (extra.is_boolean()) {
      if (!extra.get<bool>()) throw Error("JSON Schema: a false subschema matches nothing");
      return base;
    }
    if (!extra.is_object()) throw Error("JSON Schema: a subschema must be an object or a boolean");
    const json& add = extra.contains("$ref") && extra["$ref"].is_string() && extra.size() == 1 ? resolve(extra["$ref"].get<std::string>()) : extra;
    // additionalProperties sees only the properties beside it: merging would let it admit (or
    // forbid) names it never saw, so a closed side may not meet names it does not declare.
    auto closed = [](const json& s) {
      return s.contains("additionalProperties") &&
             !(s["additionalProperties"].is_boolean() && s["additionalProperties"].get<bool>());
    };
    auto names = [](const json& s) {
      std::vector<std::string> out;
      if (s.contains("properties") && s["properties"].is_object())
        for (auto p = s["properties"].begin(); p != s["properties"].end(); ++p) out.push_back(p.key());
      if (s.contains("required") && s["required"].is_array())
        for (const auto& r : s["required"])
          if (r.is_string()) out.push_back(r.get<std::string>());
      return out;
    };
    auto declares = [](const json& s, const std::string& key) {
      return s.contains("properties") && s["properties"].is_object() && s["properties"].contains(key);
    };
    for (const auto& [closed_side, other] : {std::pair<const json*, const json*>{&base, &add}, {&add, &base}}) {
      if (!closed(*closed_side)) continue;
      for (const std::string& key : names(*other))
        if (!declares(*closed_side, key))
          unsupported("additionalProperties beside allOf / anyOf / $ref members that add properties (\"" + key + "\")");
    }
    for (auto it = add.begin(); it != add.end(); ++it) {
      if (it.key() == "properties" && base.contains("properties") && base["properties"].is_object() && it->is_object()) {
        for (auto p = it->begin(); p != it->end(); ++p) base["properties"][p.key()] = *p;
      } else if (it.key() == "required" && base.contains("required") && base["required"].is_array() && it->is_array()) {
        for (const auto& r : *it) base["required"].push_back(r);
      } else {
        base[it.key()] = *it;
      }
    }
    return base;
  }

  std::string visit(const json& schema, const std::string& name, int depth) {
    if (depth > kMaxSchemaDepth) throw Error("JSON Schema: nested deeper than " + std::to_string(kMaxSchemaDepth));
    if (schema.is_boolean()) {
      if (!schema.get<bool>()) throw Error("JSON Schema: the schema false matches nothing");
      return "value";
    }
    if (!schema.is_object()) throw Error("JSON Schema: a schema must be an object or a boolean");
    for (auto it = schema.begin(); it != schema.end(); ++it)
      if (kUnsupported.count(it.key())) throw Error("JSON Schema: keyword \"" + it.key() + "\" is not supported");
    if (schema.contains("$ref")) {
      if (!schema["$ref"].is_string()) throw Error("JSON Schema: $ref must be a string");
      json siblings = schema;
      siblings.erase("$ref");
      for (const char* annotation : {"description", "title", "default", "examples", "$comment", "$defs", "definitions"}) siblings.erase(annotation);
      if (siblings.empty()) return visit_ref(schema["$ref"].get<std::string>(), depth);
      return visit(merged(resolve(schema["$ref"].get<std::string>()), siblings), name, depth + 1);
    }
    if (schema.contains("allOf")) {
      const json& all = schema["allOf"];
      if (!all.is_array() || all.empty()) throw Error("JSON Schema: allOf must be a non-empty array");
      json base = schema;
      base.erase("allOf");
      for (const auto& member : all) base = merged(base, member);
      return visit(base, name, depth + 1);
    }
    for (const char* combinator : {"anyOf", "oneOf"}) {
      if (!schema.contains(combinator)) continue;
      // oneOf is compiled as anyOf: overlapping branches are the schema author's to avoid.
      const json& branches = schema[combinator];
      if (!branches.is_array() || branches.empty()) throw Error(std::string("JSON Schema: ") + combinator + " must be a non-empty array");
      json siblings = schema;
      siblings.erase(combinator);
      for (const char* annotation : {"description", "title", "default", "examples", "$comment", "$defs", "definitions"}) siblings.erase(annotation);
      std::vector<std::string> alts;
      int i = 0;
      for (const auto& branch : branches) {
        const std::string branch_name = name + "-" + std::to_string(i++);
        alts.push_back(siblings.empty() ? visit(branch, branch_name, depth + 1)
                                        : visit(merged(siblings, branch), branch_name, depth + 1));
      }
      return new_rule(name, join_alternatives(alts));
    }
    if (schema.contains("const")) return gbnf_literal(dump_json(schema["const"]));
    if (schema.contains("enum")) {
      const json& values = schema["enum"];
      if (!values.is_array() || values.empty()) throw Error("JSON Schema: enum must be a non-empty array");
      std::vector<std::string> alts;
      for (const auto& v : values) alts.push_back(gbnf_literal(dump_json(v)));
      return new_rule(name, join_alternatives(alts));
    }
    const bool nullable = schema.contains("nullable") && schema["nullable"].is_boolean() && schema["nullable"].get<bool>();
    std::vector<std::string> types;
    if (schema.contains("type")) {
      const json& t = schema["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const auto& each : t) {
          if (!each.is_string()) throw Error("JSON Schema: type must be a string or an array of strings");
          types.push_back(each.get<std::string>());
        }
      } else {
        throw Error("JSON Schema: type must be a string or an array of strings");
      }
    } else {
      types.push_back(inferred_type(schema));
    }
    if (nullable) types.push_back("null");
    std::vector<std::string> alts;
    for (const std::string& type : types) alts.push_back(visit_type(schema, type, name, depth));
    return alts.size() == 1 ? alts[0] : new_rule(name, join_alternatives(alts));
  }

  static std::string inferred_type(const json& schema) {
    for (const char* key : {"properties", "required", "additionalProperties"})
      if (schema.contains(key)) return "object";
    for (const char* key : {"items", "prefixItems", "minItems", "maxItems"})
      if (schema.contains(key)) return "array";
    for (const char* key : {"pattern", "format", "minLength", "maxLength"})
      if (schema.contains(key)) return "string";
    for (const char* key : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
      if (schema.contains(key)) return "number";
    return "any";
  }

  std::string visit_type(const json& schema, const std::string& type, const std::string& name, int depth) {
    if (type == "any") return "value";
    if (type == "null") return "\"null\"";
    if (type == "boolean") return "(\"true\" | \"false\")";
    if (type == "string") return string_rule(schema, name);
    if (type == "integer") return integer_rule(schema, name);
    if (type == "number") return number_rule(schema, name);
    if (type == "object") return object_rule(schema, name, depth);
    if (type == "array") return array_rule(schema, name, depth);
    throw Error("JSON Schema: unknown type \"" + type + "\"");
  }

  static uint32_t count_keyword(const json& schema, const char* key, uint32_t fallback) {
    if (!schema.contains(key)) return fallback;
    const json& v = schema[key];
    if (!v.is_number_integer() && !(v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()))
      throw Error(std::string("JSON Schema: ") + key + " must be a non-negative integer");
    double d = v.get<double>();
    if (d < 0) throw Error(std::string("JSON Schema: ") + key + " must be a non-negative integer");
    if (d > double(kMaxRepetition)) throw Error(std::string("JSON Schema: ") + key + " above " + std::to_string(kMaxRepetition) + " is not supported");
    return uint32_t(d);
  }

  std::string string_rule(const json& schema, const std::string& name) {
    const bool has_length = schema.contains("minLength") || schema.contains("maxLength");
    if (schema.contains("format") && !schema.contains("pattern")) {
      if (!schema["format"].is_string()) throw Error("JSON Schema: format must be a string");
      std::string format = schema["format"].get<std::string>();
      if (has_length) unsupported("format together with minLength / maxLength");
      return "\"\\\"\" " + format_rule(format) + " \"\\\"\"";
    }
    if (schema.contains("pattern")) {
      if (!schema["pattern"].is_string()) throw Error("JSON Schema: pattern must be a string");
      if (has_length) unsupported("pattern together with minLength / maxLength");
      std::string body = regex_to_gbnf_body(schema["pattern"].get<std::string>());
      return new_rule(name, "\"\\\"\" " + body + " \"\\\"\"");
    }
    if (!has_length) return "string";
    uint32_t min = count_keyword(schema, "minLength", 0);
    uint32_t max = count_keyword(schema, "maxLength", kMaxRepetition);
    if (max < min) throw Error("JSON Schema: maxLength below minLength");
    std::string count = schema.contains("maxLength") ? "{" + std::to_string(min) + "," + std::to_string(max) + "}"
                                                     : "{" + std::to_string(min) + ",}";
    return new_rule(name, "\"\\\"\" char" + count + " \"\\\"\"");
  }

  std::string format_rule(const std::string& format) {
    auto shared = [&](const std::string& rule, const std::string& body) {
      if (!format_rules_.count(rule)) {
        format_rules_.insert(rule);
        rules_.push_back({rule, body});
      }
      return rule;
    };
    // Days valid in every year (February stops at 28), so Python's date parser takes them all.
    const std::string date_body =
        "[1-9] [0-9]{3} \"-\" ( ( \"0\" [13578] | \"1\" [02] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] ) | "
        "( \"0\" [469] | \"11\" ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"30\" ) | "
        "\"02\" \"-\" ( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] ) )";
    const std::string time_body =
        "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,9} )? "
        "( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )";
    if (format == "date") return shared("f-date", date_body);
    if (format == "time") return shared("f-time", time_body);
    if (format == "date-time") {
      shared("f-date", date_body);
      shared("f-time", time_body);
      return shared("f-date-time", "f-date \"T\" f-time");
    }
    if (format == "uuid")
      return shared("f-uuid", "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12}");
    if (format == "email")
      return shared("f-email",
                    "[a-zA-Z0-9_%+-] [a-zA-Z0-9._%+-]{0,63} \"@\" [a-zA-Z0-9] [a-zA-Z0-9-]{0,62} "
                    "( \".\" [a-zA-Z0-9] [a-zA-Z0-9-]{0,62} ){1,3}");
    if (format == "ipv4") {
      shared("f-octet", "\"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9] [0-9] | [0-9]");
      return shared("f-ipv4", "f-octet \".\" f-octet \".\" f-octet \".\" f-octet");
    }
    unsupported("format \"" + format + "\"");
  }

  // Integer bounds from minimum / maximum / exclusive*, as the integers they admit.
  static void integer_bounds(const json& schema, bool& has_lo, int64_t& lo, bool& has_hi, int64_t& hi) {
    auto bound = [](const json& v, const char* key) {
      double d = v.get<double>();
      if (!std::isfinite(d) || std::fabs(d) > double(kMaxIntegerBound))
        throw Error(std::string("JSON Schema: ") + key + " beyond 1e18 is not supported");
      return d;
    };
    has_lo = has_hi = false;
    auto raise_lo = [&](int64_t v) { lo = has_lo ? std::max(lo, v) : v, has_lo = true; };
    auto lower_hi = [&](int64_t v) { hi = has_hi ? std::min(hi, v) : v, has_hi = true; };
    const bool draft4_exclusive_min = schema.contains("exclusiveMinimum") && schema["exclusiveMinimum"].is_boolean();
    const bool draft4_exclusive_max = schema.contains("exclusiveMaximum") && schema["exclusiveMaximum"].is_boolean();
    if (has_bound(schema, "minimum")) {
      double d = bound(schema["minimum"], "minimum");
      bool exclusive = draft4_exclusive_min && schema["exclusiveMinimum"].get<bool>();
      raise_lo(exclusive ? int64_t(std::floor(d)) + 1 : int64_t(std::ceil(d)));
    }
    if (has_bound(schema, "maximum")) {
      double d = bound(schema["maximum"], "maximum");
      bool exclusive = draft4_exclusive_max && schema["exclusiveMaximum"].get<bool>();
      lower_hi(exclusive ? int64_t(std::ceil(d)) - 1 : int64_t(std::floor(d)));
    }
    if (has_bound(schema, "exclusiveMinimum")) raise_lo(int64_t(std::floor(bound(schema["exclusiveMinimum"], "exclusiveMinimum"))) + 1);
    if (has_bound(schema, "exclusiveMaximum")) lower_hi(int64_t(std::ceil(bound(schema["exclusiveMaximum"], "exclusiveMaximum"))) - 1);
    if (has_lo && has_hi && lo > hi) throw Error("JSON Schema: no integer lies between minimum and maximum");
  }

  static std::string integer_range(bool has_lo, int64_t lo, bool has_hi, int64_t hi) {
    if (!has_lo && !has_hi) return "integer";
    if (!has_hi) {
      if (lo >= 0) return naturals_between(lo, -1);
      return "( \"-\" " + naturals_between(1, -lo) + " | " + naturals_between(0, -1) + " )";
    }
    if (!has_lo) {
      if (hi >= 0) return "( \"-\" " + naturals_between(1, -1) + " | " + naturals_between(0, hi) + " )";
      return "\"-\" " + naturals_between(-hi, -1);
    }
    if (lo >= 0) return naturals_between(lo, hi);
    if (hi < 0) return "\"-\" " + naturals_between(-hi, -lo);
    return "( \"-\" " + naturals_between(1, -lo) + " | " + naturals_between(0, hi) + " )";
  }

  std::string integer_rule(const json& schema, const std::string& name) {
    bool has_lo, has_hi;
    int64_t lo = 0, hi = 0;
    integer_bounds(schema, has_lo, lo, has_hi, hi);
    if (!has_lo && !has_hi) return "integer";
    return new_rule(name, integer_range(has_lo, lo, has_hi, hi));
  }

  std::string number_rule(const json& schema, const std::string& name) {
    const bool bounded = has_bound(schema, "minimum") || has_bound(schema, "maximum") ||
                         schema.contains("exclusiveMinimum") || schema.contains("exclusiveMaximum");
    if (!bounded) return "number";
    // Bounds on numbers: whole, non-negative and inclusive (0..1, 0..100, minimum 0), where the
    // integer part decides: [lo, hi) with any fraction, or hi itself.
    auto whole = [&](const char* key, int64_t& out) {
      if (!has_bound(schema, key)) return false;
      double d = schema[key].get<double>();
      if (d < 0 || d > double(kMaxIntegerBound) || std::floor(d) != d)
        unsupported(std::string(key) + " on a number unless it is a whole number >= 0");
      out = int64_t(d);
      return true;
    };
    if (schema.contains("exclusiveMinimum") || schema.contains("exclusiveMaximum"))
      unsupported("exclusiveMinimum / exclusiveMaximum on a number");
    int64_t lo = 0, hi = 0;
    bool has_lo = whole("minimum", lo), has_hi = whole("maximum", hi);
    if (has_lo && has_hi && lo > hi) throw Error("JSON Schema: maximum below minimum");
    const std::string fraction = "( \".\" [0-9]+ )?";
    if (!has_hi) return new_rule(name, naturals_between(has_lo ? lo : 0, -1) + " " + fraction + (has_lo ? "" : " | \"-\" number"));
    std::vector<std::string> alts;
    if (hi > (has_lo ? lo : 0)) alts.push_back(naturals_between(has_lo ? lo : 0, hi - 1) + " " + fraction);
    alts.push_back("\"" + std::to_string(hi) + "\" ( \".\" \"0\"+ )?");
    if (!has_lo) alts.push_back("\"-\" number");
    return new_rule(name, join_alternatives(alts));
  }

  std::string object_rule(const json& schema, const std::string& name, int depth) {
    const json empty = json::object();
    const json& properties = schema.contains("properties") ? schema["properties"] : empty;
    if (!properties.is_object()) throw Error("JSON Schema: properties must be an object");
    std::set<std::string> required;
    if (schema.contains("required")) {
      if (!schema["required"].is_array()) throw Error("JSON Schema: required must be an array");
      for (const auto& r : schema["required"]) {
        if (!r.is_string()) throw Error("JSON Schema: required must list strings");
        required.insert(r.get<std::string>());
      }
    }
    // Declared properties in schema order, then required names not declared (any value).
    std::vector<std::pair<std::string, const json*>> members;
    static const json kAnything = true;
    for (auto it = properties.begin(); it != properties.end(); ++it) members.push_back({it.key(), &it.value()});
    for (const auto& r : required)
      if (!properties.contains(r)) members.push_back({r, &kAnything});
    const json* additional = schema.contains("additionalProperties") ? &schema["additionalProperties"] : nullptr;
    // Without declared properties an object is open unless additionalProperties says otherwise;
    // with them, extra keys are generated only when additionalProperties asks for them.
    bool extras = members.empty() ? !(additional && additional->is_boolean() && !additional->get<bool>())
                                  : (additional && !(additional->is_boolean() && !additional->get<bool>()));
    if (members.empty() && extras && (!additional || additional->is_boolean())) return "object";

    std::string extra_member;
    if (extras) {
      std::string value = (!additional || additional->is_boolean()) ? "value" : visit(*additional, name + "-additional", depth + 1);
      std::string key = members.empty() ? "string" : excluded_key(members, name);
      extra_member = new_rule(name + "-extra", key + " ws \":\" ws " + value + " ws");
    }
    // Rules after[i]: properties i.. once at least one member was written (each starts with a
    // comma); first[i]: the same when none was, so the first member has no comma.
    const size_t n = members.size();
    std::vector<std::string> after(n + 1), first(n + 1);
    std::string extra_after = extras ? new_rule(name + "-more", "( \",\" ws " + extra_member + " )*") : "";
    after[n] = extras ? extra_after : "";
    first[n] = extras ? "( " + extra_member + " " + extra_after + " )?" : "";
    for (size_t i = n; i-- > 0;) {
      const auto& [key, subschema] = members[i];
      std::string value = visit(*subschema, name + "-" + key, depth + 1);
      std::string member = gbnf_literal(dump_json(json(key))) + " ws \":\" ws " + value + " ws";
      const bool is_required = required.count(key) > 0;
      std::string rest = after[i + 1].empty() ? "" : " " + after[i + 1];
      std::string with_comma = "\",\" ws " + member + rest;
      if (is_required) {
        after[i] = new_rule(name + "-after-" + key, with_comma);
        first[i] = member + rest;
      } else {
        after[i] = new_rule(name + "-after-" + key, with_comma + (after[i + 1].empty() ? " | \"\"" : " | " + after[i + 1]));
        first[i] = new_rule(name + "-first-" + key, member + rest + (first[i + 1].empty() ? " | \"\"" : " | " + first[i + 1]));
      }
    }
    return new_rule(name, "\"{\" ws " + (first[0].empty() ? "" : first[0] + " ") + "\"}\"");
  }

  // A key string that is none of the declared names (escapes left out, so "\u0061" cannot
  // spell "a"): a trie of the names by code point, each node allowing any other next character.
  std::string excluded_key(const std::vector<std::pair<std::string, const json*>>& members, const std::string& name) {
    struct Node {
      std::map<uint32_t, size_t> children;
      bool word = false;
    };
    std::vector<Node> trie(1);
    for (const auto& member : members) {
      size_t at = 0;
      for (uint32_t cp : code_points(member.first)) {
        auto found = trie[at].children.find(cp);
        if (found == trie[at].children.end()) {
          trie.push_back({});
          found = trie[at].children.emplace(cp, trie.size() - 1).first;
        }
        at = found->second;
      }
      trie[at].word = true;
    }
    const std::string rest = new_rule(name + "-key-rest", "[^\"\\\\\\x00-\\x1F]* \"\\\"\"");
    std::vector<std::string> node_rules(trie.size());
    for (size_t i = 0; i < trie.size(); ++i) node_rules[i] = reserve_name(name + "-key");
    for (size_t i = 0; i < trie.size(); ++i) {
      std::string others = "[^\"\\\\\\x00-\\x1F";
      for (const auto& child : trie[i].children) {
        append_class_char(others, child.first);
      }
      others += "]";
      std::vector<std::string> alts{others + " " + rest};
      for (const auto& [cp, child] : trie[i].children) alts.push_back(gbnf_literal(utf8(cp)) + " " + node_rules[child]);
      if (!trie[i].word) alts.push_back("\"\\\"\"");
      rules_.push_back({node_rules[i], join_alternatives(alts)});
    }
    return "\"\\\"\" " + node_rules[0];
  }

  static std::vector<uint32_t> code_points(const std::string& text) {
    std::vector<uint32_t> out;
    const auto* p = reinterpret_cast<const unsigned char*>(text.data());
    for (size_t i = 0; i < text.size();) {
      if (valid_utf8_length(p + i, text.size() - i) == 0) throw Error("JSON Schema: a property name is not valid UTF-8");
      size_t length = 0;
      out.push_back(decode_utf8(p + i, length));
      i += length;
    }
    return out;
  }

  static std::string utf8(uint32_t cp) {
    std::string out;
    append_utf8(out, cp);
    return out;
  }

  std::string array_rule(const json& schema, const std::string& name, int depth) {
    if (schema.contains("uniqueItems") && schema["uniqueItems"] == true) unsupported("uniqueItems");
    std::vector<std::string> prefix;
    if (schema.contains("prefixItems")) {
      if (!schema["prefixItems"].is_array()) throw Error("JSON Schema: prefixItems must be an array");
      int i = 0;
      for (const auto& item : schema["prefixItems"]) prefix.push_back(visit(item, name + "-" + std::to_string(i++), depth + 1));
    }
    bool more_allowed = true;
    std::string item = "value";
    if (schema.contains("items")) {
      const json& items = schema["items"];
      if (items.is_boolean() && !items.get<bool>()) {
        more_allowed = false;
      } else if (items.is_array()) {
        unsupported("items as an array (use prefixItems)");
      } else {
        item = visit(items, name + "-item", depth + 1);
      }
    }
    const uint32_t min = count_keyword(schema, "minItems", 0);
    const uint32_t max = count_keyword(schema, "maxItems", kMaxRepetition);
    const bool bounded = schema.contains("maxItems");
    if (max < min) throw Error("JSON Schema: maxItems below minItems");
    const uint32_t k = uint32_t(prefix.size());
    if (k > 0 && max < k) unsupported("maxItems below the number of prefixItems");
    if (!more_allowed && min > k) throw Error("JSON Schema: minItems above the items allowed");
    std::string body;
    if (k == 0) {
      if (bounded && max == 0) return new_rule(name, "\"[\" ws \"]\"");
      uint32_t lo = min > 0 ? min - 1 : 0;
      std::string count = bounded ? "{" + std::to_string(lo) + "," + std::to_string(max - 1) + "}" : "{" + std::to_string(lo) + ",}";
      if (!bounded && lo == 0) count = "*";
      body = item + " ws ( \",\" ws " + item + " ws )" + count;
      if (min == 0) body = "( " + body + " )?";
    } else {
      for (uint32_t i = 0; i < k; ++i) body += (i ? "\",\" ws " : "") + prefix[i] + " ws ";
      if (more_allowed) {
        uint32_t lo = min > k ? min - k : 0;
        std::string count = bounded ? "{" + std::to_string(lo) + "," + std::to_string(max - k) + "}" : "{" + std::to_string(lo) + ",}";
        if (!(bounded && max == k)) body += "( \",\" ws " + item + " ws )" + count;
      }
    }
    return new_rule(name, "\"[\" ws " + body + " \"]\"");
  }

  const json& root_;
  std::vector<std::pair<std::string, std::string>> rules_;
  std::set<std::string> used_names_, format_rules_;
  std::map<std::string, std::string> ref_rules_;
};

}  // namespace

std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema) { return SchemaCompiler(schema).compile(); }

std::string free_json_gbnf(bool object_only) {
  return std::string("root ::= ") + (object_only ? "object" : "value") + "\n" + kJsonPrimitives;
}

Grammar compile_json_schema(const nlohmann::ordered_json& schema) { return parse_gbnf(json_schema_to_gbnf(schema)); }

Grammar compile_json_schema(std::string_view schema_text) {
  json schema;
  try {
    schema = json::parse(schema_text);
  } catch (const json::parse_error& e) {
    throw Error(std::string("JSON Schema: not valid JSON: ") + e.what());
  }
  return compile_json_schema(schema);
}

}  // namespace inkling::grammar
