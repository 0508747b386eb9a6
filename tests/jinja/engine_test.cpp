// Engine behaviour the goldens do not pin down: errors, reuse, globals.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/jinja/template.h"
#include "tensor/error.h"

namespace {

using inkling::jinja::Template;
using json = nlohmann::ordered_json;

std::string render(const std::string& src, const json& ctx = json::object()) {
  return Template::parse(src, "t").render(ctx);
}

std::string error_of(const std::string& src, const json& ctx = json::object()) {
  try {
    render(src, ctx);
  } catch (const inkling::Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(JinjaErrors, UnclosedBlockNamesLine) {
  std::string e = error_of("a\n{% if x %}\nb\n");
  EXPECT_NE(e.find("t:2:"), std::string::npos) << e;
  EXPECT_NE(e.find("endif"), std::string::npos) << e;
}

TEST(JinjaErrors, UnknownTag) {
  std::string e = error_of("x\n\n{% frobnicate %}");
  EXPECT_NE(e.find("t:3:"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown tag 'frobnicate'"), std::string::npos) << e;
}

TEST(JinjaErrors, BadExpressions) {
  for (const char* src : {"{{ 1 + }}", "{{ (1 }}", "{{ [1, 2 }}", "{{ 'abc }}", "{{ x. }}", "{% for in y %}{% endfor %}",
                          "{{ x ]] }}", "{# never closed", "{% set %}", "{{ }}", "{% endif %}", "{% raw %}abc"}) {
    std::string e = error_of(src);
    EXPECT_NE(e.find("t:1:"), std::string::npos) << src << " -> " << e;
  }
}

TEST(JinjaErrors, UnknownFilterAndTestAtRenderLine) {
  std::string e = error_of("a\nb\n{{ x | nosuchfilter }}", {{"x", 1}});
  EXPECT_NE(e.find("t:3:"), std::string::npos) << e;
  EXPECT_NE(e.find("nosuchfilter"), std::string::npos) << e;
  EXPECT_NE(error_of("{{ 1 is nosuchtest }}").find("nosuchtest"), std::string::npos);
}

TEST(JinjaErrors, RaiseExceptionCarriesMessage) {
  std::string e = error_of("\n{{ raise_exception('bad role: ' ~ r) }}", {{"r", "robot"}});
  EXPECT_NE(e.find("bad role: robot"), std::string::npos) << e;
  EXPECT_NE(e.find("t:2:"), std::string::npos) << e;
}

TEST(JinjaErrors, RunawayRecursionIsAnError) {
  std::string e = error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_NE(e.find("recursion"), std::string::npos) << e;
}

TEST(JinjaTemplate, ParseOnceRenderMany) {
  Template t = Template::parse("{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}");
  EXPECT_EQ(t.render({{"messages", json::array({{{"role", "user"}, {"content", "a"}}})}}), "user:a;");
  EXPECT_EQ(t.render({{"messages", json::array()}}), "");
  EXPECT_EQ(t.render({{"messages", json::array({{{"role", "x"}, {"content", 1.0}}})}}), "x:1.0;");
}

TEST(JinjaTemplate, CustomGlobalsAndDictOrder) {
  Template t = Template::parse("{{ now('%Y') }}|{% for k in d %}{{ k }}{% endfor %}");
  t.set_function("now", [](const inkling::jinja::CallArgs&) { return inkling::jinja::Value::string("1999"); });
  json d = json::object();
  d["z"] = 1;
  d["a"] = 2;
  d["m"] = 3;
  EXPECT_EQ(t.render({{"d", d}}), "1999|zam");
}

TEST(JinjaTemplate, ContextShadowsGlobals) {
  EXPECT_EQ(render("{{ range }}", {{"range", "mine"}}), "mine");
}

}  // namespace
