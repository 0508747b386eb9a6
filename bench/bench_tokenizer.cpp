// Tokenizer throughput on the committed conformance corpus (1.2 MB of mixed
// scripts, code and emoji), measured the way tools/tokenizer_goldens.py bench
// measures HF tokenizers: every record encoded in turn, and the records joined
// with "\n" encoded as one string. Also load time of tokenizer.json.
//
//   build/bench_tokenizer --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/tokenizer/tokenizer.h"

namespace {

// The repository root: $INKLING_SOURCE_DIR, else derived from this file's path
// (CMake compiles it by absolute path).
const std::string kRoot = [] {
  if (const char* env = std::getenv("INKLING_SOURCE_DIR")) return std::string(env);
  const std::string file = __FILE__;
  return file.substr(0, file.rfind("/bench/"));
}();

const inkling::Tokenizer& tokenizer() {
  static const inkling::Tokenizer t = inkling::Tokenizer::from_file(kRoot + "/data/tokenizer.json");
  return t;
}

const std::vector<std::string>& records() {
  static const std::vector<std::string> out = [] {
    std::vector<std::string> lines;
    std::ifstream in(kRoot + "/tests/data/tokenizer/corpus.jsonl");
    std::string line;
    while (std::getline(in, line)) lines.push_back(nlohmann::json::parse(line));
    return lines;
  }();
  return out;
}

void BM_EncodeRecords(benchmark::State& state) {
  const auto& t = tokenizer();
  size_t bytes = 0, ids = 0;
  for (const auto& r : records()) bytes += r.size();
  for (auto _ : state) {
    ids = 0;
    for (const auto& r : records()) ids += t.encode(r).size();
    benchmark::DoNotOptimize(ids);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
  state.counters["ids"] = static_cast<double>(ids);
}
BENCHMARK(BM_EncodeRecords)->Unit(benchmark::kMillisecond);

void BM_EncodeOneString(benchmark::State& state) {
  const auto& t = tokenizer();
  std::string joined;
  for (const auto& r : records()) {
    if (!joined.empty()) joined.push_back('\n');
    joined += r;
  }
  for (auto _ : state) benchmark::DoNotOptimize(t.encode(joined));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * joined.size()));
}
BENCHMARK(BM_EncodeOneString)->Unit(benchmark::kMillisecond);

void BM_Decode(benchmark::State& state) {
  const auto& t = tokenizer();
  std::vector<std::vector<int32_t>> encoded;
  size_t bytes = 0;
  for (const auto& r : records()) {
    encoded.push_back(t.encode(r));
    bytes += r.size();
  }
  for (auto _ : state)
    for (const auto& ids : encoded) benchmark::DoNotOptimize(t.decode(ids));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}
BENCHMARK(BM_Decode)->Unit(benchmark::kMillisecond);

void BM_Load(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(inkling::Tokenizer::from_file(kRoot + "/data/tokenizer.json"));
}
BENCHMARK(BM_Load)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace

BENCHMARK_MAIN();
