// The reader against the project's writer (write_safetensors / write_sharded).
#include <gtest/gtest.h>

#include "io/safetensors.h"
#include "safetensors_test_util.h"

namespace inkling {
namespace {

// Byte i of tensor t is t*31 + i (mod 256): every tensor's bytes differ.
void fill_pattern(const TensorSpec& spec, std::span<uint8_t> out) {
  uint8_t seed = uint8_t(spec.name.size() * 31 + uint8_t(spec.name.back()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = uint8_t(seed + i);
}

std::vector<uint8_t> pattern(const TensorSpec& spec) {
  std::vector<uint8_t> out(spec.nbytes());
  fill_pattern(spec, out);
  return out;
}

class WriterRoundTrip : public testing::TempDirTest {};

TEST_F(WriterRoundTrip, SingleFile) {
  std::vector<TensorSpec> specs = {{"a.weight", DType::BF16, {3, 5}},
                                   {"b.scales", DType::F8_E4M3, {7}},
                                   {"c.bias", DType::F32, {}},
                                   {"d.empty", DType::I32, {0, 4}}};
  const auto path = dir_ / "model.safetensors";
  write_safetensors(path, specs, fill_pattern, {{"format", "pt"}});
  auto file = SafetensorsFile::open(path);
  ASSERT_EQ(file.entries().size(), specs.size());
  EXPECT_EQ(file.metadata().at("format"), "pt");
  for (const TensorSpec& spec : specs) {
    TensorView view = file.get(spec.name);
    EXPECT_EQ(view.dtype, spec.dtype) << spec.name;
    EXPECT_EQ(view.shape, spec.shape) << spec.name;
    EXPECT_EQ(std::vector<uint8_t>(view.data, view.data + view.nbytes), pattern(spec)) << spec.name;
  }
  // The writer pads the header so the data section starts 8-byte aligned in the mapping.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(file.get("a.weight").data) % 8, 0u);
}

TEST_F(WriterRoundTrip, ShardedDirectory) {
  std::vector<TensorSpec> specs;
  for (int layer = 0; layer < 6; ++layer)
    specs.push_back({"layers." + std::to_string(layer) + ".w", DType::F16, {16, 8}});  // 256 B each
  specs.push_back({"norm", DType::F32, {8}});
  write_sharded(dir_, specs, fill_pattern, /*max_shard_bytes=*/600);
  TensorStore store = TensorStore::open_dir(dir_);
  EXPECT_GE(store.files().size(), 3u);
  EXPECT_EQ(store.names().size(), specs.size());
  for (const TensorSpec& spec : specs) {
    TensorView view = store.get(spec.name);
    EXPECT_EQ(view.shape, spec.shape);
    EXPECT_EQ(std::vector<uint8_t>(view.data, view.data + view.nbytes), pattern(spec)) << spec.name;
  }
}

}  // namespace
}  // namespace inkling
