// synth, inspect, quantize.
#include <cstdio>
#include <iostream>

#include "apps/cli/commands.h"
#include "model/inspect.h"
#include "model/gguf_export.h"
#include "model/quantize.h"
#include "model/synth.h"

namespace inkling::cli {

Runner add_synth(CLI::App& app) {
  struct Args {
    std::string out, layout = "original-bf16", preset = "tiny";
    uint64_t seed = 0;
    bool separated_routing = false;
    bool confident_head = false;
  };
  auto args = std::make_shared<Args>();
  app.add_option("OUT", args->out, "output directory")->required();
  app.add_option("--layout", args->layout, "original-f32 | original-bf16 | nvfp4 | mlx-4bit | mlx-8bit")
      ->capture_default_str();
  app.add_option("--preset", args->preset, "tiny | small | bench")->capture_default_str();
  app.add_option("--seed", args->seed, "random seed (same seed, same bytes)")->capture_default_str();
  app.add_flag("--separated-routing", args->separated_routing,
               "router biases that make every token pick the same experts, far from any tie (for comparing "
               "engines' greedy tokens)");
  app.add_flag("--confident-head", args->confident_head,
               "a head that predicts one successor of each regular token far ahead of the rest, as a trained "
               "model is sure of most tokens (for comparing engines' greedy tokens; a random head's near ties "
               "part them)");
  return [args] {
    SynthOptions options;
    options.format = parse_target_format(args->layout);
    options.preset = parse_synth_preset(args->preset);
    options.seed = args->seed;
    options.separated_routing = args->separated_routing;
    options.confident_head = args->confident_head;
    Progress progress("synth " + args->preset + " " + args->layout);
    options.progress = std::ref(progress);
    write_synthetic_checkpoint(args->out, options);
    progress.finish();
    std::fprintf(stderr, "wrote %s\n", args->out.c_str());
    return 0;
  };
}

namespace {

std::string text_or(const nlohmann::ordered_json& value, const char* absent) {
  if (value.is_null()) return absent;
  return value.is_string() ? value.get<std::string>() : value.dump();
}

// inspect's GGUF section: the container, the metadata that matters here, the types per tensor family.
void print_gguf(const nlohmann::ordered_json& g) {
  const auto& t = g["tokenizer"];
  std::printf("\ngguf         version %d, alignment %d, %d keys, %d tensors in %d file%s\n", g["version"].get<int>(),
              g["alignment"].get<int>(), g["key_count"].get<int>(), g["tensor_count"].get<int>(),
              g["split_count"].get<int>(), g["split_count"].get<int>() == 1 ? "" : "s");
  std::printf("metadata     architecture %s, name %s, context length %s, file type %s\n",
              text_or(g["architecture"], "(none)").c_str(), text_or(g["name"], "(none)").c_str(),
              text_or(g["context_length"], "(none)").c_str(),
              g["file_type"].is_null() ? "(none)" : g["file_type"]["name"].get<std::string>().c_str());
  std::printf("tokenizer    %s (pre %s), %s tokens, %s merges; eos %s, bos %s, padding %s, add_bos %s; chat template %s\n",
              text_or(t["model"], "(none)").c_str(), text_or(t["pre"], "(none)").c_str(), text_or(t["tokens"], "no").c_str(),
              text_or(t["merges"], "no").c_str(), text_or(t["eos_token_id"], "-").c_str(),
              text_or(t["bos_token_id"], "-").c_str(), text_or(t["padding_token_id"], "-").c_str(),
              text_or(t["add_bos_token"], "-").c_str(), t["chat_template"].get<bool>() ? "yes" : "no");
  std::printf("tensor types per family:\n");
  for (const auto& [family, counts] : g["tensor_types"].items()) {
    std::string line;
    for (const auto& [type, count] : counts.items())
      line += (line.empty() ? "" : ", ") + type + " x" + std::to_string(count.get<int>());
    std::printf("  %-20s %s\n", family.c_str(), line.c_str());
  }
}

}  // namespace

Runner add_inspect(CLI::App& app) {
  struct Args {
    std::string model;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  app.add_option("-m,--model", args->model, "checkpoint directory or .gguf file")->required();
  app.add_flag("--json", args->json, "print JSON instead of a table");
  return [args] {
    auto ckpt = Checkpoint::open(args->model);
    nlohmann::ordered_json info = describe_checkpoint(*ckpt);
    if (args->json) {
      std::cout << info.dump(2) << "\n";
      return 0;
    }
    const auto& c = info["config"];
    std::printf("checkpoint   %s\n", info["path"].get<std::string>().c_str());
    std::printf("layout       %s (quantization: %s)\n", info["layout"].get<std::string>().c_str(),
                info["quantization"].dump().c_str());
    std::printf("model        %s, hidden %d, %d layers, vocab %d (%d used)\n",
                info["model_type"].get<std::string>().c_str(), c["hidden_size"].get<int>(),
                c["num_layers"].get<int>(), c["vocab_size"].get<int>(), c["unpadded_vocab_size"].get<int>());
    std::printf("experts      %d routed (%d active) + %d shared, width %d; dense width %d\n",
                c["n_routed_experts"].get<int>(), c["experts_per_token"].get<int>(),
                c["n_shared_experts"].get<int>(), c["moe_width"].get<int>(), c["dense_width"].get<int>());
    std::printf("parameters   %.3f B total, %.3f B active per token\n",
                double(info["parameters"]["total"].get<int64_t>()) / 1e9,
                double(info["parameters"]["active_per_token"].get<int64_t>()) / 1e9);
    std::printf("\n%5s  %-8s %-6s %5s %4s %4s %7s %7s  %-10s %-10s\n", "layer", "attn", "mlp", "heads", "kv",
                "dim", "window", "extent", "attn fmt", "mlp fmt");
    for (const auto& layer : info["layers"])
      std::printf("%5d  %-8s %-6s %5d %4d %4d %7s %7d  %-10s %-10s\n", layer["index"].get<int>(),
                  layer["attention"].get<std::string>().c_str(), layer["mlp"].get<std::string>().c_str(),
                  layer["heads"].get<int>(), layer["kv_heads"].get<int>(), layer["head_dim"].get<int>(),
                  layer["window"].is_null() ? "global" : std::to_string(layer["window"].get<int>()).c_str(),
                  layer["rel_extent"].get<int>(),
                  layer["attention_format"].get<std::string>().c_str(), layer["mlp_format"].get<std::string>().c_str());
    std::printf("\nbytes per dtype:");
    for (const auto& [dtype, bytes] : info["bytes_per_dtype"].items())
      std::printf("  %s %.1f MB", dtype.c_str(), double(bytes.get<uint64_t>()) / 1e6);
    std::printf("\nformats per tensor family:\n");
    for (const auto& [family, formats] : info["formats_per_family"].items())
      std::printf("  %-16s %s\n", family.c_str(), formats.dump().c_str());
    if (info.contains("gguf")) print_gguf(info["gguf"]);
    std::printf("skipped tensors: %zu (vision / audio / mtp / calibration)\n", info["skipped_tensors"].size());
    for (const auto& warning : info["warnings"]) std::printf("warning: %s\n", warning.get<std::string>().c_str());
    return 0;
  };
}

Runner add_quantize(CLI::App& app) {
  struct Args {
    std::string model, out, to;
  };
  auto args = std::make_shared<Args>();
  app.add_option("-m,--model", args->model,
                 "input: an original f32 / bf16 checkpoint directory (mlx-*, nvfp4); for gguf-*, any checkpoint "
                 "directory or .gguf file this engine loads")
      ->required();
  app.add_option("-o,--out", args->out, "output directory (mlx-*, nvfp4) or .gguf file (gguf-*)")->required();
  app.add_option("--to", args->to, "mlx-4bit | mlx-8bit | nvfp4 | gguf-f32 | gguf-bf16 | gguf-q8_0 | gguf-q4_k_m")
      ->required();
  app.footer(
      "gguf-*: one GGUF file laid out as llama.cpp's Inkling converter writes it (tensor names, metadata, the "
      "tokenizer.ggml.* keys from the checkpoint's tokenizer.json, general.sampling.* from its "
      "generation_config.json), loadable by llama.cpp and by this engine. gguf-q8_0 makes every matrix Q8_0 (as the "
      "converter's --outtype q8_0); gguf-q4_k_m is llama-quantize's Q4_K_M mix without an importance matrix: Q6_K "
      "for output.weight and for attn_v and ffn_down(_exps, _shexp) in the layers llama.cpp gives more bits (the "
      "first and last eighth, every third between), Q4_K for the other matrices; for a model of exactly 8 experts "
      "Q8_0 for attn_k and attn_v and Q5_K for attn_output; llama-quantize's fallbacks (Q5_0, Q5_1, Q8_0, F16) for "
      "rows that are not a multiple of 256 (docs/gguf.md). Norms, convs, rel_proj, router and biases stay F32. Blocks are rounded as ggml's "
      "reference quantizers round them.\n");
  return [args] {
    if (args->to.rfind("gguf-", 0) == 0) {
      const GgufTarget target = gguf_target(args->to.substr(5));
      Progress progress("quantize to " + args->to);
      const GgufExportReport report = export_gguf(args->model, args->out, target, std::ref(progress));
      progress.finish();
      std::string types;
      for (const auto& [type, count] : report.types) types += (types.empty() ? "" : ", ") + type + " x" + std::to_string(count);
      std::printf("wrote %s: %.1f MB (tensors: %s)\n", args->out.c_str(), double(report.output_bytes) / 1e6, types.c_str());
      return 0;
    }
    TargetFormat target = parse_target_format(args->to);
    Progress progress("quantize to " + args->to);
    QuantizeReport report = quantize_checkpoint(args->model, args->out, target, std::ref(progress));
    progress.finish();
    std::printf("wrote %s: %.1f MB -> %.1f MB\n", args->out.c_str(), double(report.input_bytes) / 1e6,
                double(report.output_bytes) / 1e6);
    std::printf("relative RMS weight error per family (output vs input):\n");
    for (const auto& [family, error] : report.relative_error) std::printf("  %-16s %.5f\n", family.c_str(), error);
    return 0;
  };
}

}  // namespace inkling::cli
