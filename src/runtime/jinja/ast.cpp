#include "runtime/jinja/ast.h"

namespace inkling::jinja {

void Expr::release_children(std::vector<ExprPtr>& out) {
  for (ExprPtr* child : {&a, &b, &c, &d, &star, &dstar})
    if (*child) out.push_back(std::move(*child));
  for (auto& e : args) out.push_back(std::move(e));
  for (auto& e : values) out.push_back(std::move(e));
  for (auto& [key, e] : kwargs) out.push_back(std::move(e));
  args.clear();
  values.clear();
  kwargs.clear();
}

// Each node popped here has its children moved out before it dies, so its own destructor finds
// nothing to recurse into.
Expr::~Expr() {
  std::vector<ExprPtr> pending;
  release_children(pending);
  while (!pending.empty()) {
    ExprPtr e = std::move(pending.back());
    pending.pop_back();
    if (e) e->release_children(pending);
  }
}

void Stmt::release_children(std::vector<StmtPtr>& statements, std::vector<ExprPtr>& expressions) {
  for (ExprPtr* e : {&expr, &cond, &filter})
    if (*e) expressions.push_back(std::move(*e));
  for (auto& [condition, branch] : branches) {
    if (condition) expressions.push_back(std::move(condition));
    for (auto& s : branch) statements.push_back(std::move(s));
  }
  for (Body* b : {&body, &else_body})
    for (auto& s : *b) statements.push_back(std::move(s));
  for (auto& [name, e] : params)
    if (e) expressions.push_back(std::move(e));
  branches.clear();
  body.clear();
  else_body.clear();
  params.clear();
}

Stmt::~Stmt() {
  std::vector<StmtPtr> statements;
  std::vector<ExprPtr> expressions;
  release_children(statements, expressions);
  while (!statements.empty()) {
    StmtPtr s = std::move(statements.back());
    statements.pop_back();
    if (s) s->release_children(statements, expressions);
  }
  // Expressions die here, each through Expr's own iterative destructor.
}

}  // namespace inkling::jinja
