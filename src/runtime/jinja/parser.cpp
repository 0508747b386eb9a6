#include "runtime/jinja/parser.h"

#include <cerrno>
#include <cstdlib>
#include <initializer_list>

#include "tensor/error.h"
#include "tensor/stack_guard.h"

namespace inkling::jinja {
namespace {

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const std::string& name) : toks_(tokens), name_(name) {}

  Body parse_template() {
    StackScope scope;
    Body body = subparse({});
    if (cur().type != TokenType::kEof) fail("unexpected tag '" + cur().text + "'");
    return body;
  }

 private:
  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(size_t n = 1) const { return toks_[std::min(pos_ + n, toks_.size() - 1)]; }
  void advance() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }
  bool is_op(const char* op) const { return cur().type == TokenType::kOp && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == TokenType::kName && cur().text == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    advance();
    return true;
  }
  [[noreturn]] void fail(const std::string& msg, int line = -1) const {
    throw Error(source_location(name_, line < 0 ? cur().line : line) + ": template syntax error: " + msg);
  }
  std::string describe(const Token& t) const {
    switch (t.type) {
      case TokenType::kEof: return "end of template";
      case TokenType::kBlockEnd: return "end of statement block";
      case TokenType::kVarEnd: return "end of print statement";
      default: return "'" + t.text + "'";
    }
  }
  // Every cycle of the recursive descent passes through here.
  void check_nesting() const {
    if (stack_exhausted()) fail("the template nests blocks or expressions too deeply");
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(std::string("expected '") + op + "', got " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().type != TokenType::kName) fail("expected a name, got " + describe(cur()));
    std::string n = cur().text;
    advance();
    return n;
  }
  void expect_block_end() {
    if (cur().type != TokenType::kBlockEnd) fail("expected end of statement block, got " + describe(cur()));
    advance();
  }

  // Python's integers are unbounded and ours are 64-bit: a literal beyond that is an error, not
  // a silently saturated value.
  int64_t int_literal(const std::string& digits) const {
    std::string plain;
    for (char c : digits)
      if (c != '_') plain += c;
    errno = 0;
    long long v = std::strtoll(plain.c_str(), nullptr, 10);
    if (errno == ERANGE) fail("integer literal " + digits + " does not fit in 64 bits");
    return v;
  }

  ExprPtr node(ExprType type, int line) {
    auto e = std::make_unique<Expr>();
    e->type = type;
    e->line = line;
    return e;
  }

  // Parses statements until a block tag whose name is in `ends`; leaves pos_ at that name.
  Body subparse(std::initializer_list<const char*> ends) {
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == TokenType::kEof) {
        if (ends.size() > 0) {
          std::string closer = *(ends.end() - 1);  // the end... tag is listed last
          for (const char* e : ends)
            if (std::string(e).rfind("end", 0) == 0) closer = e;
          fail("unexpected end of template, expected '" + closer + "'", open_line_);
        }
        return body;
      }
      if (t.type == TokenType::kData) {
        auto s = std::make_unique<Stmt>();
        s->type = StmtType::kOutput;
        s->line = t.line;
        s->text = t.text;
        body.push_back(std::move(s));
        advance();
      } else if (t.type == TokenType::kVarBegin) {
        advance();
        auto s = std::make_unique<Stmt>();
        s->type = StmtType::kEmit;
        s->line = t.line;
        s->expr = parse_tuple();
        if (cur().type != TokenType::kVarEnd) fail("expected end of print statement, got " + describe(cur()));
        advance();
        body.push_back(std::move(s));
      } else if (t.type == TokenType::kBlockBegin) {
        advance();
        if (cur().type != TokenType::kName) fail("tag name expected");
        for (const char* e : ends)
          if (cur().text == e) return body;
        body.push_back(parse_statement());
      } else {
        fail("unexpected " + describe(t));
      }
    }
  }

  // Consumes `{% end... %}` after subparse stopped on it.
  void end_tag(const char* name) {
    if (!skip_name(name)) fail(std::string("expected '") + name + "'");
    expect_block_end();
  }

  StmtPtr parse_statement() {
    check_nesting();
    auto s = std::make_unique<Stmt>();
    s->line = cur().line;
    std::string tag = cur().text;
    int saved_open = open_line_;
    open_line_ = s->line;
    advance();
    if (tag == "if") {
      s->type = StmtType::kIf;
      auto cond = parse_tuple();
      expect_block_end();
      while (true) {
        Body b = subparse({"elif", "else", "endif"});
        s->branches.emplace_back(std::move(cond), std::move(b));
        if (skip_name("elif")) {
          cond = parse_tuple();
          expect_block_end();
          continue;
        }
        if (skip_name("else")) {
          expect_block_end();
          s->else_body = subparse({"endif"});
        }
        end_tag("endif");
        break;
      }
    } else if (tag == "for") {
      s->type = StmtType::kFor;
      parse_targets(*s);
      if (!skip_name("in")) fail("expected 'in' in for loop, got " + describe(cur()));
      s->expr = parse_tuple(false, true);
      if (skip_name("if")) s->cond = parse_expression();
      if (skip_name("recursive")) s->recursive = true;
      expect_block_end();
      s->body = subparse({"endfor", "else"});
      if (skip_name("else")) {
        expect_block_end();
        s->else_body = subparse({"endfor"});
      }
      end_tag("endfor");
    } else if (tag == "set") {
      std::string first = expect_name();
      if (skip_op(".")) {
        s->attr = expect_name();
        s->targets.push_back(first);
      } else {
        s->targets.push_back(first);
        while (skip_op(",")) {
          if (cur().type != TokenType::kName) break;
          s->targets.push_back(expect_name());
        }
      }
      if (skip_op("=")) {
        s->type = StmtType::kSet;
        s->expr = parse_tuple();
        expect_block_end();
      } else {
        s->type = StmtType::kSetBlock;
        if (is_op("|")) s->filter = parse_filter_chain(nullptr);
        expect_block_end();
        s->body = subparse({"endset"});
        end_tag("endset");
      }
    } else if (tag == "macro") {
      s->type = StmtType::kMacro;
      s->text = expect_name();
      parse_params(*s);
      expect_block_end();
      s->body = subparse({"endmacro"});
      end_tag("endmacro");
    } else if (tag == "call") {
      s->type = StmtType::kCallBlock;
      if (is_op("(")) parse_params(*s);
      s->expr = parse_expression();
      if (s->expr->type != ExprType::kCall) fail("expected call", s->line);
      expect_block_end();
      s->body = subparse({"endcall"});
      end_tag("endcall");
    } else if (tag == "filter") {
      s->type = StmtType::kFilterBlock;
      s->filter = parse_filter_chain(nullptr, true);
      expect_block_end();
      s->body = subparse({"endfilter"});
      end_tag("endfilter");
    } else if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail("'" + tag + "' outside of a loop", s->line);
      s->type = tag == "break" ? StmtType::kBreak : StmtType::kContinue;
      expect_block_end();
    } else if (tag == "with") {
      s->type = StmtType::kWith;
      while (cur().type != TokenType::kBlockEnd) {
        if (!s->params.empty()) expect_op(",");
        std::string n = expect_name();
        expect_op("=");
        s->params.emplace_back(n, parse_expression());
      }
      expect_block_end();
      s->body = subparse({"endwith"});
      end_tag("endwith");
    } else if (tag == "generation") {
      // HF's AssistantTracker tag: renders its body unchanged.
      s->type = StmtType::kScope;
      expect_block_end();
      s->body = subparse({"endgeneration"});
      end_tag("endgeneration");
    } else {
      fail("Encountered unknown tag '" + tag + "'.", s->line);
    }
    open_line_ = saved_open;
    return s;
  }

  void parse_targets(Stmt& s) {
    bool paren = skip_op("(");
    s.targets.push_back(expect_name());
    while (skip_op(",")) {
      if (cur().type != TokenType::kName) break;
      s.targets.push_back(expect_name());
    }
    if (paren) expect_op(")");
  }

  void parse_params(Stmt& s) {
    expect_op("(");
    while (!is_op(")")) {
      if (!s.params.empty()) expect_op(",");
      if (is_op(")")) break;
      std::string n = expect_name();
      ExprPtr def;
      if (skip_op("=")) def = parse_expression();
      else if (!s.params.empty() && s.params.back().second) fail("non-default argument follows default argument");
      s.params.emplace_back(n, std::move(def));
    }
    expect_op(")");
  }

 public:
  // expression grammar

  ExprPtr parse_tuple(bool with_condexpr = true, bool for_iter = false) {
    int line = cur().line;
    std::vector<ExprPtr> items;
    bool comma = false;
    while (true) {
      if (!items.empty()) {
        if (!skip_op(",")) break;
        comma = true;
        if (cur().type == TokenType::kBlockEnd || cur().type == TokenType::kVarEnd || is_op(")") ||
            (for_iter && (is_name("if") || is_name("recursive"))))
          break;
      }
      items.push_back(with_condexpr ? parse_expression() : parse_or());
    }
    if (!comma) return std::move(items[0]);
    auto t = node(ExprType::kTuple, line);
    t->args = std::move(items);
    return t;
  }

  ExprPtr parse_expression() {
    ExprPtr e = parse_or();
    while (is_name("if")) {
      int line = cur().line;
      advance();
      auto c = node(ExprType::kCond, line);
      c->b = std::move(e);
      c->a = parse_or();
      if (skip_name("else")) c->c = parse_expression();
      e = std::move(c);
    }
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      auto n = node(ExprType::kOr, cur().line);
      advance();
      n->a = std::move(left);
      n->b = parse_and();
      left = std::move(n);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      auto n = node(ExprType::kAnd, cur().line);
      advance();
      n->a = std::move(left);
      n->b = parse_not();
      left = std::move(n);
    }
    return left;
  }

  ExprPtr parse_not() {
    check_nesting();
    if (is_name("not")) {
      auto n = node(ExprType::kUnary, cur().line);
      n->name = "not";
      advance();
      n->a = parse_not();
      return n;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    int line = cur().line;
    ExprPtr first = parse_math1();
    std::vector<std::string> ops;
    std::vector<ExprPtr> operands;
    while (true) {
      std::string op;
      if (cur().type == TokenType::kOp &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" || cur().text == ">" ||
           cur().text == ">=")) {
        op = cur().text;
        advance();
      } else if (is_name("in")) {
        op = "in";
        advance();
      } else if (is_name("not") && peek().type == TokenType::kName && peek().text == "in") {
        op = "notin";
        advance();
        advance();
      } else {
        break;
      }
      ops.push_back(op);
      operands.push_back(parse_math1());
    }
    if (ops.empty()) return first;
    auto n = node(ExprType::kCompare, line);
    n->a = std::move(first);
    n->ops = std::move(ops);
    n->args = std::move(operands);
    return n;
  }

  ExprPtr binary(const std::string& op, ExprPtr l, ExprPtr r, int line) {
    auto n = node(ExprType::kBinary, line);
    n->name = op;
    n->a = std::move(l);
    n->b = std::move(r);
    return n;
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = cur().text;
      int line = cur().line;
      advance();
      left = binary(op, std::move(left), parse_concat(), line);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      int line = cur().line;
      advance();
      left = binary("~", std::move(left), parse_math2(), line);
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().text;
      int line = cur().line;
      advance();
      left = binary(op, std::move(left), parse_pow(), line);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary();
    while (is_op("**")) {
      int line = cur().line;
      advance();
      left = binary("**", std::move(left), parse_unary(), line);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter = true) {
    check_nesting();
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      auto n = node(ExprType::kUnary, cur().line);
      n->name = cur().text;
      advance();
      n->a = parse_unary(false);
      e = std::move(n);
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    int line = t.line;
    switch (t.type) {
      case TokenType::kName: {
        std::string n = t.text;
        advance();
        auto lit = node(ExprType::kLiteral, line);
        if (n == "true" || n == "True") lit->value = Value::boolean(true);
        else if (n == "false" || n == "False") lit->value = Value::boolean(false);
        else if (n == "none" || n == "None") lit->value = Value::none();
        else {
          auto nm = node(ExprType::kName, line);
          nm->name = n;
          return nm;
        }
        return lit;
      }
      case TokenType::kString: {
        std::string s;
        while (cur().type == TokenType::kString) {
          s += cur().text;
          advance();
        }
        auto lit = node(ExprType::kLiteral, line);
        lit->value = Value::string(std::move(s));
        return lit;
      }
      case TokenType::kInt: {
        auto lit = node(ExprType::kLiteral, line);
        lit->value = Value::integer(int_literal(t.text));
        advance();
        return lit;
      }
      case TokenType::kFloat: {
        auto lit = node(ExprType::kLiteral, line);
        lit->value = Value::floating(std::strtod(t.text.c_str(), nullptr));
        advance();
        return lit;
      }
      case TokenType::kOp:
        if (t.text == "(") {
          advance();
          if (skip_op(")")) return node(ExprType::kTuple, line);
          ExprPtr e = parse_tuple();
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          advance();
          auto l = node(ExprType::kList, line);
          while (!is_op("]")) {
            if (!l->args.empty()) expect_op(",");
            if (is_op("]")) break;
            l->args.push_back(parse_expression());
          }
          expect_op("]");
          return l;
        }
        if (t.text == "{") {
          advance();
          auto d = node(ExprType::kDict, line);
          while (!is_op("}")) {
            if (!d->args.empty()) expect_op(",");
            if (is_op("}")) break;
            d->args.push_back(parse_expression());
            expect_op(":");
            d->values.push_back(parse_expression());
          }
          expect_op("}");
          return d;
        }
        break;
      default: break;
    }
    fail("unexpected " + describe(t));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".")) {
        int line = cur().line;
        advance();
        auto n = node(ExprType::kGetAttr, line);
        if (cur().type == TokenType::kName) {
          n->name = cur().text;
        } else if (cur().type == TokenType::kInt) {
          n->type = ExprType::kGetItem;
          auto idx = node(ExprType::kLiteral, line);
          idx->value = Value::integer(int_literal(cur().text));
          n->b = std::move(idx);
        } else {
          fail("expected name or number after '.'");
        }
        advance();
        n->a = std::move(e);
        e = std::move(n);
      } else if (is_op("[")) {
        int line = cur().line;
        advance();
        ExprPtr start, stop, step;
        bool slice = false;
        if (!is_op(":")) start = parse_expression();
        if (skip_op(":")) {
          slice = true;
          if (!is_op("]") && !is_op(":")) stop = parse_expression();
          if (skip_op(":") && !is_op("]")) step = parse_expression();
        }
        expect_op("]");
        if (slice) {
          auto n = node(ExprType::kSlice, line);
          n->a = std::move(e);
          n->b = std::move(start);
          n->c = std::move(stop);
          n->d = std::move(step);
          e = std::move(n);
        } else {
          auto n = node(ExprType::kGetItem, line);
          n->a = std::move(e);
          n->b = std::move(start);
          e = std::move(n);
        }
      } else if (is_op("(")) {
        auto n = node(ExprType::kCall, cur().line);
        n->a = std::move(e);
        parse_call_args(*n);
        e = std::move(n);
      } else {
        return e;
      }
    }
  }

  void parse_call_args(Expr& n) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (skip_op("*")) {
        n.star = parse_expression();
      } else if (skip_op("**")) {
        n.dstar = parse_expression();
      } else if (cur().type == TokenType::kName && peek().type == TokenType::kOp && peek().text == "=") {
        std::string k = cur().text;
        advance();
        advance();
        n.kwargs.emplace_back(k, parse_expression());
      } else {
        if (!n.kwargs.empty()) fail("positional argument follows keyword argument");
        n.args.push_back(parse_expression());
      }
    }
    expect_op(")");
  }

  ExprPtr parse_filter_chain(ExprPtr base, bool first_without_pipe = false) {
    bool need_pipe = !first_without_pipe;
    while (!need_pipe || is_op("|")) {
      if (need_pipe) advance();
      need_pipe = true;
      auto f = node(ExprType::kFilter, cur().line);
      f->name = expect_name();
      while (is_op(".") && peek().type == TokenType::kName) {
        advance();
        f->name += '.';
        f->name += expect_name();
      }
      if (is_op("(")) parse_call_args(*f);
      f->a = std::move(base);
      base = std::move(f);
    }
    return base;
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        e = parse_filter_chain(std::move(e));
      } else if (is_name("is")) {
        auto t = node(ExprType::kTest, cur().line);
        advance();
        if (skip_name("not")) t->ops.push_back("not");
        t->name = expect_name();
        while (is_op(".") && peek().type == TokenType::kName) {
          advance();
          t->name += '.';
          t->name += expect_name();
        }
        if (is_op("(")) {
          parse_call_args(*t);
        } else if ((cur().type == TokenType::kName || cur().type == TokenType::kString || cur().type == TokenType::kInt ||
                    cur().type == TokenType::kFloat || is_op("(") || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
          if (is_name("is")) fail("You cannot chain multiple tests with is");
          ExprPtr arg = parse_primary();
          t->args.push_back(parse_postfix(std::move(arg)));
        }
        t->a = std::move(e);
        e = std::move(t);
      } else if (is_op("(")) {
        e = parse_postfix(std::move(e));
      } else {
        return e;
      }
    }
  }

 private:
  const std::vector<Token>& toks_;
  std::string name_;
  size_t pos_ = 0;
  int open_line_ = 1;
  int loop_depth_ = 1;  // break/continue validity is checked at render time
};

}  // namespace

Body parse_tokens(const std::vector<Token>& tokens, const std::string& name) {
  return Parser(tokens, name).parse_template();
}

}  // namespace inkling::jinja
