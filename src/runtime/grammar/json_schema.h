// JSON Schema to grammar: the schema becomes GBNF text (readable, and the same path as a
// user's grammar), then a Grammar. docs/grammar.md lists the keywords supported; any other
// assertion keyword is refused with an inkling::Error naming it, never ignored.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "runtime/grammar/grammar.h"

namespace inkling::grammar {

// GBNF for values valid under `schema` (root rule "root"). Properties are generated in the
// order the schema lists them, so it is an ordered_json.
std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema);
// GBNF for any JSON value; with `object_only`, the top level must be an object (json_object).
std::string free_json_gbnf(bool object_only);

Grammar compile_json_schema(const nlohmann::ordered_json& schema);
// Parses the schema text first (an Error names a JSON syntax problem).
Grammar compile_json_schema(std::string_view schema_text);

// GBNF for strings matching the regular expression (ECMA-262 subset: docs/grammar.md), as the
// contents of a JSON string: characters that JSON escapes are written escaped.
std::string regex_to_gbnf_body(std::string_view pattern);

// GBNF text that every reader takes the same way (ours, llama.cpp's, llguidance's, xgrammar's):
// \xHH below U+00A0, raw UTF-8 above (llguidance drops the leading zeros of \u0041 and then
// fails to parse it), and a hex digit after \xHH escaped too (xgrammar reads every hex digit
// after \x, so "\x5Fa" would be one code point there).
// One character of a [class] (the caller writes '-' and the brackets):
void append_class_char(std::string& out, uint32_t cp);
// One byte of a "literal" (the caller writes the quotes):
void append_literal_byte(std::string& out, unsigned char c);

}  // namespace inkling::grammar
