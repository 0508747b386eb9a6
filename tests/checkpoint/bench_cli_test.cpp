// `inkling bench` on a tiny synthetic checkpoint: the report must agree with its own per-rep
// measurements (efficiency = bytes per token x tg / bandwidth, medians of the reps), carry the
// requested sizes, and reject bad arguments with one error line. Speeds themselves are not
// checked: they belong to the machine.
#include <gtest/gtest.h>

#include <algorithm>

#include "checkpoint_test_util.h"

namespace inkling {
namespace {

using namespace ckpt_test;

double median_of(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

std::vector<double> doubles(const nlohmann::json& array) { return array.get<std::vector<double>>(); }

TEST(BenchCli, JsonAgreesWithItsOwnMeasurements) {
  const fs::path dir = synth_tiny("mlx-4bit");
  ProcessResult result =
      run_inkling({"bench", "-m", dir.string(), "-p", "6", "-n", "5", "--reps", "4", "-t", "2", "--json"});
  ASSERT_EQ(result.exit_code, 0) << result.describe();
  const nlohmann::json report = nlohmann::json::parse(result.out);

  EXPECT_EQ(report["layout"], "mlx-4bit");
  EXPECT_EQ(report["precision"], "exact");
  EXPECT_EQ(report["threads"], 2);
  EXPECT_EQ(report["pp_tokens"], 6);
  EXPECT_EQ(report["tg_tokens"], 5);
  EXPECT_EQ(report["reps"], 4);
  EXPECT_EQ(report["tg_depth"], 0);
  EXPECT_EQ(report["tg_end_position"], 5);  // tg starts from an empty context

  const std::vector<double> tg = doubles(report["tg_all"]), pp = doubles(report["pp_all"]);
  const std::vector<double> before = doubles(report["read_bandwidth_before_all"]);
  const std::vector<double> after = doubles(report["read_bandwidth_after_all"]);
  const std::vector<double> bandwidth = doubles(report["read_bandwidth_all"]);
  const std::vector<double> efficiency = doubles(report["decode_efficiency_all"]);
  for (const auto* series : {&tg, &pp, &before, &after, &bandwidth, &efficiency}) ASSERT_EQ(series->size(), 4u);

  // Bytes per token: the streamed weights, less than the files (the token embedding is
  // gathered a row at a time, and only the routed experts a token picks are read).
  const double bytes = report["weight_bytes_per_token"];
  EXPECT_GT(bytes, 0.0);
  EXPECT_LT(bytes, double(report["weights_gb"]) * 1e9);

  for (size_t rep = 0; rep < 4; ++rep) {
    EXPECT_GT(tg[rep], 0.0);
    EXPECT_GT(pp[rep], 0.0);
    EXPECT_GT(before[rep], 0.0);
    EXPECT_GT(after[rep], 0.0);
    EXPECT_NEAR(bandwidth[rep], 0.5 * (before[rep] + after[rep]), 1e-9 * bandwidth[rep]) << "rep " << rep;
    const double expected = bytes * tg[rep] / (bandwidth[rep] * 1e9);
    EXPECT_NEAR(efficiency[rep], expected, 1e-9 * expected) << "rep " << rep;
  }
  // Four reps: the median is the mean of the middle two, which no single rep is.
  EXPECT_DOUBLE_EQ(double(report["tg_tok_s"]), median_of(tg));
  EXPECT_DOUBLE_EQ(double(report["pp_tok_s"]), median_of(pp));
  EXPECT_DOUBLE_EQ(double(report["read_bandwidth_gb_s"]), median_of(bandwidth));
  EXPECT_DOUBLE_EQ(double(report["decode_efficiency"]), median_of(efficiency));
  EXPECT_GT(double(report["fma_peak_gflop_s"]), 0.0);
  EXPECT_NEAR(double(report["prefill_efficiency"]),
              double(report["prefill_gflop_s"]) / double(report["fma_peak_gflop_s"]), 1e-9);
  EXPECT_GT(double(report["peak_rss_gb"]), 0.0);
}

// The read loop runs over the copied weights themselves (as many bytes as a token reads, all of
// a tiny model's); weights left in the files are measured against a buffer. Both say so.
TEST(BenchCli, ProbeSaysWhatItRead) {
  const fs::path dir = synth_tiny("nvfp4");
  for (const bool mapped : {false, true}) {
    std::vector<std::string> args = {"bench", "-m", dir.string(), "-p", "4", "-n", "2", "--reps", "1", "--json"};
    if (mapped) args.push_back("--mmap");
    ProcessResult result = run_inkling(args);
    ASSERT_EQ(result.exit_code, 0) << result.describe();
    const nlohmann::json report = nlohmann::json::parse(result.out);
    const std::string over = report["read_bandwidth_over"];
    if (mapped) {
      EXPECT_EQ(over, "a 256 MiB buffer");
      EXPECT_EQ(report["weight_memory"], "mmap");
    } else {
      EXPECT_NE(over.find(" GB of the copied weights"), std::string::npos) << over;
      EXPECT_EQ(report["weight_memory"], "huge pages");
    }
    EXPECT_NE(result.err.find("read bandwidth: measured over " + over), std::string::npos) << result.describe();
    EXPECT_GT(double(report["read_bandwidth_gb_s"]), 0.0);
  }
}

TEST(BenchCli, TableNamesTheSizesAndPrecision) {
  const fs::path dir = synth_tiny("original-bf16");
  ProcessResult result =
      run_inkling({"bench", "-m", dir.string(), "-p", "4", "-n", "3", "--reps", "1", "-t", "1", "--fast"});
  ASSERT_EQ(result.exit_code, 0) << result.describe();
  std::vector<std::string> lines;
  std::stringstream stream(result.out);
  for (std::string line; std::getline(stream, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 3u) << result.describe();  // header, separator, one row
  EXPECT_NE(lines[0].find("| pp4 tok/s | tg3 tok/s |"), std::string::npos) << lines[0];
  EXPECT_EQ(lines[2].rfind("| " + dir.filename().string() + " | original-bf16 | fast | ", 0), 0u) << lines[2];
  EXPECT_NE(lines[2].find(" | 1 | "), std::string::npos) << lines[2];  // threads
}

// -d: tg runs after that many tokens; the context grows to hold them whatever --ctx says.
TEST(BenchCli, DepthPrefillsTheDecodeSequence) {
  const fs::path dir = synth_tiny("nvfp4");
  ProcessResult json = run_inkling(
      {"bench", "-m", dir.string(), "-p", "4", "-n", "3", "-d", "20", "--ctx", "4", "--reps", "1", "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.describe();
  const nlohmann::json report = nlohmann::json::parse(json.out);
  EXPECT_EQ(report["tg_depth"], 20);
  EXPECT_EQ(report["tg_end_position"], 23);
  EXPECT_GT(double(report["tg_tok_s"]), 0.0);
  ProcessResult table = run_inkling({"bench", "-m", dir.string(), "-p", "4", "-n", "3", "-d", "9", "--reps", "1"});
  ASSERT_EQ(table.exit_code, 0) << table.describe();
  EXPECT_NE(table.out.find("| pp4 tok/s | tg3 @ d9 tok/s |"), std::string::npos) << table.out;
  ProcessResult negative = run_inkling({"bench", "-m", dir.string(), "-d", "-1"});
  EXPECT_EQ(negative.exit_code, 2) << negative.describe();
  ASSERT_EQ(negative.error_lines().size(), 1u) << negative.describe();
  EXPECT_NE(negative.error_lines()[0].find("-d must be zero or positive"), std::string::npos) << negative.error_lines()[0];
}

// --profile: one more tg run with the products timed. Every weight a token streams but its
// embedding row is in some product family, so their bytes add up to the report's bytes per token; each family's GB/s is
// its bytes over its time, and the families and the time outside them make up the step.
TEST(BenchCli, ProfileAccountsForEveryWeightByte) {
  const fs::path dir = synth_tiny("original-bf16");
  ProcessResult result =
      run_inkling({"bench", "-m", dir.string(), "-p", "4", "-n", "4", "--reps", "1", "--profile", "--json"});
  ASSERT_EQ(result.exit_code, 0) << result.describe();
  const nlohmann::json report = nlohmann::json::parse(result.out);
  const nlohmann::json& profile = report["decode_profile"];
  const double step_ms = profile["step_ms"];
  EXPECT_GT(step_ms, 0.0);
  EXPECT_GT(double(profile["read_bandwidth_gb_s"]), 0.0);
  double mb = 0, share = 0;
  std::vector<std::string> families;
  for (const nlohmann::json& p : profile["products"]) {
    families.push_back(p["product"]);
    share += double(p["share_of_step"]);
    EXPECT_NEAR(double(p["share_of_step"]), double(p["ms_per_token"]) / step_ms, 1e-9) << p.dump();
    if (p["product"] == "outside products") continue;
    mb += double(p["mb_per_token"]);
    if (double(p["ms_per_token"]) > 0) {
      EXPECT_NEAR(double(p["gb_s"]), double(p["mb_per_token"]) / double(p["ms_per_token"]),
                  1e-9 * double(p["gb_s"])) << p.dump();
    }
  }
  // All but the one embedding row a token gathers (64 bf16 values here).
  EXPECT_NEAR(mb * 1e6 + 128, double(report["weight_bytes_per_token"]), 1e-9 * double(report["weight_bytes_per_token"]));
  EXPECT_NEAR(share, 1.0, 1e-9);
  for (const char* family : {"attention q/k/v/r", "attention output", "dense gate/up", "dense down", "router",
                             "experts gate/up", "experts down", "head", "outside products"})
    EXPECT_NE(std::find(families.begin(), families.end(), family), families.end()) << family;
  EXPECT_EQ(std::find(families.begin(), families.end(), "other products"), families.end());

  ProcessResult table = run_inkling({"bench", "-m", dir.string(), "-p", "4", "-n", "2", "--reps", "1", "--profile"});
  ASSERT_EQ(table.exit_code, 0) << table.describe();
  EXPECT_NE(table.out.find("| product | calls/token | MB/token | ms/token | GB/s | of read bandwidth | of the step |"),
            std::string::npos) << table.out;
  ProcessResult batched = run_inkling({"bench", "-m", dir.string(), "--batch", "1,2", "--profile"});
  EXPECT_EQ(batched.exit_code, 2) << batched.describe();
  ASSERT_EQ(batched.error_lines().size(), 1u) << batched.describe();
  EXPECT_NE(batched.error_lines()[0].find("leave out --batch"), std::string::npos) << batched.error_lines()[0];
}

TEST(BenchCli, BadArgumentsExitTwoWithOneLine) {
  const std::string dir = synth_tiny("original-bf16").string();
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"bench", "-m", dir, "-p", "0"}, {"bench", "-m", dir, "-n", "-3"},
        {"bench", "-m", dir, "--reps", "0"}}) {
    ProcessResult result = run_inkling(args);
    EXPECT_TRUE(result.exited) << result.describe();
    EXPECT_EQ(result.exit_code, 2) << result.describe();
    const std::vector<std::string> errors = result.error_lines();
    ASSERT_EQ(errors.size(), 1u) << result.describe();
    EXPECT_NE(errors[0].find("must be positive"), std::string::npos) << errors[0];
  }
  ProcessResult missing = run_inkling({"bench", "-m", (fs::temp_directory_path() / "no_such_ckpt_dir").string()});
  EXPECT_EQ(missing.exit_code, 2) << missing.describe();
  ASSERT_EQ(missing.error_lines().size(), 1u) << missing.describe();
  EXPECT_NE(missing.error_lines()[0].find("no_such_ckpt_dir"), std::string::npos) << missing.error_lines()[0];
}

}  // namespace
}  // namespace inkling
