// Malformed grammars and schemas (they come from requests) only ever raise inkling::Error:
// random mutations of valid inputs, run for a fixed count with a fixed seed.
#include <gtest/gtest.h>

#include <random>

#include "runtime/grammar/json_schema.h"
#include "runtime/grammar/matcher.h"
#include "tensor/error.h"

namespace inkling::grammar {
namespace {

std::string mutate(std::string text, std::mt19937_64& rng) {
  static const std::string kAlphabet = "()[]{}|*+?^-\\\"'.,:=#\n ab09xuU";
  const int edits = 1 + int(rng() % 4);
  for (int e = 0; e < edits && !text.empty(); ++e) {
    size_t at = rng() % text.size();
    switch (rng() % 4) {
      case 0: text.erase(at, 1 + rng() % 3); break;
      case 1: text.insert(at, 1, kAlphabet[rng() % kAlphabet.size()]); break;
      case 2: text[at] = char(rng() % 256); break;
      default: text.insert(at, text.substr(rng() % text.size(), rng() % 8)); break;
    }
  }
  return text;
}

// Parses (and, when it parses, matches a little): anything but an inkling::Error is a failure.
void exercise(const std::string& gbnf) {
  try {
    auto grammar = std::make_shared<Grammar>(parse_gbnf(gbnf));
    GrammarMatcher matcher(grammar, nullptr);
    matcher.accept_bytes(matcher.shortest_completion());
    EXPECT_TRUE(matcher.can_end()) << gbnf;
  } catch (const Error&) {
  }
}

TEST(Robustness, MutatedGbnfOnlyRaisesErrors) {
  const std::vector<std::string> seeds = {
      free_json_gbnf(false),
      "root ::= expr\nexpr ::= term ([-+] term)*\nterm ::= [0-9]+ | \"(\" expr \")\"\n",
      "root ::= [^\\x00-\\x1F\"]{2,5} (\"a\" | [α-ω]){0,3} .\n",
  };
  std::mt19937_64 rng(20);
  for (int i = 0; i < 3000; ++i) exercise(mutate(seeds[size_t(i) % seeds.size()], rng));
}

TEST(Robustness, MutatedSchemasOnlyRaiseErrors) {
  const std::vector<std::string> seeds = {
      R"({"type":"object","properties":{"a":{"type":"integer","minimum":-5,"maximum":900},"b":{"type":"string","maxLength":3},
          "c":{"enum":["x",1,null]},"d":{"type":"array","items":{"$ref":"#/$defs/n"},"maxItems":2}},"required":["a"],
          "$defs":{"n":{"anyOf":[{"type":"null"},{"type":"string","format":"date"}]}},"additionalProperties":{"type":"boolean"}})",
      R"({"type":"string","pattern":"^[A-Z]{2}(?:-\\d{1,3})?$"})",
      R"({"allOf":[{"properties":{"k":{"const":true}}},{"required":["k"]}],"nullable":true})",
  };
  std::mt19937_64 rng(21);
  size_t compiled = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string text = mutate(seeds[size_t(i) % seeds.size()], rng);
    try {
      exercise(json_schema_to_gbnf(nlohmann::ordered_json::parse(text)));
      ++compiled;
    } catch (const nlohmann::json::parse_error&) {  // not JSON: the caller's parse reports it
    } catch (const Error&) {
    }
  }
  EXPECT_GT(compiled, 100u);  // the mutations must reach the compiler, not only the JSON parser
}

// Replaces random members of valid schemas with values of the wrong type or out of range.
TEST(Robustness, RetypedSchemaMembersOnlyRaiseErrors) {
  using json = nlohmann::ordered_json;
  const json seed = json::parse(R"({"type":"object","properties":{"a":{"type":"integer","minimum":-5,"maximum":900},
      "b":{"type":["string","null"],"maxLength":3,"nullable":true},"c":{"enum":["x",1,null]},"e":{"format":"uuid"},
      "d":{"type":"array","items":{"$ref":"#/$defs/n"},"prefixItems":[{"const":1}],"minItems":1,"maxItems":2}},
      "required":["a"],"$defs":{"n":{"anyOf":[{"type":"null"},{"type":"string","pattern":"^a+$"}]}},
      "allOf":[{"required":["b"]}],"additionalProperties":{"type":"boolean"}})");
  const std::vector<json> values = {5, -1, 1e30, 0.5, "x", "", json::array(), json::array({1, "a"}), json::object(),
                                    json{{"type", "string"}}, true, false, nullptr, 100000, "#/nowhere", "^(", "{"};
  std::vector<json::json_pointer> pointers;
  auto collect = [&](auto&& self, const json& node, const json::json_pointer& at) -> void {
    pointers.push_back(at);
    if (node.is_object())
      for (auto it = node.begin(); it != node.end(); ++it) self(self, it.value(), at / it.key());
    if (node.is_array())
      for (size_t i = 0; i < node.size(); ++i) self(self, node[i], at / i);
  };
  collect(collect, seed, json::json_pointer());
  std::mt19937_64 rng(22);
  for (int i = 0; i < 3000; ++i) {
    json schema = seed;
    for (int k = 0; k < 1 + int(rng() % 3); ++k) {
      const json::json_pointer& at = pointers[rng() % pointers.size()];
      if (schema.contains(at)) schema[at] = values[rng() % values.size()];  // an earlier edit may have removed it
    }
    try {
      exercise(json_schema_to_gbnf(schema));
    } catch (const Error&) {
    }
  }
}

}  // namespace
}  // namespace inkling::grammar
