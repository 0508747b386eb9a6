// Recursive-descent parser following Jinja2's grammar and operator precedence.
#pragma once

#include <string>
#include <vector>

#include "runtime/jinja/ast.h"
#include "runtime/jinja/lexer.h"

namespace inkling::jinja {

// Throws inkling::Error "<name>:<line>: template syntax error: ..." on bad input.
Body parse_tokens(const std::vector<Token>& tokens, const std::string& name);

}  // namespace inkling::jinja
