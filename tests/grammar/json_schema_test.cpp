// JSON Schema to grammar: what each keyword accepts and refuses.
#include <gtest/gtest.h>

#include <memory>

#include "runtime/grammar/json_schema.h"
#include "runtime/grammar/matcher.h"
#include "tensor/error.h"

namespace inkling::grammar {
namespace {

using json = nlohmann::ordered_json;

std::shared_ptr<const Grammar> schema_grammar(const json& schema) {
  return std::make_shared<Grammar>(compile_json_schema(schema));
}

struct Checker {
  explicit Checker(const json& schema) : schema(schema), grammar(schema_grammar(schema)) {}
  bool operator()(std::string_view text) const { return grammar_accepts(grammar, text); }
  json schema;
  std::shared_ptr<const Grammar> grammar;
};

void expect_refused(const json& schema, std::string_view fragment) {
  try {
    compile_json_schema(schema);
    ADD_FAILURE() << "no error for " << schema.dump();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(JsonSchema, Primitives) {
  Checker s(json{{"type", "string"}});
  EXPECT_TRUE(s(R"("hello")"));
  EXPECT_TRUE(s(R"("esc \" \\ \n \u00e9 ü")"));
  EXPECT_FALSE(s(R"("bad \x")"));
  EXPECT_FALSE(s("\"raw\ncontrol\""));
  EXPECT_FALSE(s("hello"));
  Checker n(json{{"type", "number"}});
  for (const char* ok : {"0", "-1", "3.25", "1e10", "-2.5E-3"}) EXPECT_TRUE(n(ok)) << ok;
  for (const char* bad : {"01", "1.", ".5", "+1", "1e", "--1"}) EXPECT_FALSE(n(bad)) << bad;
  Checker i(json{{"type", "integer"}});
  EXPECT_TRUE(i("-42"));
  EXPECT_FALSE(i("4.2"));
  Checker b(json{{"type", "boolean"}});
  EXPECT_TRUE(b("true"));
  EXPECT_FALSE(b("null"));
  Checker z(json{{"type", "null"}});
  EXPECT_TRUE(z("null"));
  Checker either(json{{"type", json::array({"string", "null"})}});
  EXPECT_TRUE(either("null"));
  EXPECT_TRUE(either(R"("x")"));
  EXPECT_FALSE(either("1"));
}

TEST(JsonSchema, ObjectsRequiredOptionalAndAdditional) {
  Checker s(json::parse(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"boolean"}},
                            "required":["b"],"additionalProperties":false})"));
  EXPECT_TRUE(s(R"({"b":"x"})"));
  EXPECT_TRUE(s(R"({"a":1,"b":"x"})"));
  EXPECT_TRUE(s(R"({"a": 1, "b": "x", "c": true})"));
  EXPECT_TRUE(s("{\n  \"b\": \"x\",\n  \"c\": false\n}"));
  EXPECT_FALSE(s(R"({})"));
  EXPECT_FALSE(s(R"({"a":1})"));
  EXPECT_FALSE(s(R"({"b":"x",})"));
  EXPECT_FALSE(s(R"({,"b":"x"})"));
  EXPECT_FALSE(s(R"({"b":"x","d":1})"));
  EXPECT_FALSE(s(R"({"b":1})"));
  Checker open(json::parse(R"({"type":"object","properties":{"id":{"type":"integer"}},"required":["id"],
                               "additionalProperties":{"type":"string"}})"));
  EXPECT_TRUE(open(R"({"id":1,"x":"y","zz":"w"})"));
  EXPECT_FALSE(open(R"({"id":1,"x":2})"));
  EXPECT_FALSE(open(R"({"id":1,"id":"again"})"));  // an extra key never repeats a declared one
  EXPECT_TRUE(open(R"({"id":1,"i":"y","idx":"z"})"));
  Checker any_object(json{{"type", "object"}});
  EXPECT_TRUE(any_object(R"({"k":[1,{"n":null}],"s":"t"})"));
  EXPECT_FALSE(any_object("[]"));
  Checker empty(json::parse(R"({"type":"object","additionalProperties":false})"));
  EXPECT_TRUE(empty("{}"));
  EXPECT_FALSE(empty(R"({"a":1})"));
}

TEST(JsonSchema, Arrays) {
  Checker s(json::parse(R"({"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":3})"));
  EXPECT_FALSE(s("[1]"));
  EXPECT_TRUE(s("[1,2]"));
  EXPECT_TRUE(s("[1, 2, 3]"));
  EXPECT_FALSE(s("[1,2,3,4]"));
  EXPECT_FALSE(s("[1,\"a\"]"));
  Checker any(json::parse(R"({"type":"array"})"));
  EXPECT_TRUE(any("[]"));
  EXPECT_TRUE(any("[1, \"a\", [null]]"));
  Checker tuple(json::parse(R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false})"));
  EXPECT_TRUE(tuple(R"(["a", 1])"));
  EXPECT_FALSE(tuple(R"(["a", 1, 2])"));
  EXPECT_FALSE(tuple(R"([1, "a"])"));
  Checker tuple_more(json::parse(R"({"prefixItems":[{"const":"op"}],"items":{"type":"number"},"maxItems":3})"));
  EXPECT_TRUE(tuple_more(R"(["op", 1.5, 2])"));
  EXPECT_FALSE(tuple_more(R"(["op", 1, 2, 3])"));
}

TEST(JsonSchema, EnumConstAnyOf) {
  Checker e(json::parse(R"({"enum":["red","green",3,null,{"a":[1]}]})"));
  EXPECT_TRUE(e(R"("green")"));
  EXPECT_TRUE(e("3"));
  EXPECT_TRUE(e("null"));
  EXPECT_TRUE(e(R"({"a":[1]})"));
  EXPECT_FALSE(e(R"("blue")"));
  Checker c(json::parse(R"({"const":"fixed"})"));
  EXPECT_TRUE(c(R"("fixed")"));
  EXPECT_FALSE(c(R"("fixe")"));
  Checker a(json::parse(R"({"anyOf":[{"type":"integer"},{"type":"object","properties":{"x":{"type":"string"}},"required":["x"]}]})"));
  EXPECT_TRUE(a("5"));
  EXPECT_TRUE(a(R"({"x":"y"})"));
  EXPECT_FALSE(a(R"("s")"));
  Checker o(json::parse(R"({"oneOf":[{"type":"boolean"},{"type":"null"}]})"));
  EXPECT_TRUE(o("false"));
  EXPECT_TRUE(o("null"));
  Checker all(json::parse(R"({"allOf":[{"properties":{"a":{"type":"integer"}},"required":["a"]},
                                       {"properties":{"b":{"type":"integer"}},"required":["b"]}]})"));
  EXPECT_TRUE(all(R"({"a":1,"b":2})"));
  EXPECT_FALSE(all(R"({"a":1})"));
  // additionalProperties only sees the properties beside it: {"a":1,"b":2} is invalid here, and
  // merging the members would have admitted it (the validity test caught exactly that).
  expect_refused(json::parse(R"({"allOf":[{"properties":{"a":{"type":"integer"}}},{"properties":{"b":{"type":"integer"}}}],
                                "additionalProperties":false})"), "additionalProperties beside allOf");
}

TEST(JsonSchema, RefsAndRecursion) {
  Checker tree(json::parse(R"({"$ref":"#/$defs/node","$defs":{"node":{"type":"object","properties":{
      "value":{"type":"integer"},"children":{"type":"array","items":{"$ref":"#/$defs/node"}}},
      "required":["value"],"additionalProperties":false}}})"));
  EXPECT_TRUE(tree(R"({"value":1})"));
  EXPECT_TRUE(tree(R"({"value":1,"children":[{"value":2,"children":[{"value":3}]},{"value":4}]})"));
  EXPECT_FALSE(tree(R"({"value":1,"children":[{"children":[]}]})"));
  Checker root(json::parse(R"({"type":"array","items":{"anyOf":[{"type":"integer"},{"$ref":"#"}]}})"));
  EXPECT_TRUE(root("[1,[2,[3]],[]]"));
  Checker definitions(json::parse(R"({"definitions":{"id":{"type":"string","format":"uuid"}},"$ref":"#/definitions/id"})"));
  EXPECT_TRUE(definitions(R"("123e4567-e89b-12d3-a456-426614174000")"));
  expect_refused(json::parse(R"({"$ref":"#/$defs/missing"})"), "does not resolve");
  expect_refused(json::parse(R"({"$ref":"https://example.com/schema.json"})"), "only references inside");
  // A schema that only refers to itself has no finite value.
  expect_refused(json::parse(R"({"type":"object","properties":{"self":{"$ref":"#"}},"required":["self"]})"), "cannot terminate");
}

TEST(JsonSchema, StringLengthsAndFormats) {
  Checker s(json::parse(R"({"type":"string","minLength":2,"maxLength":4})"));
  EXPECT_FALSE(s(R"("a")"));
  EXPECT_TRUE(s(R"("ab")"));
  EXPECT_TRUE(s(R"("a\nüc")"));
  EXPECT_FALSE(s(R"("abcde")"));
  Checker date(json{{"type", "string"}, {"format", "date"}});
  EXPECT_TRUE(date(R"("2024-02-28")"));
  EXPECT_TRUE(date(R"("1999-12-31")"));
  EXPECT_FALSE(date(R"("2024-02-30")"));
  EXPECT_FALSE(date(R"("2024-13-01")"));
  EXPECT_FALSE(date(R"("2024-04-31")"));
  Checker time(json{{"type", "string"}, {"format", "time"}});
  EXPECT_TRUE(time(R"("23:59:59Z")"));
  EXPECT_TRUE(time(R"("08:30:00.123+02:00")"));
  EXPECT_FALSE(time(R"("24:00:00Z")"));
  EXPECT_FALSE(time(R"("12:00:00")"));
  Checker dt(json{{"type", "string"}, {"format", "date-time"}});
  EXPECT_TRUE(dt(R"("2024-01-15T10:20:30Z")"));
  EXPECT_FALSE(dt(R"("2024-01-15 10:20:30Z")"));
  Checker uuid(json{{"type", "string"}, {"format", "uuid"}});
  EXPECT_TRUE(uuid(R"("123e4567-e89b-12d3-a456-426614174000")"));
  EXPECT_FALSE(uuid(R"("123e4567e89b12d3a456426614174000")"));
  Checker email(json{{"type", "string"}, {"format", "email"}});
  EXPECT_TRUE(email(R"("ann.lee+tag@mail.example.com")"));
  EXPECT_FALSE(email(R"("ann.example.com")"));
  expect_refused(json{{"type", "string"}, {"format", "uri"}}, "format \"uri\" is not supported");
}

TEST(JsonSchema, Patterns) {
  Checker zip(json{{"type", "string"}, {"pattern", "^[0-9]{5}(-[0-9]{4})?$"}});
  EXPECT_TRUE(zip(R"("12345")"));
  EXPECT_TRUE(zip(R"("12345-6789")"));
  EXPECT_FALSE(zip(R"("1234")"));
  EXPECT_FALSE(zip(R"("12345-")"));
  Checker code(json{{"type", "string"}, {"pattern", R"(^[A-Z]{2}\d+\.(?:x|yz)*$)"}});
  EXPECT_TRUE(code(R"("AB12.xyzx")"));
  EXPECT_FALSE(code(R"("Ab12.")"));
  // Unanchored patterns match anywhere in the string.
  Checker contains(json{{"type", "string"}, {"pattern", "cat|dog"}});
  EXPECT_TRUE(contains(R"("a dog!")"));
  EXPECT_FALSE(contains(R"("a bird")"));
  // Characters JSON escapes are produced escaped.
  Checker quote(json{{"type", "string"}, {"pattern", "^\"[^\"]*\"$"}});
  EXPECT_TRUE(quote(R"("\"hi\"")"));
  EXPECT_FALSE(quote(R"(""hi"")"));
  // GBNF every reader takes alike: no \xHH followed by a hex digit (xgrammar reads them all),
  // no \u with leading zeros (llguidance drops them), raw UTF-8 above U+009F.
  const json snake = {{"type", "string"}, {"pattern", "^[_a-f\u00e9\u0101]+$"}};
  const std::string text = json_schema_to_gbnf(snake);
  EXPECT_NE(text.find("[\\x5F\\x61-f\u00e9\u0101]"), std::string::npos) << text;
  EXPECT_EQ(text.find("\\u0"), std::string::npos) << text;
  EXPECT_NE(json_schema_to_gbnf(json{{"const", "\u0001a"}}).find(R"("\"\\u0001a\"")"), std::string::npos);
  Checker snake_case(snake);
  EXPECT_TRUE(snake_case("\"_ab_\u00e9\u0101\""));
  EXPECT_FALSE(snake_case(R"("_ag")"));
  expect_refused(json{{"type", "string"}, {"pattern", "(?=a)a"}}, "lookaround");
  expect_refused(json{{"type", "string"}, {"pattern", R"((a)\1)"}}, "backreferences");
  expect_refused(json{{"type", "string"}, {"pattern", R"(\bword)"}}, "word boundaries");
  expect_refused(json{{"type", "string"}, {"pattern", "a(b"}}, "missing ')'");
}

TEST(JsonSchema, IntegerRangesAreExact) {
  const std::vector<std::pair<json, json>> bounds = {
      {0, 0}, {0, 9}, {1, 10}, {-5, 5}, {7, 1234}, {-1200, -13}, {99, 100}, {100, 999}, {5, nullptr},
      {-37, nullptr}, {nullptr, 250}, {nullptr, -8}, {0, nullptr}, {123, 4567}};
  for (const auto& [lo, hi] : bounds) {
    json schema{{"type", "integer"}};
    if (!lo.is_null()) schema["minimum"] = lo;
    if (!hi.is_null()) schema["maximum"] = hi;
    Checker check(schema);
    for (int n = -1500; n <= 5000; ++n) {
      bool inside = (lo.is_null() || n >= lo.get<int>()) && (hi.is_null() || n <= hi.get<int>());
      ASSERT_EQ(check(std::to_string(n)), inside) << schema.dump() << " n=" << n;
    }
    EXPECT_FALSE(check("007"));
  }
  Checker exclusive(json::parse(R"({"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":10})"));
  EXPECT_FALSE(exclusive("0"));
  EXPECT_TRUE(exclusive("1"));
  EXPECT_TRUE(exclusive("9"));
  EXPECT_FALSE(exclusive("10"));
  expect_refused(json::parse(R"({"type":"integer","minimum":5,"maximum":4})"), "no integer");
}

TEST(JsonSchema, NumberBounds) {
  Checker unit(json::parse(R"({"type":"number","minimum":0,"maximum":1})"));
  for (const char* ok : {"0", "0.5", "0.999", "1", "1.0", "1.000"}) EXPECT_TRUE(unit(ok)) << ok;
  for (const char* bad : {"-0.1", "1.5", "2", "1.01"}) EXPECT_FALSE(unit(bad)) << bad;
  Checker positive(json::parse(R"({"type":"number","minimum":0})"));
  EXPECT_TRUE(positive("12.5"));
  EXPECT_FALSE(positive("-3"));
  expect_refused(json::parse(R"({"type":"number","minimum":0.5})"), "minimum on a number");
}

TEST(JsonSchema, UnsupportedAndMalformed) {
  for (const char* keyword : {"not", "if", "patternProperties", "multipleOf", "minProperties", "contains"}) {
    json schema{{"type", "object"}, {keyword, json::object()}};
    expect_refused(schema, std::string("\"") + keyword + "\" is not supported");
  }
  expect_refused(json::parse(R"({"type":"array","uniqueItems":true})"), "uniqueItems");
  expect_refused(json::parse(R"({"type":"wat"})"), "unknown type");
  expect_refused(json::parse("false"), "matches nothing");
  expect_refused(json::parse("[1]"), "must be an object");
  expect_refused(json::parse(R"({"enum":[]})"), "non-empty");
  expect_refused(json::parse(R"({"type":"string","maxLength":100000})"), "maxLength above");
  EXPECT_THROW(compile_json_schema(std::string_view("{not json")), Error);
  // Deep nesting is an error, not a stack overflow.
  json deep = json{{"type", "integer"}};
  for (int i = 0; i < 200; ++i) deep = json{{"type", "array"}, {"items", deep}};
  expect_refused(deep, "nested deeper");
}

TEST(JsonSchema, FreeJson) {
  auto object_only = std::make_shared<Grammar>(parse_gbnf(free_json_gbnf(true)));
  EXPECT_TRUE(grammar_accepts(object_only, R"({"a": [1, 2.5, "x", {"b": null}], "c": true})"));
  EXPECT_FALSE(grammar_accepts(object_only, "[1]"));
  auto any = std::make_shared<Grammar>(parse_gbnf(free_json_gbnf(false)));
  EXPECT_TRUE(grammar_accepts(any, "[1]"));
  EXPECT_TRUE(grammar_accepts(any, R"("s")"));
}

}  // namespace
}  // namespace inkling::grammar
