// inkling bench-grammar: compile time and allowed-token mask time per token on a set of JSON
// Schemas / GBNF grammars, over the full vocabulary. Tokens are drawn uniformly from the mask,
// so each run walks the grammar as a random model constrained by it would.
#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>

#include "apps/cli/commands.h"
#include "io/text_file.h"
#include "model/synth.h"
#include "runtime/grammar/json_schema.h"
#include "runtime/grammar/matcher.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tensor/error.h"

namespace inkling::cli {

namespace {

double percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  size_t i = std::min(values.size() - 1, size_t(q * double(values.size() - 1) + 0.5));
  return values[i];
}

double mean_of(const std::vector<double>& values) {
  double sum = 0;
  for (double v : values) sum += v;
  return values.empty() ? 0.0 : sum / double(values.size());
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// The id of the n-th allowed token (0-based), without listing all of them.
int32_t nth_allowed(const grammar::TokenMask& mask, size_t n) {
  const auto& words = mask.words();
  for (size_t w = 0; w < words.size(); ++w) {
    size_t here = size_t(std::popcount(words[w]));
    if (n >= here) {
      n -= here;
      continue;
    }
    uint64_t bits = words[w];
    for (; n > 0; --n) bits &= bits - 1;
    return int32_t(w * 64 + size_t(std::countr_zero(bits)));
  }
  throw Error("bench-grammar: mask index out of range");
}

// Little-endian 64-bit words as base64 (what Python's numpy.frombuffer reads back).
std::string base64(const std::vector<uint64_t>& words) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes(words.size() * 8, '\0');
  for (size_t i = 0; i < words.size(); ++i)
    for (int b = 0; b < 8; ++b) bytes[i * 8 + size_t(b)] = char((words[i] >> (8 * b)) & 0xFF);
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t v = uint32_t(uint8_t(bytes[i])) << 16;
    if (i + 1 < bytes.size()) v |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    if (i + 2 < bytes.size()) v |= uint32_t(uint8_t(bytes[i + 2]));
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[v & 63] : '=';
  }
  return out;
}

}  // namespace

Runner add_bench_grammar(CLI::App& app) {
  struct Args {
    std::vector<std::string> inputs;
    std::string tokenizer;
    int tokens = 200;
    int runs = 3;
    uint64_t seed = 0;
    bool json = false;
    std::string emit;
    int emit_masks = 0;
    int32_t eos = 200006;
    int budget = 0;
  };
  auto args = std::make_shared<Args>();
  app.add_option("INPUTS", args->inputs, "JSON Schema files (.json) and GBNF grammars (.gbnf), or folders of them")->required();
  app.add_option("--tokenizer", args->tokenizer, "tokenizer.json (default: the one synth uses)");
  app.add_option("--tokens", args->tokens, "tokens per run (a run also stops where the grammar ends)")->capture_default_str();
  app.add_option("--runs", args->runs, "runs per schema, each with its own seed and a fresh matcher")->capture_default_str();
  app.add_option("--seed", args->seed, "first seed")->capture_default_str();
  app.add_flag("--json", args->json, "print JSON instead of a table");
  app.add_option("--eos", args->eos, "the end token when the tokenizer names none")->capture_default_str();
  app.add_option("--budget", args->budget,
                 "after this many sampled tokens, close the output by the grammar's shortest completion, one "
                 "byte token at a time (0: never)")
      ->capture_default_str();
  app.add_option("--emit", args->emit,
                 "write one JSON line per run (file, run, token ids, finished) for the validity and differential tests");
  app.add_option("--emit-masks", args->emit_masks, "with --emit: the mask (base64 bitset) at this many steps per run")
      ->capture_default_str();
  return [args] {
    namespace fs = std::filesystem;
    std::vector<fs::path> files;
    for (const std::string& input : args->inputs) {
      if (fs::is_directory(input)) {
        for (const auto& entry : fs::directory_iterator(input))
          if (entry.path().extension() == ".json" || entry.path().extension() == ".gbnf") files.push_back(entry.path());
      } else {
        files.push_back(input);
      }
    }
    std::sort(files.begin(), files.end());
    if (files.empty()) throw Error("bench-grammar: no .json or .gbnf files in the inputs");
    const std::string tokenizer_path = args->tokenizer.empty() ? (data_dir() / "tokenizer.json").string() : args->tokenizer;
    auto t0 = std::chrono::steady_clock::now();
    Tokenizer tokenizer = Tokenizer::from_file(tokenizer_path);
    std::vector<int32_t> end_tokens;
    if (!tokenizer.eos_id()) end_tokens.push_back(args->eos);  // a bare tokenizer.json names none
    auto vocabulary = grammar::TokenVocabulary::from_tokenizer(tokenizer, tokenizer.vocab_size(), end_tokens);
    const double vocabulary_ms = ms_since(t0);
    std::fprintf(stderr, "vocabulary: %d ids, trie of %zu nodes, built in %.0f ms\n", vocabulary->mask_size(),
                 vocabulary->node_count(), vocabulary_ms);

    std::unique_ptr<std::ofstream> emit;
    if (!args->emit.empty()) {
      emit = std::make_unique<std::ofstream>(args->emit, std::ios::binary);
      if (!*emit) throw Error("bench-grammar: cannot write " + args->emit);
    }
    std::vector<int32_t> byte_token(256, -1);
    for (int32_t id = 0; id < vocabulary->mask_size(); ++id)
      if (vocabulary->in_trie(id) && vocabulary->bytes(id).size() == 1) byte_token[uint8_t(vocabulary->bytes(id)[0])] = id;
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    std::vector<double> all_masks;
    for (const fs::path& file : files) {
      const std::string text = read_text_file(file, size_t(16) << 20, "a schema or grammar file");
      auto compile_start = std::chrono::steady_clock::now();
      std::string gbnf = text;
      if (file.extension() != ".gbnf") {
        try {
          gbnf = grammar::json_schema_to_gbnf(nlohmann::ordered_json::parse(text));
        } catch (const nlohmann::json::exception& e) {
          throw Error("bench-grammar: " + file.string() + ": " + e.what());
        }
      }
      auto grammar = std::make_shared<grammar::Grammar>(grammar::parse_gbnf(gbnf));
      const double compile_ms = ms_since(compile_start);
      // One matcher per schema; each run starts from a copy, so the runs share its caches as the
      // requests of one schema do in the server.
      const grammar::GrammarMatcher compiled(grammar, vocabulary);
      std::vector<double> masks, first_masks;
      size_t tokens = 0, walks = 0;
      for (int run = 0; run < args->runs; ++run) {
        grammar::GrammarMatcher matcher = compiled;
        std::mt19937_64 rng(args->seed + uint64_t(run));
        grammar::TokenMask mask;
        std::vector<int32_t> chosen;
        nlohmann::json emitted_masks = nlohmann::json::array();
        const int mask_every = args->emit_masks > 0 ? std::max(1, args->tokens / args->emit_masks) : 0;
        for (int step = 0; step < args->tokens && !matcher.finished(); ++step) {
          auto start = std::chrono::steady_clock::now();
          matcher.allowed_tokens(mask);
          const double ms = ms_since(start);
          (step == 0 ? first_masks : masks).push_back(ms);
          if (emit && mask_every > 0 && step % mask_every == 0 && int(emitted_masks.size()) < args->emit_masks)
            emitted_masks.push_back({{"step", step}, {"bits", base64(mask.words())}});
          const size_t allowed = mask.count();
          if (allowed == 0) throw Error("bench-grammar: " + file.string() + ": no token allowed (a matcher bug)");
          chosen.push_back(nth_allowed(mask, rng() % allowed));
          if (!matcher.accept_token(chosen.back())) throw Error("bench-grammar: an allowed token was refused");
          ++tokens;
          if (args->budget > 0 && step + 1 >= args->budget && !matcher.finished()) {
            for (char c : matcher.shortest_completion()) {
              int32_t id = byte_token[uint8_t(c)];
              if (id < 0 || !matcher.accept_token(id)) throw Error("bench-grammar: the shortest completion was refused");
              chosen.push_back(id);
            }
            if (!matcher.accept_token(vocabulary->end_tokens().front())) throw Error("bench-grammar: no end after the completion");
            chosen.push_back(vocabulary->end_tokens().front());
            break;
          }
        }
        if (emit) {
          nlohmann::json line = {{"file", file.filename().string()}, {"run", run}, {"tokens", chosen},
                                 {"finished", matcher.finished()}, {"masks", emitted_masks}};
          if (run == 0) line["gbnf"] = gbnf;
          *emit << line.dump() << "\n";
        }
      }
      walks = compiled.stats().walks;
      all_masks.insert(all_masks.end(), masks.begin(), masks.end());
      double mean = 0;
      for (double m : masks) mean += m;
      mean = masks.empty() ? 0 : mean / double(masks.size());
      rows.push_back({{"file", file.filename().string()}, {"rules", grammar->rule_count()},
                      {"compile_ms", compile_ms}, {"first_mask_ms", percentile(first_masks, 0.5)},
                      {"mask_median_ms", percentile(masks, 0.5)}, {"mask_p90_ms", percentile(masks, 0.9)},
                      {"mask_max_ms", percentile(masks, 1.0)}, {"mask_mean_ms", mean}, {"tokens", tokens},
                      {"trie_walks", walks}});
    }
    nlohmann::ordered_json out = {{"tokenizer", tokenizer_path}, {"vocabulary_ms", vocabulary_ms},
                                  {"mask_median_ms", percentile(all_masks, 0.5)},
                                  {"mask_p90_ms", percentile(all_masks, 0.9)}, {"mask_mean_ms", mean_of(all_masks)},
                                  {"mask_max_ms", percentile(all_masks, 1.0)}, {"schemas", rows}};
    if (args->json) {
      std::cout << out.dump(2) << "\n";
      return 0;
    }
    std::printf("| schema | rules | compile ms | first mask ms | mask median ms | p90 | max | mean | tokens | trie walks |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
    for (const auto& r : rows)
      std::printf("| %s | %zu | %.2f | %.2f | %.3f | %.3f | %.2f | %.3f | %zu | %zu |\n", r["file"].get<std::string>().c_str(),
                  r["rules"].get<size_t>(), r["compile_ms"].get<double>(), r["first_mask_ms"].get<double>(),
                  r["mask_median_ms"].get<double>(), r["mask_p90_ms"].get<double>(), r["mask_max_ms"].get<double>(),
                  r["mask_mean_ms"].get<double>(), r["tokens"].get<size_t>(), r["trie_walks"].get<size_t>());
    std::printf("all schemas: mask median %.4f ms, p90 %.4f ms, mean %.4f ms, max %.2f ms over %zu masks (first masks excluded)\n",
                percentile(all_masks, 0.5), percentile(all_masks, 0.9), mean_of(all_masks), percentile(all_masks, 1.0),
                all_masks.size());
    return 0;
  };
}

}  // namespace inkling::cli
