// Byte-for-byte comparison with Python Jinja2 goldens (tools/template_goldens.py).
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/jinja/template.h"
#include "tensor/error.h"

namespace {

using inkling::jinja::CallArgs;
using inkling::jinja::Template;
using inkling::jinja::Value;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The goldens' strftime_now uses 2024-07-26 09:30:00.
Value fixed_strftime(const CallArgs& a) {
  std::tm tm{};
  tm.tm_year = 2024 - 1900;
  tm.tm_mon = 6;
  tm.tm_mday = 26;
  tm.tm_hour = 9;
  tm.tm_min = 30;
  tm.tm_wday = 5;
  tm.tm_yday = 207;
  char buf[256];
  size_t n = std::strftime(buf, sizeof buf, a.positional.at(0).str().c_str(), &tm);
  return Value::string(std::string(buf, n));
}

TEST(JinjaConformance, MatchesPythonJinja2) {
  const std::string root = INKLING_SOURCE_DIR;
  auto goldens = nlohmann::ordered_json::parse(read_file(root + "/tests/data/templates/goldens.json"));
  std::map<std::string, Template> cache;
  std::map<std::string, std::pair<int, int>> per_template;
  int equal = 0, total = 0;
  for (const auto& c : goldens["cases"]) {
    std::string key = c["template"].get<std::string>();
    std::string label = key + " / " + c["name"].get<std::string>();
    if (key == "inline") key = "inline:" + c["name"].get<std::string>();
    auto it = cache.find(key);
    if (it == cache.end()) {
      std::string source = c.contains("source") ? c["source"].get<std::string>() : read_file(root + "/" + key);
      Template t = Template::parse(source, key);
      t.set_function("strftime_now", fixed_strftime);
      it = cache.emplace(key, std::move(t)).first;
    }
    auto& counts = per_template[c["template"].get<std::string>()];
    ++counts.second;
    ++total;
    bool ok = false;
    try {
      std::string got = it->second.render(c["context"]);
      if (c.contains("expected")) {
        ok = got == c["expected"].get<std::string>();
        EXPECT_EQ(got, c["expected"].get<std::string>()) << label;
      } else {
        ADD_FAILURE() << label << ": expected error '" << c["error"].get<std::string>() << "', got output: " << got;
      }
    } catch (const inkling::Error& e) {
      if (c.contains("error")) {
        std::string want = c["error"].get<std::string>();
        // A raise_exception message must come through verbatim; Python-level errors only need to raise.
        ok = c["error_kind"] != "template" || std::string(e.what()).find(want) != std::string::npos;
        EXPECT_TRUE(ok) << label << ": error '" << e.what() << "' does not contain '" << want << "'";
      } else {
        ADD_FAILURE() << label << ": unexpected error " << e.what();
      }
    }
    if (ok) {
      ++equal;
      ++counts.first;
    }
  }
  std::cout << "template conformance: " << equal << "/" << total << " equal\n";
  for (const auto& [name, counts] : per_template)
    std::cout << "  " << name << ": " << counts.first << "/" << counts.second << "\n";
  EXPECT_GE(total, 60);
}

}  // namespace
