// SafetensorsFile: strict validation (one test per rule) and zero-copy reading.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "io/safetensors.h"
#include "safetensors_test_util.h"

namespace inkling {
namespace {

using testing::expect_error;
using testing::good_image;
using testing::iota_bytes;
using testing::raw_image;
using testing::RawTensor;

// Parses a header over `data_len` zero bytes and expects an error naming `label` plus phrases.
void expect_header_error(const std::string& header, size_t data_len,
                         std::vector<std::string> phrases) {
  phrases.push_back("bad.safetensors: ");
  expect_error([&] {
    SafetensorsFile::from_bytes(raw_image(header, std::vector<uint8_t>(data_len)), "bad.safetensors");
  }, phrases);
}

// ---- framing ----

TEST(SafetensorsValidation, FileShorterThanEightBytes) {
  for (size_t size : {0, 1, 7}) {
    expect_error([&] { SafetensorsFile::from_bytes(std::vector<uint8_t>(size), "tiny.safetensors"); },
                 {"tiny.safetensors: ", "file is " + std::to_string(size) + " bytes, too short"});
  }
}

TEST(SafetensorsValidation, HeaderLengthOverLimit) {
  expect_error([] {
    SafetensorsFile::from_bytes(raw_image("{}", {}, kMaxSafetensorsHeaderBytes + 1), "big.safetensors");
  }, {"big.safetensors: ", "header length 100000001 exceeds the 100000000-byte limit"});
  // The largest possible value must not overflow anything either.
  expect_error([] {
    SafetensorsFile::from_bytes(raw_image("{}", {}, ~uint64_t(0)), "big.safetensors");
  }, {"exceeds the 100000000-byte limit"});
}

TEST(SafetensorsValidation, HeaderLengthPastEndOfFile) {
  expect_error([] { SafetensorsFile::from_bytes(raw_image("{}", {}, 3), "cut.safetensors"); },
               {"cut.safetensors: ", "header length 3 runs past the end of the file (10 bytes"});
}

TEST(SafetensorsValidation, HeaderNotValidJson) {
  expect_header_error(R"({"w": {"dtype": "F32", )", 0, {"header is not valid JSON"});
  expect_header_error("", 0, {"header is not valid JSON"});
  expect_header_error(std::string("{\"\xff\": 1}"), 0, {"header is not valid JSON"});  // bad UTF-8
  // A number too large for a double is an out_of_range error inside nlohmann, not a parse_error
  // (found by the fuzzer).
  expect_header_error(R"({"a": 1e999})", 0, {"header is not valid JSON", "number overflow"});
}

TEST(SafetensorsValidation, HeaderNotAnObject) {
  expect_header_error("[1, 2]", 0, {"header is not a JSON object"});
  expect_header_error("\"text\"", 0, {"header is not a JSON object"});
  expect_header_error("null", 0, {"header is not a JSON object"});
}

TEST(SafetensorsValidation, DuplicateTensorName) {
  expect_header_error(
      R"({"w": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}, )"
      R"("w": {"dtype": "U8", "shape": [2], "data_offsets": [2, 4]}})",
      4, {"tensor \"w\"", "appears more than once"});
}

// ---- per-entry rules ----

TEST(SafetensorsValidation, EntryNotAnObject) {
  expect_header_error(R"({"layer.0.weight": [1, 2, 3]})", 0,
                      {"tensor \"layer.0.weight\"", "entry is not a JSON object"});
  expect_header_error(R"({"layer.0.weight": "F32"})", 0,
                      {"tensor \"layer.0.weight\"", "entry is not a JSON object"});
}

TEST(SafetensorsValidation, EntryMissingDtype) {
  expect_header_error(R"({"w.a": {"shape": [1], "data_offsets": [0, 4]}})", 4,
                      {"tensor \"w.a\"", "missing \"dtype\""});
}

TEST(SafetensorsValidation, EntryMissingShape) {
  expect_header_error(R"({"w.b": {"dtype": "F32", "data_offsets": [0, 4]}})", 4,
                      {"tensor \"w.b\"", "missing \"shape\""});
}

TEST(SafetensorsValidation, EntryMissingDataOffsets) {
  expect_header_error(R"({"w.c": {"dtype": "F32", "shape": [1]}})", 4,
                      {"tensor \"w.c\"", "missing \"data_offsets\""});
}

TEST(SafetensorsValidation, UnsupportedDtypeIsNamed) {
  for (const char* dtype : {"F8_E5M2", "BOOL", "F64", "f32", ""}) {
    std::string header = std::string(R"({"w": {"dtype": ")") + dtype +
                         R"(", "shape": [1], "data_offsets": [0, 1]}})";
    expect_header_error(header, 1, {"tensor \"w\"", std::string("unsupported dtype \"") + dtype + "\""});
  }
  expect_header_error(R"({"w": {"dtype": 4, "shape": [1], "data_offsets": [0, 4]}})", 4,
                      {"tensor \"w\"", "\"dtype\" must be a string"});
}

TEST(SafetensorsValidation, EverySupportedDtypeParses) {
  const std::pair<const char*, size_t> kDtypes[] = {
      {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"U8", 1},  {"I8", 1},     {"I16", 2},
      {"U16", 2}, {"I32", 4}, {"U32", 4},  {"I64", 8}, {"F8_E4M3", 1}};
  for (const auto& [name, size] : kDtypes) {
    auto file = SafetensorsFile::from_bytes(good_image({{"t", name, {3}, iota_bytes(3 * size)}}), name);
    TensorView view = file.get("t");
    EXPECT_EQ(dtype_name(view.dtype), name);
    EXPECT_EQ(view.nbytes, 3 * size);
  }
}

TEST(SafetensorsValidation, ShapeNotListOfNonNegativeIntegers) {
  const char* kBadShapes[] = {"-1", "[-1]", "[2, -3]", "[1.5]", "[2.0]", "[\"4\"]",
                              "[true]", "[null]", "[[2]]", "{}", "[18446744073709551616]",
                              "[9223372036854775808]"};
  for (const char* shape : kBadShapes) {
    std::string header = std::string(R"({"bad.shape": {"dtype": "U8", "shape": )") + shape +
                         R"(, "data_offsets": [0, 0]}})";
    SCOPED_TRACE(shape);
    expect_header_error(header, 0, {"tensor \"bad.shape\"", "must be a list of non-negative integers"});
  }
}

TEST(SafetensorsValidation, DataOffsetsNotTwoNonNegativeIntegers) {
  const char* kBadOffsets[] = {"[0]", "[0, 4, 8]", "[]", "[-4, 0]", "[0, -4]", "[0.0, 4]",
                               "\"0,4\"", "{\"begin\": 0}", "[0, 18446744073709551616]", "null"};
  for (const char* offsets : kBadOffsets) {
    std::string header = std::string(R"({"bad.offsets": {"dtype": "U8", "shape": [4], "data_offsets": )") +
                         offsets + "}}";
    SCOPED_TRACE(offsets);
    expect_header_error(header, 4,
                        {"tensor \"bad.offsets\"", "\"data_offsets\" must be two non-negative integers"});
  }
}

TEST(SafetensorsValidation, DataOffsetsBeginAfterEnd) {
  expect_header_error(R"({"rev": {"dtype": "U8", "shape": [4], "data_offsets": [8, 4]}})", 8,
                      {"tensor \"rev\"", "data_offsets [8, 4] have begin > end"});
}

TEST(SafetensorsValidation, ByteSizeOverflowIsCaught) {
  // 2^62 * 8 * 4 bytes wraps a uint64; the span check must not be fooled by the wrapped value.
  expect_header_error(
      R"({"huge": {"dtype": "F32", "shape": [4611686018427387904, 8], "data_offsets": [0, 0]}})", 0,
      {"tensor \"huge\"", "shape [4611686018427387904, 8] x F32 overflows"});
  expect_header_error(
      R"({"huge": {"dtype": "U8", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})", 0,
      {"tensor \"huge\"", "overflows"});
  // The element count fits (2^62) but the byte count (2^64) does not.
  expect_header_error(
      R"({"huge": {"dtype": "F32", "shape": [2305843009213693952, 2], "data_offsets": [0, 0]}})", 0,
      {"tensor \"huge\"", "byte size does not fit in 64 bits"});
  // Zero-size dims make any product fine.
  auto file = SafetensorsFile::from_bytes(
      raw_image(R"({"empty": {"dtype": "F32", "shape": [9223372036854775807, 0], "data_offsets": [0, 0]}})"),
      "zero.safetensors");
  EXPECT_EQ(file.get("empty").nbytes, 0u);
}

TEST(SafetensorsValidation, ByteSizeMustMatchSpanExactMessage) {
  std::string header =
      R"({"model.llm.norm.weight": {"dtype": "BF16", "shape": [4096], "data_offsets": [0, 8190]}})";
  try {
    SafetensorsFile::from_bytes(raw_image(header, std::vector<uint8_t>(8190)),
                                "model-00001-of-00002.safetensors");
    FAIL() << "did not throw";
  } catch (const Error& error) {
    EXPECT_STREQ(error.what(),
                 "model-00001-of-00002.safetensors: tensor \"model.llm.norm.weight\": shape [4096] x "
                 "BF16 needs 8192 bytes but data_offsets span 8190");
  }
}

TEST(SafetensorsValidation, EndBeyondDataSection) {
  expect_header_error(R"({"far": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 4,
                      {"tensor \"far\"", "data_offsets [0, 8] run past the end of the data section (4 bytes"});
}

TEST(SafetensorsValidation, OverlappingEntries) {
  expect_header_error(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, )"
                      R"("b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                      12, {"tensor \"b\"", "overlap tensor \"a\" [0, 8]"});
  // Two tensors on exactly the same bytes (aliasing) are an overlap too.
  expect_header_error(R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}, )"
                      R"("b": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}})",
                      4, {"overlap tensor \"a\""});
}

TEST(SafetensorsValidation, HoleBetweenEntries) {
  expect_header_error(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, )"
                      R"("b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
                      12, {"tensor \"b\"", "leave a hole: bytes [4, 8) of the data section"});
  expect_header_error(R"({"first": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", 8,
                      {"tensor \"first\"", "leave a hole: bytes [0, 4)"});
}

TEST(SafetensorsValidation, TrailingBytesAfterLastEntry) {
  expect_header_error(R"({"last": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 8,
                      {"tensor \"last\"", "bytes [4, 8) at the end of the data section belong to no tensor"});
  expect_header_error("{}", 3, {"bytes [0, 3) at the end of the data section", "lists no tensors"});
}

TEST(SafetensorsValidation, MetadataMustBeStringToString) {
  expect_header_error(R"({"__metadata__": [1]})", 0, {"\"__metadata__\" must be an object of string -> string"});
  expect_header_error(R"({"__metadata__": null})", 0, {"\"__metadata__\" must be an object"});
  expect_header_error(R"({"__metadata__": {"format": "pt", "step": 100}})", 0,
                      {"\"__metadata__\" must be an object of string -> string", "key \"step\""});
  expect_header_error(R"({"__metadata__": {"nested": {"a": "b"}}})", 0, {"key \"nested\""});
}

// ---- good files ----

TEST(SafetensorsRead, EmptyHeaderIsValid) {
  auto file = SafetensorsFile::from_bytes(raw_image("{}"), "empty.safetensors");
  EXPECT_TRUE(file.entries().empty());
  EXPECT_EQ(file.file_bytes(), 10u);
  auto padded = SafetensorsFile::from_bytes(raw_image("{}      "), "padded.safetensors");
  EXPECT_TRUE(padded.entries().empty());
}

TEST(SafetensorsRead, InMemoryRoundTripIsZeroCopy) {
  std::vector<uint8_t> a = iota_bytes(2 * 3 * 2, 1);  // BF16 [2, 3]
  std::vector<uint8_t> b = iota_bytes(4, 100);        // F32 scalar
  std::vector<uint8_t> image = good_image(
      {{"layers.0.w", "BF16", {2, 3}, a}, {"scale", "F32", {}, b}, {"nothing", "I64", {0, 5}, {}}},
      {{"format", "pt"}, {"note", "é unicode"}});
  uint64_t header_len = 0;
  std::memcpy(&header_len, image.data(), 8);
  const uint8_t* buffer = image.data();
  const size_t size = image.size();
  auto file = SafetensorsFile::from_bytes(std::move(image), "mem.safetensors");

  EXPECT_EQ(file.path(), "mem.safetensors");
  EXPECT_EQ(file.file_bytes(), size);
  ASSERT_EQ(file.entries().size(), 3u);
  // File (data offset) order; the zero-size tensor sits at the end, after "scale".
  EXPECT_EQ(file.entries()[0].name, "layers.0.w");
  EXPECT_EQ(file.entries()[1].name, "scale");
  EXPECT_EQ(file.entries()[2].name, "nothing");
  EXPECT_EQ(file.entries()[1].begin, 12u);
  EXPECT_EQ(file.entries()[1].end, 16u);
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.metadata().at("note"), "é unicode");

  TensorView w = file.get("layers.0.w");
  EXPECT_EQ(w.dtype, DType::BF16);
  EXPECT_EQ(w.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(w.nbytes, 12u);
  EXPECT_EQ(w.data, buffer + 8 + header_len);  // points into the moved-in buffer, no copy
  EXPECT_EQ(std::vector<uint8_t>(w.data, w.data + w.nbytes), a);

  TensorView s = file.get("scale");
  EXPECT_EQ(s.rank(), 0);
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(s.data, buffer + 8 + header_len + 12);
  EXPECT_EQ(std::vector<uint8_t>(s.data, s.data + 4), b);

  TensorView empty = file.get("nothing");
  EXPECT_EQ(empty.nbytes, 0u);
  EXPECT_EQ(empty.numel(), 0);

  EXPECT_TRUE(file.contains("scale"));
  EXPECT_FALSE(file.contains("scale2"));
  EXPECT_FALSE(file.find("missing").has_value());
  expect_error([&] { file.get("missing.tensor"); }, {"mem.safetensors", "no tensor \"missing.tensor\""});
}

// The [start, end) range of the mapping of `path` in this process, from /proc/self/maps.
std::vector<std::pair<uintptr_t, uintptr_t>> mappings_of(const std::filesystem::path& path) {
  std::vector<std::pair<uintptr_t, uintptr_t>> out;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  const std::string target = std::filesystem::canonical(path).string();
  while (std::getline(maps, line)) {
    if (line.size() < target.size() || line.compare(line.size() - target.size(), target.size(), target))
      continue;
    std::istringstream fields(line);
    std::string range;
    fields >> range;
    size_t dash = range.find('-');
    out.emplace_back(std::stoull(range.substr(0, dash), nullptr, 16),
                     std::stoull(range.substr(dash + 1), nullptr, 16));
  }
  return out;
}

class SafetensorsFileTest : public testing::TempDirTest {};

TEST_F(SafetensorsFileTest, OpenMapsTheFileAndViewsPointIntoTheMapping) {
  std::vector<uint8_t> a = iota_bytes(64 * 4, 3);
  std::vector<uint8_t> b = iota_bytes(16, 200);
  const auto path = dir_ / "model.safetensors";
  testing::write_file(path, good_image({{"a", "F32", {8, 8}, a}, {"b", "F8_E4M3", {16}, b}},
                                       {{"format", "pt"}}));
  {
    auto file = SafetensorsFile::open(path);
    EXPECT_EQ(file.path(), path);
    EXPECT_EQ(file.file_bytes(), std::filesystem::file_size(path));
    TensorView va = file.get("a");
    TensorView vb = file.get("b");
    EXPECT_EQ(std::vector<uint8_t>(va.data, va.data + va.nbytes), a);
    EXPECT_EQ(std::vector<uint8_t>(vb.data, vb.data + vb.nbytes), b);
    EXPECT_EQ(vb.data - va.data, 256);

    auto ranges = mappings_of(path);
    ASSERT_FALSE(ranges.empty()) << "the file is not mapped";
    auto inside = [&](const uint8_t* p, size_t n) {
      for (auto [lo, hi] : ranges)
        if (uintptr_t(p) >= lo && uintptr_t(p) + n <= hi) return true;
      return false;
    };
    EXPECT_TRUE(inside(va.data, va.nbytes));
    EXPECT_TRUE(inside(vb.data, vb.nbytes));

    // Moves transfer the mapping: views stay valid, nothing is unmapped twice.
    SafetensorsFile moved(std::move(file));
    EXPECT_EQ(moved.get("a").data, va.data);
    EXPECT_TRUE(file.entries().empty());
    SafetensorsFile other = SafetensorsFile::from_bytes(raw_image("{}"), "other");
    other = std::move(moved);
    EXPECT_EQ(other.get("b").data, vb.data);
    EXPECT_EQ(other.metadata().at("format"), "pt");
    EXPECT_EQ(std::vector<uint8_t>(va.data, va.data + va.nbytes), a);
  }
  EXPECT_TRUE(mappings_of(path).empty()) << "the destructor did not unmap";
}

// read_tensor_rows places each row at its own stride, from a mapped file (preadv) and from an
// in-memory image alike, and refuses rows past the tensor or a row length that does not divide it.
TEST_F(SafetensorsFileTest, ReadTensorRowsScattersRowsToAStride) {
  const std::vector<uint8_t> a = iota_bytes(6 * 8, 3);
  const auto path = dir_ / "model.safetensors";
  testing::write_file(path, good_image({{"pad", "U8", {5}, iota_bytes(5, 1)}, {"a", "U8", {6, 8}, a}}));
  const SafetensorsFile mapped = SafetensorsFile::open(path);
  const SafetensorsFile in_memory = SafetensorsFile::from_bytes(good_image({{"a", "U8", {6, 8}, a}}), "image");
  for (const SafetensorsFile* file : {&mapped, &in_memory}) {
    std::vector<uint8_t> out(4 * 20, 0xee);
    file->read_tensor_rows("a", 1, 4, 8, out.data(), 20);
    for (size_t r = 0; r < 4; ++r) {
      EXPECT_TRUE(std::equal(a.begin() + long(8 * (r + 1)), a.begin() + long(8 * (r + 2)), out.begin() + long(20 * r))) << r;
      EXPECT_TRUE(std::all_of(out.begin() + long(20 * r + 8), out.begin() + long(20 * r + 20), [](uint8_t v) { return v == 0xee; })) << r;
    }
    expect_error([&] { file->read_tensor_rows("a", 3, 4, 8, out.data(), 20); }, {"\"a\"", "rows [3, +4) of 8 bytes", "past its 48 bytes"});
    expect_error([&] { file->read_tensor_rows("a", 0, 1, 7, out.data(), 20); }, {"\"a\"", "rows of 7 bytes do not divide its 48 bytes"});
  }
}

TEST_F(SafetensorsFileTest, FailedOpenUnmapsAndNamesThePath) {
  const auto path = dir_ / "broken.safetensors";
  testing::write_file(path, raw_image(R"({"x": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]}})",
                                      std::vector<uint8_t>(8)));
  expect_error([&] { SafetensorsFile::open(path); },
               {path.string() + ": tensor \"x\"", "unsupported dtype \"F64\""});
  EXPECT_TRUE(mappings_of(path).empty());
}

TEST_F(SafetensorsFileTest, OpenErrorsForMissingFileAndDirectory) {
  expect_error([&] { SafetensorsFile::open(dir_ / "nope.safetensors"); },
               {"nope.safetensors", "cannot open"});
  expect_error([&] { SafetensorsFile::open(dir_); }, {"not a regular file"});
  testing::write_file(dir_ / "zero.safetensors", {});
  expect_error([&] { SafetensorsFile::open(dir_ / "zero.safetensors"); }, {"file is 0 bytes, too short"});
}

TEST_F(SafetensorsFileTest, TruncatedFileErrorsAtEveryLength) {
  std::vector<uint8_t> full = good_image(
      {{"w1", "BF16", {4, 4}, iota_bytes(32)}, {"w2", "I32", {3}, iota_bytes(12)}}, {{"format", "pt"}});
  ASSERT_NO_THROW(SafetensorsFile::from_bytes(full, "full"));
  for (size_t size = 0; size < full.size(); ++size) {
    std::vector<uint8_t> cut(full.begin(), full.begin() + long(size));
    SCOPED_TRACE(size);
    EXPECT_THROW(SafetensorsFile::from_bytes(cut, "cut.safetensors"), Error);
  }
  // And from disk, cut inside the data section: the message says where.
  const auto path = dir_ / "cut.safetensors";
  testing::write_file(path, std::vector<uint8_t>(full.begin(), full.end() - 5));
  expect_error([&] { SafetensorsFile::open(path); },
               {"cut.safetensors", "tensor \"w2\"", "run past the end of the data section"});
  testing::write_file(path, std::vector<uint8_t>(full.begin(), full.begin() + 20));
  expect_error([&] { SafetensorsFile::open(path); }, {"runs past the end of the file"});
}

TEST(SafetensorsRead, ByteFlipsNeverCrash) {
  // Cheap in-test fuzzing: every single-byte corruption of the header either parses or throws Error.
  std::vector<uint8_t> full = good_image({{"a", "F16", {2, 2}, iota_bytes(8)}, {"b", "U8", {3}, iota_bytes(3)}});
  uint64_t header_len = 0;
  std::memcpy(&header_len, full.data(), 8);
  for (size_t at = 0; at < 8 + header_len; ++at) {
    for (uint8_t value : {uint8_t(0), uint8_t('9'), uint8_t('-'), uint8_t(']'), uint8_t(0xff)}) {
      std::vector<uint8_t> copy = full;
      copy[at] = value;
      try {
        auto file = SafetensorsFile::from_bytes(std::move(copy), "flip");
        for (const TensorEntry& entry : file.entries()) {
          TensorView view = file.get(entry.name);
          ASSERT_LE(entry.end, file.file_bytes());
          volatile uint8_t sink = 0;
          for (size_t i = 0; i < view.nbytes; ++i) sink = sink + view.data[i];
        }
      } catch (const Error&) {
      }
    }
  }
}

}  // namespace
}  // namespace inkling
