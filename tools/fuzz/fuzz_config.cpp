// libFuzzer target for config.json and hf_quant_config.json parsing (built by tools/fuzz/run.sh).
//
// The first byte picks the layout: 0 parses the rest as config.json alone, 1 splits the rest at
// the first NUL into config.json and hf_quant_config.json. Text that is not JSON is the reader's
// business (read_json_file reports it); every JSON document must either give a ModelConfig whose
// layer table matches its layer count or throw inkling::Error.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "tensor/error.h"
#include "fuzz_util.h"

namespace {

using inkling::fuzz::check;

bool parse(const std::string& text, nlohmann::json& out) {
  out = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  return !out.is_discarded();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
  nlohmann::json config, quant;
  const nlohmann::json* hf_quant = nullptr;
  if (data[0] % 2 == 1) {
    size_t nul = rest.find('\0');
    if (nul == std::string::npos || !parse(rest.substr(nul + 1), quant)) return 0;
    hf_quant = &quant;
    rest.resize(nul);
  }
  if (!parse(rest, config)) return 0;
  try {
    inkling::ModelConfig m = inkling::parse_model_config(config, hf_quant);
    check(m.text.num_layers > 0 && size_t(m.text.num_layers) == m.text.layers.size(), "layer table size");
    check(m.text.num_layers <= 4096, "layer count bound");
  } catch (const inkling::Error&) {
  }
  return 0;
}
