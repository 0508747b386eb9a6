// Parse tree for templates: plain data, built once by the parser and walked by the
// renderer for every render. Nodes free their subtrees iteratively: a template is untrusted
// input, and a 100,000-term chain must not overflow the stack in a destructor.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/jinja/value.h"

namespace inkling::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprType {
  kLiteral, kName, kList, kTuple, kDict, kUnary, kBinary, kAnd, kOr, kCompare, kCond,
  kGetAttr, kGetItem, kSlice, kCall, kFilter, kTest
};

struct Expr {
  Expr() = default;
  Expr(const Expr&) = delete;
  Expr& operator=(const Expr&) = delete;
  ~Expr();
  // Moves every child node into `out` (used by the iterative destructors).
  void release_children(std::vector<ExprPtr>& out);

  ExprType type;
  int line = 0;
  Value value;                 // kLiteral
  std::string name;            // kName, attribute, filter/test name, operator
  ExprPtr a, b, c;             // operands; kSlice: start, stop, step in b/c/d
  ExprPtr d;
  std::vector<ExprPtr> args;   // items, dict keys, call/filter/test args, compare operands
  std::vector<ExprPtr> values; // dict values
  std::vector<std::string> ops;  // kCompare operators
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  ExprPtr star, dstar;         // *args, **kwargs at call sites
};

enum class StmtType {
  kOutput, kEmit, kIf, kFor, kSet, kSetBlock, kMacro, kCallBlock, kFilterBlock, kBreak,
  kContinue, kWith, kScope
};

struct Stmt {
  Stmt() = default;
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  ~Stmt();
  void release_children(std::vector<StmtPtr>& statements, std::vector<ExprPtr>& expressions);

  StmtType type;
  int line = 0;
  std::string text;                                  // kOutput; kMacro name
  ExprPtr expr;                                      // emit/iterable/value/call
  ExprPtr cond;                                      // for-loop filter
  ExprPtr filter;                                    // filter chain (base is null)
  std::vector<std::pair<ExprPtr, Body>> branches;    // kIf
  Body body, else_body;
  std::vector<std::string> targets;                  // names bound by for/set
  std::string attr;                                  // set ns.attr
  bool recursive = false;
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro params / with assignments
};

}  // namespace inkling::jinja
