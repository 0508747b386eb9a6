// inkling bench: prompt and decode speed against the machine's own limits, as a pasteable table.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "apps/cli/commands.h"
#include "kernels/isa.h"
#include "kernels/linear.h"
#include "kernels/product_profile.h"
#include "kernels/thread_pool.h"
#include "kernels/vector_ops.h"
#include "model/forward.h"
#include "model/inspect.h"
#include "tensor/error.h"

namespace inkling::cli {

namespace {

// The ISA, with "+amx" where bf16 products take AMX tiles (AVX-512, fast precision, INKLING_AMX).
std::string kernel_label() {
  std::string label = kernels::isa_name();
  if (kernels::active_isa() == kernels::Isa::Avx512 && kernels::amx_active() &&
      kernels::matmul_precision() != kernels::MatmulPrecision::Exact)
    label += "+amx";
  return label;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// FLOPs of one prompt token at position `pos` (matmuls 2 per weight, attention 4 * d per key).
double flops_per_prompt_token(const Checkpoint& ckpt, int64_t pos) {
  const TextConfig& c = ckpt.text();
  ParameterCounts counts = count_parameters(ckpt);
  WeightMatrix head = ckpt.weights().lm_head;
  double matmul = 2.0 * double(counts.active - head.rows * head.cols);  // the head runs once per prompt
  double attention = 0.0;
  for (const LayerSpec& s : c.layers) {
    int64_t keys = s.sliding ? std::min<int64_t>(pos + 1, c.sliding_window) : pos + 1;
    attention += 4.0 * double(s.n_heads) * double(s.head_dim) * double(keys);
  }
  return matmul + attention;
}

int32_t argmax_of(const float* logits, int64_t vocab) {
  return int32_t(std::max_element(logits, logits + vocab) - logits);
}

struct BatchRow {
  int batch = 0;
  double pp_tok_s = 0, tg_tok_s = 0, tg_per_sequence = 0, mixed_prefill_tok_s = 0, mixed_decode_tok_s = 0;
};

// llama-batched-bench's measurement on the batched step: B sequences prefill B different prompts
// together (pp, tokens / s over all), then decode together (tg: B tokens a step), then keep
// decoding while one more sequence prefills its prompt in the rest of each step's budget (the
// prefill speed under a decode load, and the decode speed while it runs). Every state is
// allocated for the whole context, so the peak RSS is that of B full-context sequences.
BatchRow bench_batch(InklingModel& model, int batch, int prompt_tokens, int generate) {
  const int64_t vocab = model.vocab();
  auto prompt_of = [&](int seq) {
    std::vector<int32_t> tokens(static_cast<size_t>(prompt_tokens));
    for (size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = int32_t((i * 7919 + 13 + size_t(seq) * 104729) % size_t(vocab));
    return tokens;
  };
  std::vector<SequenceState> states;
  std::vector<std::vector<int32_t>> prompts;
  for (int b = 0; b < batch; ++b) {
    states.push_back(model.new_sequence());
    prompts.push_back(prompt_of(b));
  }
  std::vector<float> logits(size_t(batch + 1) * size_t(vocab));
  const int64_t budget = model.max_step_tokens();
  BatchRow row;
  row.batch = batch;
  // pp: chunks of every prompt, as many as fit a step.
  auto t0 = std::chrono::steady_clock::now();
  std::vector<size_t> fed(static_cast<size_t>(batch), 0);
  for (;;) {
    std::vector<BatchItem> items;
    int64_t left = budget;
    for (int b = 0; b < batch && left > 0; ++b) {
      const size_t n = std::min(prompts[size_t(b)].size() - fed[size_t(b)], size_t(left));
      if (n == 0) continue;
      const bool last = fed[size_t(b)] + n == prompts[size_t(b)].size();
      items.push_back({&states[size_t(b)], std::span<const int32_t>(prompts[size_t(b)]).subspan(fed[size_t(b)], n),
                       last ? logits.data() + size_t(b) * size_t(vocab) : nullptr});
      fed[size_t(b)] += n;
      left -= int64_t(n);
    }
    if (items.empty()) break;
    model.forward_batch(items);
  }
  row.pp_tok_s = double(batch) * prompt_tokens / seconds_since(t0);
  // tg: one token of every sequence per step.
  std::vector<int32_t> next(static_cast<size_t>(batch));
  auto decode_items = [&] {
    std::vector<BatchItem> items;
    for (int b = 0; b < batch; ++b) {
      next[size_t(b)] = argmax_of(logits.data() + size_t(b) * size_t(vocab), vocab);
      items.push_back({&states[size_t(b)], std::span<const int32_t>(&next[size_t(b)], 1),
                       logits.data() + size_t(b) * size_t(vocab)});
    }
    return items;
  };
  auto t1 = std::chrono::steady_clock::now();
  for (int i = 0; i < generate; ++i) model.forward_batch(decode_items());
  const double tg_seconds = seconds_since(t1);
  row.tg_tok_s = double(batch) * generate / tg_seconds;
  row.tg_per_sequence = generate / tg_seconds;
  // pp under a decode load: one more prompt in the budget the decode tokens leave.
  SequenceState newcomer = model.new_sequence();
  const std::vector<int32_t> extra = prompt_of(batch);
  size_t extra_fed = 0;
  int steps = 0;
  auto t2 = std::chrono::steady_clock::now();
  while (extra_fed < extra.size()) {
    std::vector<BatchItem> items = decode_items();
    const size_t n = std::min(extra.size() - extra_fed, size_t(std::max<int64_t>(1, budget - batch)));
    items.push_back({&newcomer, std::span<const int32_t>(extra).subspan(extra_fed, n),
                     extra_fed + n == extra.size() ? logits.data() + size_t(batch) * size_t(vocab) : nullptr});
    extra_fed += n;
    model.forward_batch(items);
    ++steps;
  }
  const double mixed_seconds = seconds_since(t2);
  row.mixed_prefill_tok_s = double(extra.size()) / mixed_seconds;
  row.mixed_decode_tok_s = double(batch) * steps / mixed_seconds;
  return row;
}

std::vector<int> parse_batch_list(const std::string& text) {
  std::vector<int> out;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    size_t used = 0;
    int value = 0;
    try {
      value = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || value < 1 || value > 256)
      throw Error("--batch: \"" + item + "\" is not a batch size 1..256 (expected a list such as 1,2,4,8,16)");
    out.push_back(value);
    at = comma + 1;
  }
  return out;
}

}  // namespace

Runner add_bench(CLI::App& app) {
  struct Args {
    std::string model;
    int prompt = 512, generate = 128, reps = 3, depth = 0;
    std::string batch;
    RuntimeArgs runtime;
    bool json = false, profile = false;
  };
  auto args = std::make_shared<Args>();
  app.add_option("-m,--model", args->model, "checkpoint directory or .gguf file")->required();
  app.add_option("-p,--prompt", args->prompt, "prompt tokens (pp)")->capture_default_str();
  app.add_option("-n,--gen", args->generate, "generated tokens (tg)")->capture_default_str();
  app.add_option("-d,--depth", args->depth,
                 "tokens already in the context when tg starts (llama-bench -d), prefilled untimed: tg then "
                 "includes attention over them (GB/token and decode eff count the weights only)")
      ->capture_default_str();
  args->runtime.add_to(app, "context limit (raised to fit the prompt, and depth + generation)");
  app.add_option("--batch", args->batch,
                 "batch sizes, e.g. 1,2,4,8,16: B sequences prefill -p tokens each and decode -n tokens together in "
                 "batched steps (llama-batched-bench); prints aggregate and per-sequence tok/s and the prefill speed "
                 "of one more prompt under the B decodes")
      ->type_name("LIST");
  app.add_option("--reps", args->reps, "repetitions; medians are reported")->capture_default_str();
  app.add_flag("--json", args->json, "print JSON instead of a table");
  app.add_flag("--profile", args->profile,
               "after the reps, one more tg run with every weight product timed: per product family its calls, "
               "MB, ms and GB/s per token against the read bandwidth, and the time outside products (not with --batch)");
  return [args] {
    if (args->prompt <= 0 || args->generate <= 0 || args->reps <= 0) throw Error("-p, -n and --reps must be positive");
    if (args->depth < 0) throw Error("-d must be zero or positive, got " + std::to_string(args->depth));
    if (args->profile && !args->batch.empty()) throw Error("--profile times single-sequence decode; leave out --batch");
    RunOptions run = args->runtime.apply();
    int threads = kernels::thread_count();
    auto start = std::chrono::steady_clock::now();
    if (!args->batch.empty()) {
      const std::vector<int> batches = parse_batch_list(args->batch);
      auto ckpt = open_for_inference(args->model, args->runtime);
      run.context = std::max<int64_t>(run.context, args->prompt + args->generate + 8);
      run.max_chunk = std::max<int64_t>(512, *std::max_element(batches.begin(), batches.end()) + 1);
      InklingModel model(*ckpt, run);
      std::fprintf(stderr, "loaded %s in %.2f s; warm-up ...\n", args->model.c_str(), seconds_since(start));
      bench_batch(model, 1, std::min(args->prompt, 64), 4);
      nlohmann::ordered_json rows = nlohmann::ordered_json::array();
      std::vector<BatchRow> table;
      for (int batch : batches) {
        std::vector<double> pp, tg, per, mixed_pp, mixed_tg;
        for (int rep = 0; rep < args->reps; ++rep) {
          const BatchRow r = bench_batch(model, batch, args->prompt, args->generate);
          pp.push_back(r.pp_tok_s);
          tg.push_back(r.tg_tok_s);
          per.push_back(r.tg_per_sequence);
          mixed_pp.push_back(r.mixed_prefill_tok_s);
          mixed_tg.push_back(r.mixed_decode_tok_s);
          std::fprintf(stderr, "B=%d rep %d/%d: pp %.1f tok/s, tg %.2f tok/s (%.2f per sequence), pp under load %.1f\n",
                       batch, rep + 1, args->reps, r.pp_tok_s, r.tg_tok_s, r.tg_per_sequence, r.mixed_prefill_tok_s);
        }
        BatchRow m{batch, median(pp), median(tg), median(per), median(mixed_pp), median(mixed_tg)};
        table.push_back(m);
        rows.push_back({{"batch", batch}, {"pp_tok_s", m.pp_tok_s}, {"tg_tok_s", m.tg_tok_s},
                        {"tg_per_sequence_tok_s", m.tg_per_sequence}, {"pp_under_decode_tok_s", m.mixed_prefill_tok_s},
                        {"tg_during_pp_tok_s", m.mixed_decode_tok_s}, {"tg_all", tg}, {"pp_all", pp}});
      }
      struct rusage usage;
      getrusage(RUSAGE_SELF, &usage);
      const double peak_rss_gb = double(usage.ru_maxrss) * 1024.0 / 1e9;
      const double state_mib = double(model.state_bytes(run.context)) / 1048576.0;
      if (args->json) {
        nlohmann::ordered_json out = {{"model", args->model}, {"layout", layout_label(ckpt->layout(), ckpt->config().quantization)},
                                      {"isa", kernel_label()}, {"threads", threads},
                                      {"precision", args->runtime.precision_label()},
                                      {"pp_tokens", args->prompt}, {"tg_tokens", args->generate},
                                      {"context", run.context}, {"state_mib_per_sequence", state_mib},
                                      {"peak_rss_gb", peak_rss_gb}, {"reps", args->reps}, {"batches", rows}};
        std::cout << out.dump(2) << "\n";
        return 0;
      }
      std::printf("%s, %s, %s, %s, %d threads; pp%d, tg%d per sequence; context %lld: %.1f MiB of KV + state per "
                  "sequence; peak RSS %.2f GB\n",
                  std::filesystem::path(args->model).filename().c_str(), layout_label(ckpt->layout(), ckpt->config().quantization).c_str(),
                  args->runtime.precision_label().c_str(), kernel_label().c_str(), threads, args->prompt, args->generate,
                  (long long)run.context, state_mib, peak_rss_gb);
      std::printf("| B | pp tok/s (all) | tg tok/s (all) | tg tok/s per sequence | tg vs B=1 | pp tok/s under B decodes | tg tok/s meanwhile |\n");
      std::printf("|---|---|---|---|---|---|---|\n");
      const double single = table.front().batch == 1 ? table.front().tg_tok_s : 0.0;
      for (const BatchRow& r : table) {
        char ratio[32] = "-";
        if (single > 0) std::snprintf(ratio, sizeof ratio, "%.2fx", r.tg_tok_s / single);
        std::printf("| %d | %.1f | %.2f | %.2f | %s | %.1f | %.2f |\n", r.batch, r.pp_tok_s, r.tg_tok_s,
                    r.tg_per_sequence, ratio, r.mixed_prefill_tok_s, r.mixed_decode_tok_s);
      }
      return 0;
    }
    auto ckpt = open_for_inference(args->model, args->runtime);
    run.context = std::max<int64_t>(run.context, std::max(args->prompt, args->depth + args->generate) + 8);
    run.max_chunk = std::min(std::max(args->prompt, args->depth), 512);
    InklingModel model(*ckpt, run);
    double load_seconds = seconds_since(start);
    std::fprintf(stderr, "loaded %s in %.2f s; measuring the machine ...\n", args->model.c_str(), load_seconds);
    double fma_peak = kernels::measure_fma_peak_gflops(threads);

    std::vector<int32_t> prompt(static_cast<size_t>(args->prompt));
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 7919 + 13) % size_t(model.vocab()));
    std::vector<int32_t> context(static_cast<size_t>(args->depth));
    for (size_t i = 0; i < context.size(); ++i) context[i] = int32_t((i * 104729 + 7) % size_t(model.vocab()));
    const std::string tg_label =
        "tg" + std::to_string(args->generate) + (args->depth > 0 ? " @ d" + std::to_string(args->depth) : "");
    std::vector<float> logits(static_cast<size_t>(model.vocab()));
    {
      // Untimed warm-up, as llama-bench does: pages the mmapped weights in and starts the
      // workers, so rep 1 measures the engine rather than the page cache.
      std::fprintf(stderr, "warm-up ...\n");
      SequenceState warm = model.new_sequence();
      model.prefill(warm, prompt, logits.data());
    }
    // The bandwidth is measured right before and right after each decode run, and the run is
    // compared with their mean: on a shared host it drifts by tens of percent within seconds,
    // and the efficiency of a run is only meaningful against its own.
    std::vector<double> pp, tg, bandwidths, efficiencies, bandwidths_before, bandwidths_after;
    const double bytes_per_token = double(model.active_weight_bytes());
    // The read loop runs over the copied weights themselves, as many bytes as a token reads (at
    // least 256 MiB): the same pages, the same working set. The same loop is up to ~5% faster over
    // a smaller buffer (here, fast host phase: 128 MiB 98 GB/s, 256 MiB 81, 1.2 and 1.9 GB 77-78),
    // a speed no decode of a GB-sized model can reach. Weights left in the files (--mmap, or no
    // huge pages) are measured against a 256 MiB buffer, which also counts toward the peak RSS.
    const std::span<const uint8_t> weights = ckpt->resident_memory();
    constexpr size_t kBufferProbeBytes = size_t(256) << 20;
    const size_t probe_bytes = std::min(weights.size(), std::max(kBufferProbeBytes, size_t(bytes_per_token)));
    const bool probe_weights = !weights.empty();
    auto measure_bandwidth = [&] {
      return probe_weights ? kernels::measure_read_bandwidth_gbs(weights.data(), probe_bytes, threads)
                           : kernels::measure_read_bandwidth_gbs(kBufferProbeBytes, threads);
    };
    char probe_label[96];
    if (probe_weights)
      std::snprintf(probe_label, sizeof(probe_label), "%.2f GB of the copied weights", double(probe_bytes) / 1e9);
    else
      std::snprintf(probe_label, sizeof(probe_label), "a 256 MiB buffer");
    std::fprintf(stderr, "read bandwidth: measured over %s; weight streams prefetched %s (INKLING_PREFETCH)\n", probe_label,
                 kernels::stream_prefetch_name(kernels::active_stream_prefetch()));
    int64_t tg_end_position = 0;  // tokens in the decode sequence after tg: depth + generated
    for (int rep = 0; rep < args->reps; ++rep) {
      std::fprintf(stderr, "rep %d/%d: pp%d ...", rep + 1, args->reps, args->prompt);
      SequenceState state = model.new_sequence();
      auto t0 = std::chrono::steady_clock::now();
      model.prefill(state, prompt, logits.data());
      pp.push_back(double(args->prompt) / seconds_since(t0));
      std::fprintf(stderr, " %.1f tok/s, %s ...", pp.back(), tg_label.c_str());
      // tg starts from an empty context, as llama-bench's tg does, or after -d tokens.
      SequenceState decode_state = model.new_sequence();
      if (!context.empty()) model.prefill(decode_state, context, logits.data());
      bandwidths_before.push_back(measure_bandwidth());
      int32_t token = 1;
      auto t1 = std::chrono::steady_clock::now();
      for (int i = 0; i < args->generate; ++i) {
        model.prefill(decode_state, std::span<const int32_t>(&token, 1), logits.data());
        token = argmax(logits);
      }
      tg.push_back(double(args->generate) / seconds_since(t1));
      tg_end_position = decode_state.position;
      bandwidths_after.push_back(measure_bandwidth());
      bandwidths.push_back(0.5 * (bandwidths_before.back() + bandwidths_after.back()));
      efficiencies.push_back(bytes_per_token * tg.back() / (bandwidths.back() * 1e9));
      std::fprintf(stderr, " %.2f tok/s (read bandwidth %.1f GB/s before, %.1f after: %.0f%%)\n", tg.back(),
                   bandwidths_before.back(), bandwidths_after.back(), 100.0 * efficiencies.back());
    }
    // The profiled run comes after the timed reps, so its timers never touch their numbers.
    nlohmann::ordered_json profile = nlohmann::ordered_json::array();
    double profile_step_seconds = 0, profile_bandwidth = 0;
    if (args->profile) {
      std::fprintf(stderr, "profile: %s with every product timed ...\n", tg_label.c_str());
      SequenceState decode_state = model.new_sequence();
      if (!context.empty()) model.prefill(decode_state, context, logits.data());
      const double before = measure_bandwidth();
      kernels::reset_product_profile();
      kernels::set_product_profiling(true);
      int32_t token = 1;
      auto t1 = std::chrono::steady_clock::now();
      for (int i = 0; i < args->generate; ++i) {
        model.prefill(decode_state, std::span<const int32_t>(&token, 1), logits.data());
        token = argmax(logits);
      }
      profile_step_seconds = seconds_since(t1) / double(args->generate);
      kernels::set_product_profiling(false);
      profile_bandwidth = 0.5 * (before + measure_bandwidth());
      double in_products = 0;
      for (const kernels::ProductTimes& p : kernels::product_profile()) {
        const double per_token = p.seconds / double(args->generate), bytes = double(p.weight_bytes) / double(args->generate);
        in_products += per_token;
        profile.push_back({{"product", p.label}, {"calls_per_token", double(p.calls) / double(args->generate)},
                           {"mb_per_token", bytes / 1e6}, {"ms_per_token", per_token * 1e3},
                           {"gb_s", per_token > 0 ? bytes / per_token / 1e9 : 0.0},
                           {"share_of_step", per_token / profile_step_seconds}});
      }
      profile.push_back({{"product", "outside products"}, {"ms_per_token", (profile_step_seconds - in_products) * 1e3},
                         {"share_of_step", 1.0 - in_products / profile_step_seconds}});
    }
    double pp_median = median(pp), tg_median = median(tg);
    double bandwidth = median(bandwidths), efficiency = median(efficiencies);
    double flops = 0.0;
    for (int64_t pos = 0; pos < args->prompt; ++pos) flops += flops_per_prompt_token(*ckpt, pos);
    double prefill_gflops = flops / double(args->prompt) * pp_median / 1e9;
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    double peak_rss_gb = double(usage.ru_maxrss) * 1024.0 / 1e9;
    nlohmann::ordered_json out = {
        {"model", args->model}, {"layout", layout_label(ckpt->layout(), ckpt->config().quantization)}, {"isa", kernel_label()},
        {"stream_prefetch", kernels::stream_prefetch_name(kernels::active_stream_prefetch())}, {"threads", threads}, {"kv_dtype", args->runtime.kv_dtype}, {"precision", args->runtime.precision_label()},
        {"pp_tokens", args->prompt}, {"pp_tok_s", pp_median}, {"tg_tokens", args->generate}, {"tg_depth", args->depth},
        {"tg_end_position", tg_end_position}, {"tg_tok_s", tg_median},
        {"weight_bytes_per_token", int64_t(bytes_per_token)}, {"read_bandwidth_gb_s", bandwidth},
        {"read_bandwidth_over", probe_label},
        {"decode_efficiency", efficiency}, {"prefill_gflop_s", prefill_gflops}, {"fma_peak_gflop_s", fma_peak},
        {"prefill_efficiency", prefill_gflops / fma_peak}, {"load_s", load_seconds}, {"peak_rss_gb", peak_rss_gb},
        {"weights_gb", double(ckpt->file_bytes()) / 1e9},
        {"weight_memory", weight_memory_label(*ckpt)},
        {"huge_page_gb", double(ckpt->resident_huge_page_bytes()) / 1e9}, {"reps", args->reps},
        {"pp_all", pp}, {"tg_all", tg}, {"read_bandwidth_all", bandwidths},
        {"read_bandwidth_before_all", bandwidths_before}, {"read_bandwidth_after_all", bandwidths_after}, {"decode_efficiency_all", efficiencies}};
    if (args->profile)
      out["decode_profile"] = {{"step_ms", profile_step_seconds * 1e3}, {"read_bandwidth_gb_s", profile_bandwidth},
                               {"products", profile}};
    if (args->json) {
      std::cout << out.dump(2) << "\n";
      return 0;
    }
    std::printf("| model | layout | precision | isa | threads | weights | pp%d tok/s | %s tok/s | GB/token | read GB/s | decode eff | prefill GFLOP/s | FMA peak | load s | peak RSS GB |\n",
                args->prompt, tg_label.c_str());
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    std::printf("| %s | %s | %s | %s | %d | %s | %.1f | %.2f | %.3f | %.1f | %.0f%% | %.1f | %.1f | %.2f | %.2f |\n",
                std::filesystem::path(args->model).filename().c_str(), layout_label(ckpt->layout(), ckpt->config().quantization).c_str(),
                args->runtime.precision_label().c_str(), kernel_label().c_str(),
                threads, weight_memory_label(*ckpt), pp_median, tg_median, bytes_per_token / 1e9, bandwidth, 100.0 * efficiency, prefill_gflops,
                fma_peak, load_seconds, peak_rss_gb);
    if (args->profile) {
      std::printf("\ndecode profile: %.2f ms a token (%.2f tok/s with the timers), read bandwidth %.1f GB/s\n\n",
                  profile_step_seconds * 1e3, 1.0 / profile_step_seconds, profile_bandwidth);
      std::printf("| product | calls/token | MB/token | ms/token | GB/s | of read bandwidth | of the step |\n");
      std::printf("|---|---|---|---|---|---|---|\n");
      for (const auto& p : profile) {
        const double share = p["share_of_step"].get<double>() * 100.0;
        if (!p.contains("gb_s")) {
          std::printf("| %s | | | %.3f | | | %.1f%% |\n", p["product"].get<std::string>().c_str(),
                      p["ms_per_token"].get<double>(), share);
          continue;
        }
        std::printf("| %s | %.1f | %.1f | %.3f | %.1f | %.0f%% | %.1f%% |\n", p["product"].get<std::string>().c_str(),
                    p["calls_per_token"].get<double>(), p["mb_per_token"].get<double>(), p["ms_per_token"].get<double>(),
                    p["gb_s"].get<double>(), 100.0 * p["gb_s"].get<double>() / profile_bandwidth, share);
      }
    }
    return 0;
  };
}

}  // namespace inkling::cli
