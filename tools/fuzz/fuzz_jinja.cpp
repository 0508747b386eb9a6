// libFuzzer target for the Jinja engine (built by tools/fuzz/run.sh).
//
// The input is a template, then optionally a NUL and a JSON render context. Parsing and rendering
// may fail only with inkling::Error, under budgets small enough that each input runs in
// milliseconds; the real Inkling template also renders the fuzzed context when it is a valid
// messages list or not (errors only).
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/jinja/template.h"
#include "tensor/error.h"
#include "fuzz_util.h"

namespace {

using inkling::jinja::Template;

const Template& inkling_template() {
  static const Template t =
      Template::parse(inkling::fuzz::inkling_template_source(), "inkling_chat_template.jinja");
  return t;
}

inkling::jinja::RenderLimits small_limits() {
  inkling::jinja::RenderLimits limits;
  limits.max_output_bytes = 1 << 20;
  limits.max_allocated_bytes = 64 << 20;
  limits.max_steps = 200000;
  return limits;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string input(reinterpret_cast<const char*>(data), size);
  size_t nul = input.find('\0');
  std::string source = input.substr(0, nul);
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  if (nul != std::string::npos) {
    context = nlohmann::ordered_json::parse(input.substr(nul + 1), nullptr, /*allow_exceptions=*/false);
    if (context.is_discarded() || !context.is_object()) context = nlohmann::ordered_json::object();
  }
  try {
    Template t = Template::parse(source, "fuzz");
    t.set_limits(small_limits());
    (void)t.render(context);
  } catch (const inkling::Error&) {
  }
  if (nul != std::string::npos) {
    try {
      Template t = inkling_template();
      t.set_limits(small_limits());
      (void)t.render(context);
    } catch (const inkling::Error&) {
    }
  }
  return 0;
}
