// GgufFile / GgufModelFiles: strict validation (one test per rule), typed metadata reads,
// zero-copy tensor views and split sets.
#include <gtest/gtest.h>

#include <fstream>

#include "gguf_test_util.h"
#include "io/gguf.h"
#include "safetensors_test_util.h"

namespace inkling {
namespace {

using testing::expect_error;
using testing::GgufBuilder;

GgufFile parse(const GgufBuilder& builder, const std::string& label = "test.gguf") {
  return GgufFile::from_bytes(builder.build(), label);
}

void expect_parse_error(const GgufBuilder& builder, std::vector<std::string> phrases) {
  phrases.push_back("bad.gguf: ");
  expect_error([&] { GgufFile::from_bytes(builder.build(), "bad.gguf"); }, phrases);
}

void expect_bytes_error(std::vector<uint8_t> bytes, std::vector<std::string> phrases) {
  phrases.push_back("bad.gguf: ");
  expect_error([&] { GgufFile::from_bytes(std::move(bytes), "bad.gguf"); }, phrases);
}

GgufBuilder with_one_tensor() {
  GgufBuilder builder;
  builder.add_tensor("w", GgmlType::F32, {4, 2});
  return builder;
}

// ---- a good file ----

TEST(GgufRead, MetadataAndTensors) {
  GgufBuilder builder;
  builder.add_string("general.architecture", "inkling");
  builder.add_u32("inkling.block_count", 4);
  builder.add_f32("inkling.logit_scale_denom", 2.5f);
  builder.add_bool("flag", true);
  builder.add_i32("negative", -3);
  builder.add_array<uint8_t>("inkling.sliding_window_pattern", GgufValueType::Bool, {1, 1, 0});
  builder.add_array<int32_t>("inkling.attention.head_count_kv", GgufValueType::I32, {2, 2, 4});
  builder.add_array<float>("floats", GgufValueType::F32, {0.5f, -1.0f});
  builder.add_string_array("tokenizer.ggml.tokens", {"a", "", "bc"});
  builder.add_tensor("token_embd.weight", GgmlType::F32, {8, 3});
  builder.add_tensor("blk.0.ffn_down.weight", GgmlType::Q8_0, {64, 2});
  builder.add_tensor("scalar", GgmlType::F16, {});
  const std::vector<uint8_t> image = builder.build();
  GgufFile file = GgufFile::from_bytes(image, "good.gguf");

  EXPECT_EQ(file.version(), 3u);
  EXPECT_EQ(file.alignment(), 32u);
  EXPECT_EQ(file.keys().size(), 9u);
  EXPECT_EQ(file.keys().front(), "general.architecture");
  EXPECT_EQ(file.string("general.architecture"), "inkling");
  EXPECT_EQ(file.unsigned_integer("inkling.block_count"), 4u);
  EXPECT_EQ(file.signed_integer("inkling.block_count"), 4);
  EXPECT_FLOAT_EQ(float(file.number("inkling.logit_scale_denom")), 2.5f);
  EXPECT_EQ(file.number("inkling.block_count"), 4.0);
  EXPECT_TRUE(file.boolean("flag"));
  EXPECT_EQ(file.signed_integer("negative"), -3);
  EXPECT_EQ(file.integer_array("inkling.sliding_window_pattern"), (std::vector<int64_t>{1, 1, 0}));
  EXPECT_EQ(file.integer_array("inkling.attention.head_count_kv"), (std::vector<int64_t>{2, 2, 4}));
  EXPECT_EQ(file.float_array("floats"), (std::vector<float>{0.5f, -1.0f}));
  const auto& tokens = file.string_array("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 3u);
  EXPECT_EQ(tokens[0], "a");
  EXPECT_EQ(tokens[1], "");
  EXPECT_EQ(tokens[2], "bc");

  ASSERT_EQ(file.tensors().size(), 3u);
  EXPECT_EQ(file.data_offset() % 32, 0u);
  const GgufTensor* embed = file.find_tensor("token_embd.weight");
  ASSERT_NE(embed, nullptr);
  EXPECT_EQ(embed->type, GgmlType::F32);
  EXPECT_EQ(embed->dims, (std::vector<int64_t>{8, 3}));
  EXPECT_EQ(embed->shape(), (std::vector<int64_t>{3, 8}));
  EXPECT_EQ(embed->rows(), 3);
  EXPECT_EQ(embed->nbytes, 96u);
  EXPECT_EQ(embed->offset, 0u);
  const GgufTensor* down = file.find_tensor("blk.0.ffn_down.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->nbytes, 2u * 2 * 34);
  EXPECT_EQ(down->offset, 96u);  // 96 is a multiple of 32: no padding
  const GgufTensor* scalar = file.find_tensor("scalar");
  ASSERT_NE(scalar, nullptr);
  EXPECT_EQ(scalar->elements(), 1);
  EXPECT_EQ(scalar->offset, 96u + 160u);  // 136 padded to 160
  EXPECT_EQ(file.find_tensor("missing"), nullptr);
  // Views into the image, bytes as written.
  const auto& written = builder.tensors()[1].bytes;
  EXPECT_EQ(std::vector<uint8_t>(down->data, down->data + down->nbytes), written);
}

TEST(GgufRead, VersionTwoIsTheSameLayout) {
  GgufBuilder builder = with_one_tensor();
  builder.version = 2;
  GgufFile file = parse(builder);
  EXPECT_EQ(file.version(), 2u);
  EXPECT_EQ(file.tensors().size(), 1u);
}

TEST(GgufRead, DeclaredAlignmentIsHonoured) {
  GgufBuilder builder;
  builder.alignment = 64;
  builder.add_u32("general.alignment", 64);
  builder.add_tensor("a", GgmlType::F32, {3});
  builder.add_tensor("b", GgmlType::F32, {5});
  GgufFile file = parse(builder);
  EXPECT_EQ(file.alignment(), 64u);
  EXPECT_EQ(file.data_offset() % 64, 0u);
  EXPECT_EQ(file.find_tensor("b")->offset, 64u);
  // The same layout read with the default alignment of 32 puts "b" in the wrong place.
  GgufBuilder undeclared;
  undeclared.alignment = 64;
  undeclared.add_tensor("a", GgmlType::F32, {3});
  undeclared.add_tensor("b", GgmlType::F32, {5});
  expect_parse_error(undeclared, {"tensor \"b\"", "offset 64 is not where it belongs, 32"});
}

TEST(GgufRead, LastTensorNeedNotBePadded) {
  GgufBuilder builder;
  builder.add_tensor("a", GgmlType::F32, {3});
  builder.pad_last_tensor = false;
  EXPECT_EQ(parse(builder).find_tensor("a")->nbytes, 12u);
}

TEST(GgufRead, NoTensors) {
  GgufBuilder builder;
  builder.add_string("general.architecture", "inkling");
  GgufFile file = parse(builder);
  EXPECT_TRUE(file.tensors().empty());
}

TEST(GgufRead, FromDiskIsMapped) {
  const auto path = std::filesystem::temp_directory_path() / ("inkling_gguf_disk_" + std::to_string(::getpid()) + ".gguf");
  GgufBuilder builder = with_one_tensor();
  builder.write(path);
  {
    GgufFile file = GgufFile::open(path);
    EXPECT_EQ(file.file_bytes(), std::filesystem::file_size(path));
    const GgufTensor* w = file.find_tensor("w");
    ASSERT_NE(w, nullptr);
    EXPECT_EQ(std::vector<uint8_t>(w->data, w->data + w->nbytes), builder.tensors()[0].bytes);
    GgufFile moved = std::move(file);
    EXPECT_EQ(moved.find_tensor("w")->data, w->data);
  }
  std::filesystem::remove(path);
  expect_error([&] { GgufFile::open(path); }, {path.string(), "cannot open"});
}

// ---- framing ----

TEST(GgufValidation, Magic) {
  expect_bytes_error({}, {"the GGUF magic needs 4 bytes at offset 0 but the file has 0 left"});
  expect_bytes_error({'G', 'G', 'M', 'L', 3, 0, 0, 0}, {"not a GGUF file (it starts with \"GGML\""});
}

TEST(GgufValidation, Version) {
  GgufBuilder builder;
  builder.version = 1;
  expect_parse_error(builder, {"GGUF version 1 is not supported"});
  builder.version = 4;
  expect_parse_error(builder, {"GGUF version 4 is not supported"});
  builder.version = 0x03000000;
  expect_parse_error(builder, {"big-endian"});
}

TEST(GgufValidation, TruncatedHeader) {
  std::vector<uint8_t> bytes = GgufBuilder().build();
  bytes.resize(12);
  expect_bytes_error(bytes, {"the tensor count needs 8 bytes at offset 8 but the file has 4 left"});
}

TEST(GgufValidation, CountsBeyondTheFile) {
  GgufBuilder builder;
  builder.kv_count = ~uint64_t(0);
  expect_parse_error(builder, {"key/value count 18446744073709551615 cannot fit"});
  GgufBuilder tensors;
  tensors.tensor_count = uint64_t(1) << 40;
  expect_parse_error(tensors, {"tensor count 1099511627776 cannot fit"});
  // A count the file could hold but does not: the read runs out.
  GgufBuilder short_kv;
  short_kv.add_string("a", std::string(40, 'x'));
  short_kv.kv_count = 2;
  expect_parse_error(short_kv, {"key 1 of 2 (its length) needs 8 bytes"});
}

// ---- keys and values ----

TEST(GgufValidation, StringLengthBeyondTheFile) {
  GgufBuilder builder;
  std::vector<uint8_t> value;
  GgufBuilder::put<uint64_t>(value, ~uint64_t(0) - 3);
  GgufBuilder::append(value, "ab", 2);
  builder.add_raw("general.name", uint32_t(GgufValueType::String), value);
  expect_parse_error(builder, {"key \"general.name\" claims 18446744073709551612 bytes", "truncated, or a length that lies"});
}

TEST(GgufValidation, KeyLengthBeyondTheFile) {
  std::vector<uint8_t> bytes = GgufBuilder().build();
  bytes[16] = 1;  // one key/value
  GgufBuilder::put<uint64_t>(bytes, 1000);
  bytes.insert(bytes.end(), 10, 'k');
  expect_bytes_error(bytes, {"key 0 of 1 claims 1000 bytes at offset 32 but the file has 10 left"});
}

TEST(GgufValidation, EmptyAndDuplicateKeys) {
  GgufBuilder empty;
  empty.add_u32("", 1);
  expect_parse_error(empty, {"key 0 of 1 is an empty string"});
  GgufBuilder twice;
  twice.add_u32("general.alignment", 32);
  twice.add_u32("general.alignment", 32);
  expect_parse_error(twice, {"key \"general.alignment\": appears more than once"});
}

TEST(GgufValidation, UnknownValueTypes) {
  GgufBuilder scalar;
  scalar.add_raw("k", 13, {0, 0, 0, 0});
  expect_parse_error(scalar, {"key \"k\": has unknown value type 13"});
  GgufBuilder array;
  array.add_array<uint32_t>("k", GgufValueType(99), {});
  expect_parse_error(array, {"key \"k\": is an array of unknown value type 99"});
  GgufBuilder nested;
  nested.add_array<uint32_t>("k", GgufValueType::Array, {});
  expect_parse_error(nested, {"key \"k\": is an array of arrays"});
}

TEST(GgufValidation, ArrayCountBeyondTheFile) {
  GgufBuilder numbers;
  std::vector<uint8_t> value;
  GgufBuilder::put<uint32_t>(value, uint32_t(GgufValueType::U32));
  GgufBuilder::put<uint64_t>(value, 1000);
  numbers.add_raw("k", uint32_t(GgufValueType::Array), value);
  expect_parse_error(numbers, {"key \"k\": claims 1000 uint32 elements but only 0 bytes are left"});
  GgufBuilder huge;
  value.clear();
  GgufBuilder::put<uint32_t>(value, uint32_t(GgufValueType::U32));
  GgufBuilder::put<uint64_t>(value, uint64_t(1) << 62);  // x 4 bytes would overflow 64 bits
  huge.add_raw("k", uint32_t(GgufValueType::Array), value);
  expect_parse_error(huge, {"key \"k\": claims 4611686018427387904 elements (at most 1073741824)"});
  GgufBuilder strings;
  value.clear();
  GgufBuilder::put<uint32_t>(value, uint32_t(GgufValueType::String));
  GgufBuilder::put<uint64_t>(value, 1000000);
  strings.add_raw("tokenizer.ggml.tokens", uint32_t(GgufValueType::Array), value);
  expect_parse_error(strings, {"key \"tokenizer.ggml.tokens\": claims 1000000 strings"});
  GgufBuilder cut;
  cut.add_string_array("tokens", {"alpha", "beta-long-string"});
  std::vector<uint8_t> bytes = cut.build();
  bytes.resize(bytes.size() - 3);
  expect_bytes_error(bytes, {"key \"tokens\" element 1"});
}

TEST(GgufValidation, BoolsAreZeroOrOne) {
  GgufBuilder scalar;
  scalar.add_scalar<uint8_t>("b", GgufValueType::Bool, 2);
  expect_parse_error(scalar, {"key \"b\": is bool 2 (a bool is 0 or 1)"});
  GgufBuilder array;
  array.add_array<uint8_t>("inkling.sliding_window_pattern", GgufValueType::Bool, {1, 0, 255});
  expect_parse_error(array, {"key \"inkling.sliding_window_pattern\": element 2 is bool 255"});
}

TEST(GgufValidation, Alignment) {
  GgufBuilder wrong_type;
  wrong_type.add_u64("general.alignment", 32);
  expect_parse_error(wrong_type, {"key \"general.alignment\": must be a uint32, not a uint64"});
  for (uint32_t bad : {0u, 3u, 48u}) {
    GgufBuilder builder;
    builder.add_u32("general.alignment", bad);
    expect_parse_error(builder, {"key \"general.alignment\": " + std::to_string(bad) + " is not a power of two"});
  }
}

// ---- typed reads ----

TEST(GgufMetadata, TypedReadsNameTheKey) {
  GgufBuilder builder;
  builder.add_string("s", "text");
  builder.add_i32("negative", -1);
  builder.add_u64("huge", ~uint64_t(0));
  builder.add_array<uint64_t>("huge_array", GgufValueType::U64, {1, ~uint64_t(0)});
  GgufFile file = parse(builder, "meta.gguf");
  expect_error([&] { file.string("absent"); }, {"meta.gguf: key \"absent\": is missing"});
  expect_error([&] { file.unsigned_integer("s"); }, {"meta.gguf: key \"s\": must be an integer, not a string"});
  expect_error([&] { file.unsigned_integer("negative"); }, {"key \"negative\": is -1; it must not be negative"});
  expect_error([&] { file.signed_integer("huge"); }, {"key \"huge\": is 18446744073709551615, beyond int64"});
  EXPECT_EQ(file.unsigned_integer("huge"), ~uint64_t(0));
  expect_error([&] { file.boolean("s"); }, {"key \"s\": must be a bool, not a string"});
  expect_error([&] { file.number("s"); }, {"key \"s\": must be a number"});
  expect_error([&] { file.string("negative"); }, {"key \"negative\": must be a string, not a int32"});
  expect_error([&] { file.integer_array("s"); }, {"must be an array of integers or bools, not a string"});
  expect_error([&] { file.integer_array("huge_array"); }, {"key \"huge_array\": element 1 is 18446744073709551615"});
  expect_error([&] { file.float_array("huge_array"); }, {"must be an array of float32 or float64, not a array of uint64"});
  expect_error([&] { file.string_array("huge_array"); }, {"must be an array of strings"});
}

// ---- tensor infos ----

TEST(GgufValidation, TensorNames) {
  GgufBuilder empty;
  empty.add_tensor("", GgmlType::F32, {1});
  expect_parse_error(empty, {"tensor info 0 of 1 has an empty name"});
  GgufBuilder long_name;
  long_name.add_tensor(std::string(64, 'x'), GgmlType::F32, {1});
  expect_parse_error(long_name, {"name is 64 bytes (ggml allows at most 63)"});
  GgufBuilder twice;
  twice.add_tensor("w", GgmlType::F32, {1});
  twice.add_tensor("w", GgmlType::F32, {1});
  expect_parse_error(twice, {"tensor \"w\": appears more than once"});
}

TEST(GgufValidation, TensorDimensions) {
  GgufBuilder five;
  five.add_tensor("w", GgmlType::F32, {1, 1, 1, 1, 1}, std::vector<uint8_t>(4));
  expect_parse_error(five, {"tensor \"w\": has 5 dimensions (at most 4)"});
  GgufBuilder beyond;
  beyond.add_tensor("w", GgmlType::F32, {uint64_t(1) << 63}, {});
  expect_parse_error(beyond, {"tensor \"w\": dimension 0 is 9223372036854775808, beyond int64"});
  GgufBuilder overflow;
  overflow.add_tensor("w", GgmlType::F32, {uint64_t(1) << 32, uint64_t(1) << 32}, {});
  expect_parse_error(overflow, {"tensor \"w\": element count overflows 64 bits"});
  GgufBuilder bytes_overflow;
  bytes_overflow.add_tensor("w", GgmlType::F32, {uint64_t(1) << 62}, {});
  expect_parse_error(bytes_overflow, {"tensor \"w\": byte size overflows 64 bits"});
}

TEST(GgufValidation, TensorTypes) {
  for (uint32_t code : {4u, 5u, 31u, 33u, 1000u}) {
    GgufBuilder builder;
    builder.add_tensor("w", GgmlType::F32, {1}).type = code;
    expect_parse_error(builder, {"tensor \"w\": has unknown ggml type " + std::to_string(code)});
  }
  GgufBuilder partial_block;
  partial_block.add_tensor("blk.0.attn_q.weight", GgmlType::Q4_K, {128, 2}, std::vector<uint8_t>(144));
  expect_parse_error(partial_block, {"tensor \"blk.0.attn_q.weight\": rows of 128 elements are not a whole number of Q4_K blocks (256"});
}

TEST(GgufValidation, TensorOffsets) {
  GgufBuilder misaligned;
  misaligned.add_tensor("a", GgmlType::F32, {3});
  misaligned.add_tensor("b", GgmlType::F32, {3}).offset = 12;
  expect_parse_error(misaligned, {"tensor \"b\": offset 12 is not where it belongs, 32 (not a multiple of the alignment 32)"});
  GgufBuilder overlap;
  overlap.add_tensor("a", GgmlType::F32, {16});
  overlap.add_tensor("b", GgmlType::F32, {3}).offset = 32;
  expect_parse_error(overlap, {"tensor \"b\": offset 32 is not where it belongs, 64 (it overlaps the tensor before it)"});
  GgufBuilder gap;
  gap.add_tensor("a", GgmlType::F32, {3});
  gap.add_tensor("b", GgmlType::F32, {3}).offset = 64;
  expect_parse_error(gap, {"tensor \"b\": offset 64 is not where it belongs, 32 (a gap"});
  GgufBuilder first;
  first.add_tensor("a", GgmlType::F32, {3}).offset = ~uint64_t(0) - 31;
  expect_parse_error(first, {"tensor \"a\": offset 18446744073709551584 is not where it belongs, 0"});
}

TEST(GgufValidation, TensorBytesBeyondTheFile) {
  GgufBuilder builder;
  builder.add_tensor("a", GgmlType::F32, {8});
  builder.add_tensor("b", GgmlType::BF16, {100});
  std::vector<uint8_t> bytes = builder.build();
  bytes.resize(bytes.size() - 64);  // b's padding and part of b
  expect_bytes_error(bytes, {"tensor \"b\": bytes [32, +200) run past the end of the data section", "truncated"});
  // Where the header ends mid-padding, the data section itself is missing.
  GgufBuilder header_only = with_one_tensor();
  std::vector<uint8_t> cut = header_only.build();
  const size_t header_end = 4 + 4 + 8 + 8 + (8 + 1) + 4 + 16 + 4 + 8;
  cut.resize(header_end + 1);
  expect_bytes_error(cut, {"the data section would start at offset 96, past the end of the file (" +
                               std::to_string(header_end + 1) + " bytes)"});
}

// ---- split sets and directories ----

class GgufSplitTest : public testing::TempDirTest {
 protected:
  // Three files: the first holds the metadata, each holds one tensor.
  void write_set(const std::string& prefix, uint16_t count = 3, std::optional<int32_t> declared_tensors = {}) {
    for (uint16_t i = 0; i < count; ++i) {
      GgufBuilder builder;
      builder.add_u16("split.no", i);
      builder.add_u16("split.count", count);
      if (i == 0) {
        builder.add_i32("split.tensors.count", declared_tensors.value_or(count));
        builder.add_string("general.architecture", "inkling");
      }
      std::string tensor = "t";  // appended: GCC 12 warns -Wrestrict on "t" + std::string (PR 105329)
      tensor += std::to_string(i);
      builder.add_tensor(tensor, GgmlType::F32, {4});
      char name[64];
      std::snprintf(name, sizeof name, "%s-%05d-of-%05d.gguf", prefix.c_str(), i + 1, int(count));
      builder.write(dir_ / name);
    }
  }
};

TEST_F(GgufSplitTest, LoadsEveryFileAsOne) {
  write_set("model");
  auto model = GgufModelFiles::open(dir_ / "model-00001-of-00003.gguf");
  EXPECT_EQ(model->files().size(), 3u);
  EXPECT_EQ(model->names(), (std::vector<std::string>{"t0", "t1", "t2"}));
  EXPECT_EQ(model->first().string("general.architecture"), "inkling");
  ASSERT_NE(model->find("t2"), nullptr);
  EXPECT_EQ(model->file_of("t2").path().filename(), "model-00003-of-00003.gguf");
  EXPECT_EQ(model->find("t9"), nullptr);
  uint64_t total = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) total += entry.file_size();
  EXPECT_EQ(model->total_file_bytes(), total);
  // The directory resolves to the first file.
  EXPECT_EQ(GgufModelFiles::resolve(dir_).filename(), "model-00001-of-00003.gguf");
  EXPECT_EQ(GgufModelFiles::open(dir_)->files().size(), 3u);
  EXPECT_TRUE(GgufModelFiles::looks_like_gguf(dir_));
}

// make_resident with row pairs: a gate and an up in different files of a split set, [2, 3, 32]
// Q8_0 (3 rows of 34 bytes per expert), copied with their rows alternating over every expert;
// find() keeps the file's views, a plain tensor its own copy. Mismatched or repeated pairs throw
// naming both tensors.
TEST_F(GgufSplitTest, RowPairsAreCopiedInterleaved) {
  for (uint16_t i = 0; i < 2; ++i) {
    GgufBuilder builder;
    builder.add_u16("split.no", i);
    builder.add_u16("split.count", 2);
    if (i == 0) builder.add_i32("split.tensors.count", 5);
    std::vector<uint8_t> bytes(6 * 34);
    for (size_t b = 0; b < bytes.size(); ++b) bytes[b] = uint8_t(b * 7 + i * 100);
    builder.add_tensor(i == 0 ? "gate" : "up", GgmlType::Q8_0, {32, 3, 2}, bytes);
    if (i == 0) {
      builder.add_tensor("norm", GgmlType::F32, {4});
      builder.add_tensor("wide", GgmlType::Q8_0, {64, 3});
    } else {
      builder.add_tensor("other", GgmlType::Q4_0, {32, 3, 2});
    }
    char name[64];
    std::snprintf(name, sizeof name, "pair-%05d-of-00002.gguf", i + 1);
    builder.write(dir_ / name);
  }
  auto model = GgufModelFiles::open(dir_ / "pair-00001-of-00002.gguf");
  const GgufTensor gate_file = *model->find("gate"), up_file = *model->find("up");
  const uint64_t copied = model->make_resident({"norm", "up"}, {{"gate", "up"}});
  EXPECT_EQ(copied, 2 * 6 * 34 + 16);
  const auto gate = model->interleaved_rows("gate"), up = model->interleaved_rows("up");
  ASSERT_TRUE(gate && up);
  EXPECT_EQ(gate->data, up->data);
  EXPECT_EQ(gate->row_bytes, 34u);
  EXPECT_FALSE(gate->odd);
  EXPECT_TRUE(up->odd);
  EXPECT_EQ(gate->partner, "up");
  EXPECT_EQ(up->partner, "gate");
  for (int row = 0; row < 6; ++row) {
    EXPECT_EQ(0, std::memcmp(gate->data + 2 * row * 34, gate_file.data + row * 34, 34)) << "gate row " << row;
    EXPECT_EQ(0, std::memcmp(gate->data + (2 * row + 1) * 34, up_file.data + row * 34, 34)) << "up row " << row;
  }
  EXPECT_EQ(model->find("gate")->data, gate_file.data);  // not contiguous in the copy
  EXPECT_FALSE(model->interleaved_rows("norm"));
  const uint8_t* norm = model->find("norm")->data;
  EXPECT_TRUE(norm >= model->resident_memory().data() &&
              norm < model->resident_memory().data() + model->resident_memory().size());

  auto fresh = GgufModelFiles::open(dir_ / "pair-00001-of-00002.gguf");
  expect_error([&] { fresh->make_resident({}, {{"gate", "other"}}); },
               {"\"gate\"", "\"other\"", "Q8_0", "Q4_0", "one type and one non-empty shape"});
  expect_error([&] { fresh->make_resident({}, {{"gate", "wide"}}); }, {"[2, 3, 32]", "[3, 64]"});
  expect_error([&] { fresh->make_resident({}, {{"gate", "gate"}}); }, {"\"gate\"", "with itself"});
  expect_error([&] { fresh->make_resident({}, {{"gate", "up"}, {"up", "other"}}); }, {"\"up\"", "more than one copy"});
  expect_error([&] { fresh->make_resident({}, {{"gate", "missing"}}); }, {"no tensor \"missing\""});
}

TEST_F(GgufSplitTest, MustStartAtTheFirstFile) {
  write_set("model");
  expect_error([&] { GgufModelFiles::open(dir_ / "model-00002-of-00003.gguf"); },
               {"model-00002-of-00003.gguf: key \"split.no\": is 1: this is not the first file"});
}

TEST_F(GgufSplitTest, MissingFile) {
  write_set("model");
  std::filesystem::remove(dir_ / "model-00003-of-00003.gguf");
  expect_error([&] { GgufModelFiles::open(dir_ / "model-00001-of-00003.gguf"); },
               {"model-00001-of-00003.gguf: split file 3 of 3 is missing", "model-00003-of-00003.gguf"});
}

TEST_F(GgufSplitTest, RenamedFirstFile) {
  write_set("model");
  std::filesystem::rename(dir_ / "model-00001-of-00003.gguf", dir_ / "renamed.gguf");
  expect_error([&] { GgufModelFiles::open(dir_ / "renamed.gguf"); },
               {"renamed.gguf: key \"split.count\": is 3 but the file name is not NAME-00001-of-00003.gguf"});
}

TEST_F(GgufSplitTest, NumbersMustAgree) {
  write_set("a", 3);
  write_set("b", 2);
  // b's second file put in the place of a's third: its split.count is 2.
  std::filesystem::copy_file(dir_ / "b-00002-of-00002.gguf", dir_ / "a-00003-of-00003.gguf",
                             std::filesystem::copy_options::overwrite_existing);
  expect_error([&] { GgufModelFiles::open(dir_ / "a-00001-of-00003.gguf"); },
               {"a-00003-of-00003.gguf: key \"split.count\": is 2 but the first file says 3"});
  write_set("c", 3);
  std::filesystem::copy_file(dir_ / "c-00002-of-00003.gguf", dir_ / "c-00003-of-00003.gguf",
                             std::filesystem::copy_options::overwrite_existing);
  expect_error([&] { GgufModelFiles::open(dir_ / "c-00001-of-00003.gguf"); },
               {"c-00003-of-00003.gguf: key \"split.no\": is 1 but the file name says 2"});
}

TEST_F(GgufSplitTest, TensorInTwoFiles) {
  write_set("model", 2);
  GgufBuilder second;
  second.add_u16("split.no", 1);
  second.add_u16("split.count", 2);
  second.add_tensor("t0", GgmlType::F32, {4});
  second.write(dir_ / "model-00002-of-00002.gguf");
  expect_error([&] { GgufModelFiles::open(dir_ / "model-00001-of-00002.gguf"); },
               {"model-00002-of-00002.gguf: tensor \"t0\": is also in", "model-00001-of-00002.gguf"});
}

TEST_F(GgufSplitTest, DeclaredTensorCount) {
  write_set("model", 3, 4);
  expect_error([&] { GgufModelFiles::open(dir_ / "model-00001-of-00003.gguf"); },
               {"key \"split.tensors.count\": is 4 but the 3 files hold 3 tensors"});
}

TEST_F(GgufSplitTest, Directories) {
  expect_error([&] { GgufModelFiles::resolve(dir_); }, {"no .gguf model file"});
  EXPECT_FALSE(GgufModelFiles::looks_like_gguf(dir_));
  GgufBuilder single;
  single.add_tensor("w", GgmlType::F32, {4});
  single.write(dir_ / "one.gguf");
  EXPECT_EQ(GgufModelFiles::resolve(dir_).filename(), "one.gguf");
  write_set("model", 2);
  expect_error([&] { GgufModelFiles::resolve(dir_); },
               {"holds more than one GGUF model (model-00001-of-00002.gguf, one.gguf)"});
  std::ofstream(dir_ / "config.json") << "{}";
  EXPECT_FALSE(GgufModelFiles::looks_like_gguf(dir_));  // a safetensors checkpoint with a stray GGUF
  EXPECT_TRUE(GgufModelFiles::looks_like_gguf(dir_ / "one.gguf"));
}

}  // namespace
}  // namespace inkling
