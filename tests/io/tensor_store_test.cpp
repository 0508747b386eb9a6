// TensorStore: single-file, loose-file and index-sharded checkpoint directories.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "io/resident_memory.h"
#include "io/safetensors.h"
#include "safetensors_test_util.h"

namespace inkling {
namespace {

using testing::expect_error;
using testing::good_image;
using testing::iota_bytes;
using testing::write_file;
using testing::write_text;

class TensorStoreTest : public testing::TempDirTest {
 protected:
  // Two shards plus an index, like a Hugging Face checkpoint.
  void write_sharded_checkpoint() {
    write_file(dir_ / "model-00001-of-00002.safetensors",
               good_image({{"embed.weight", "BF16", {4, 2}, iota_bytes(16, 1)},
                           {"layers.0.attn.q.weight", "BF16", {2, 2}, iota_bytes(8, 50)}},
                          {{"format", "pt"}}));
    write_file(dir_ / "model-00002-of-00002.safetensors",
               good_image({{"layers.0.mlp.w1", "F32", {2}, iota_bytes(8, 90)},
                           {"norm.weight", "F32", {1}, iota_bytes(4, 120)}},
                          {{"format", "pt"}}));
    write_index({{"embed.weight", "model-00001-of-00002.safetensors"},
                 {"layers.0.attn.q.weight", "model-00001-of-00002.safetensors"},
                 {"layers.0.mlp.w1", "model-00002-of-00002.safetensors"},
                 {"norm.weight", "model-00002-of-00002.safetensors"}});
  }
  void write_index(const std::map<std::string, std::string>& weight_map) {
    nlohmann::json index = {{"metadata", {{"total_size", 36}}}, {"weight_map", weight_map}};
    write_text(dir_ / "model.safetensors.index.json", index.dump(2));
  }
  std::string index_path() const { return (dir_ / "model.safetensors.index.json").string(); }
};

TEST_F(TensorStoreTest, ShardedCheckpointWithIndex) {
  write_sharded_checkpoint();
  // A stray file next to the shards is ignored when an index exists.
  write_file(dir_ / "consolidated.safetensors", good_image({{"other", "U8", {1}, {7}}}));
  TensorStore store = TensorStore::open_dir(dir_);
  EXPECT_EQ(store.names(), (std::vector<std::string>{"embed.weight", "layers.0.attn.q.weight",
                                                     "layers.0.mlp.w1", "norm.weight"}));
  ASSERT_EQ(store.files().size(), 2u);
  EXPECT_EQ(store.total_file_bytes(), store.files()[0]->file_bytes() + store.files()[1]->file_bytes());
  EXPECT_EQ(store.files()[1]->path().filename(), "model-00002-of-00002.safetensors");

  TensorView embed = store.get("embed.weight");
  EXPECT_EQ(embed.dtype, DType::BF16);
  EXPECT_EQ(embed.shape, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(std::vector<uint8_t>(embed.data, embed.data + embed.nbytes), iota_bytes(16, 1));
  TensorView norm = store.get("norm.weight");
  EXPECT_EQ(std::vector<uint8_t>(norm.data, norm.data + norm.nbytes), iota_bytes(4, 120));
  EXPECT_EQ(norm.data, store.files()[1]->get("norm.weight").data);  // same mapping, no copy

  EXPECT_TRUE(store.contains("layers.0.mlp.w1"));
  EXPECT_FALSE(store.contains("other"));
  EXPECT_FALSE(store.find("other").has_value());
  expect_error([&] { store.get("lm_head.weight"); }, {"no tensor \"lm_head.weight\"", dir_.string()});

  TensorStore moved = std::move(store);
  EXPECT_EQ(moved.get("embed.weight").data, embed.data);
}

TEST_F(TensorStoreTest, IndexNamesMissingShard) {
  write_sharded_checkpoint();
  std::filesystem::remove(dir_ / "model-00002-of-00002.safetensors");
  expect_error([&] { TensorStore::open_dir(dir_); },
               {index_path(), "shard \"model-00002-of-00002.safetensors\"", "tensor \"layers.0.mlp.w1\"",
                "is missing"});
}

TEST_F(TensorStoreTest, IndexListsTensorAbsentFromItsShard) {
  write_sharded_checkpoint();
  write_index({{"embed.weight", "model-00001-of-00002.safetensors"},
               {"layers.0.attn.q.weight", "model-00001-of-00002.safetensors"},
               {"layers.0.attn.k.weight", "model-00001-of-00002.safetensors"},
               {"layers.0.mlp.w1", "model-00002-of-00002.safetensors"},
               {"norm.weight", "model-00002-of-00002.safetensors"}});
  expect_error([&] { TensorStore::open_dir(dir_); },
               {"tensor \"layers.0.attn.k.weight\"", "model-00001-of-00002.safetensors",
                "does not contain it"});
}

TEST_F(TensorStoreTest, ShardTensorNotListedInIndex) {
  write_sharded_checkpoint();
  write_index({{"embed.weight", "model-00001-of-00002.safetensors"},
               {"layers.0.attn.q.weight", "model-00001-of-00002.safetensors"},
               {"layers.0.mlp.w1", "model-00002-of-00002.safetensors"}});
  expect_error([&] { TensorStore::open_dir(dir_); },
               {"shard \"model-00002-of-00002.safetensors\"", "tensor \"norm.weight\"",
                "the index does not list"});
}

TEST_F(TensorStoreTest, TensorInTwoShards) {
  write_sharded_checkpoint();
  write_file(dir_ / "model-00002-of-00002.safetensors",
             good_image({{"layers.0.mlp.w1", "F32", {2}, iota_bytes(8)},
                         {"norm.weight", "F32", {1}, iota_bytes(4)},
                         {"embed.weight", "BF16", {4, 2}, iota_bytes(16)}}));
  expect_error([&] { TensorStore::open_dir(dir_); },
               {"tensor \"embed.weight\"", "model-00002-of-00002.safetensors",
                "index maps it to \"model-00001-of-00002.safetensors\""});
}

TEST_F(TensorStoreTest, MalformedIndex) {
  write_sharded_checkpoint();
  write_text(dir_ / "model.safetensors.index.json", "{\"weight_map\": {");
  expect_error([&] { TensorStore::open_dir(dir_); }, {index_path(), "not valid JSON"});
  write_text(dir_ / "model.safetensors.index.json", R"({"metadata": {"total_size": 1e999}})");
  expect_error([&] { TensorStore::open_dir(dir_); }, {index_path(), "not valid JSON"});
  write_text(dir_ / "model.safetensors.index.json", "[]");
  expect_error([&] { TensorStore::open_dir(dir_); }, {index_path(), "not a JSON object"});
  write_text(dir_ / "model.safetensors.index.json", R"({"metadata": {}})");
  expect_error([&] { TensorStore::open_dir(dir_); }, {index_path(), "missing \"weight_map\""});
  write_text(dir_ / "model.safetensors.index.json", R"({"weight_map": ["a"]})");
  expect_error([&] { TensorStore::open_dir(dir_); }, {"\"weight_map\" must be an object"});
  write_text(dir_ / "model.safetensors.index.json", R"({"weight_map": {"embed.weight": 1}})");
  expect_error([&] { TensorStore::open_dir(dir_); }, {"tensor \"embed.weight\"", "must be a shard file name"});
  write_text(dir_ / "model.safetensors.index.json",
             R"({"weight_map": {"embed.weight": "../model-00001-of-00002.safetensors"}})");
  expect_error([&] { TensorStore::open_dir(dir_); }, {"tensor \"embed.weight\"", "not a relative file name"});
  write_text(dir_ / "model.safetensors.index.json", R"({"weight_map": {"embed.weight": "/etc/passwd"}})");
  expect_error([&] { TensorStore::open_dir(dir_); }, {"not a relative file name"});
}

TEST_F(TensorStoreTest, BadShardErrorNamesTheShard) {
  write_sharded_checkpoint();
  write_file(dir_ / "model-00002-of-00002.safetensors", {1, 2, 3});
  expect_error([&] { TensorStore::open_dir(dir_); }, {"model-00002-of-00002.safetensors", "too short"});
}

TEST_F(TensorStoreTest, SingleModelFile) {
  write_file(dir_ / "model.safetensors", good_image({{"w", "F16", {2}, iota_bytes(4, 9)}}));
  write_file(dir_ / "extra.safetensors", good_image({{"w", "F16", {2}, iota_bytes(4)}}));  // ignored
  TensorStore store = TensorStore::open_dir(dir_);
  ASSERT_EQ(store.files().size(), 1u);
  EXPECT_EQ(store.names(), std::vector<std::string>{"w"});
  TensorView w = store.get("w");
  EXPECT_EQ(std::vector<uint8_t>(w.data, w.data + 4), iota_bytes(4, 9));
}

TEST_F(TensorStoreTest, LooseFilesAreAllLoaded) {
  write_file(dir_ / "b.safetensors", good_image({{"x", "U8", {2}, {1, 2}}}));
  write_file(dir_ / "a.safetensors", good_image({{"y", "U8", {1}, {3}}}));
  write_text(dir_ / "config.json", "{}");
  TensorStore store = TensorStore::open_dir(dir_);
  EXPECT_EQ(store.names(), (std::vector<std::string>{"x", "y"}));
  ASSERT_EQ(store.files().size(), 2u);
  EXPECT_EQ(store.files()[0]->path().filename(), "a.safetensors");  // sorted by name
  EXPECT_EQ(store.get("x").data[1], 2);
  EXPECT_EQ(store.get("y").data[0], 3);
}

TEST_F(TensorStoreTest, LooseFilesMustNotRepeatTensors) {
  write_file(dir_ / "a.safetensors", good_image({{"x", "U8", {2}, {1, 2}}}));
  write_file(dir_ / "b.safetensors", good_image({{"x", "U8", {1}, {3}}}));
  expect_error([&] { TensorStore::open_dir(dir_); },
               {"tensor \"x\"", "appears in both a.safetensors and b.safetensors"});
}

TEST_F(TensorStoreTest, EmptyOrMissingDirectory) {
  write_text(dir_ / "config.json", "{}");
  expect_error([&] { TensorStore::open_dir(dir_); }, {"no .safetensors files in " + dir_.string()});
  expect_error([&] { TensorStore::open_dir(dir_ / "absent"); }, {"absent", "not a directory"});
}


// make_resident copies the named tensors (only those) into the arena; views then point there and
// hold the same bytes, in every shard.
TEST_F(TensorStoreTest, MakeResidentCopiesOnlyTheNamedTensors) {
  write_sharded_checkpoint();
  TensorStore store = TensorStore::open_dir(dir_);
  const uint8_t* mapped_embed = store.get("embed.weight").data;
  const uint8_t* mapped_norm = store.get("norm.weight").data;
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  const uint64_t copied = store.make_resident({"layers.0.attn.q.weight", "norm.weight", "norm.weight"},
                                              [&](uint64_t done, uint64_t total) { calls.push_back({done, total}); });
  EXPECT_EQ(copied, 8u + 4u);
  EXPECT_EQ(store.resident_bytes(), 128u);  // two tensors, each 64-byte aligned
  ASSERT_FALSE(calls.empty());
  EXPECT_EQ(calls.back(), (std::pair<uint64_t, uint64_t>{12, 12}));
  EXPECT_EQ(store.get("embed.weight").data, mapped_embed);  // not named: still the mapping
  TensorView norm = store.get("norm.weight");
  EXPECT_NE(norm.data, mapped_norm);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(norm.data) % 64, 0u);
  EXPECT_EQ(std::vector<uint8_t>(norm.data, norm.data + norm.nbytes), iota_bytes(4, 120));
  TensorView q = store.find("layers.0.attn.q.weight").value();
  EXPECT_EQ(q.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(std::vector<uint8_t>(q.data, q.data + q.nbytes), iota_bytes(8, 50));
  // Once per store; naming only resident tensors again is a no-op.
  EXPECT_EQ(store.make_resident({"norm.weight"}), 0u);
  expect_error([&] { store.make_resident({"embed.weight"}); }, {"already copied"});
}

TEST_F(TensorStoreTest, MakeResidentNamesAMissingTensor) {
  write_sharded_checkpoint();
  TensorStore store = TensorStore::open_dir(dir_);
  expect_error([&] { store.make_resident({"norm.weight", "lm_head.weight"}); }, {"lm_head.weight", dir_.string()});
  EXPECT_EQ(store.resident_bytes(), 0u);
}

// A shard cut short after it was opened (the mapping no longer covers the tensor): the copy
// fails with the file and the tensor named, instead of a SIGBUS on first use.
TEST_F(TensorStoreTest, MakeResidentReportsAFileTruncatedAfterOpen) {
  write_sharded_checkpoint();
  TensorStore store = TensorStore::open_dir(dir_);
  const auto shard = dir_ / "model-00002-of-00002.safetensors";
  std::filesystem::resize_file(shard, std::filesystem::file_size(shard) - 2);
  expect_error([&] { store.make_resident({"norm.weight"}); }, {"model-00002-of-00002.safetensors", "norm.weight", "cannot read"});
}

// Larger than one 64 MiB copy piece, so several threads each copy part of one tensor.
TEST_F(TensorStoreTest, MakeResidentSplitsLargeTensors) {
  const size_t bytes = (size_t(64) << 20) * 2 + 4096 + 8;
  std::vector<uint8_t> data(bytes);
  for (size_t i = 0; i < bytes; ++i) data[i] = uint8_t((i * 2654435761u) >> 13);
  write_file(dir_ / "model.safetensors", good_image({{"big", "U8", {int64_t(bytes)}, data}, {"small", "F32", {1}, iota_bytes(4, 3)}}));
  TensorStore store = TensorStore::open_dir(dir_);
  EXPECT_EQ(store.make_resident({"big", "small"}), bytes + 4);
  TensorView big = store.get("big");
  ASSERT_EQ(big.nbytes, bytes);
  EXPECT_TRUE(std::equal(data.begin(), data.end(), big.data));
  EXPECT_LE(store.resident_huge_page_bytes(), store.resident_bytes());
}

// A RowPair is copied once, its rows alternating (first, second, first, ...), across shards;
// get() keeps returning each tensor's own bytes from its file, and the other named tensors are
// copied as usual.
TEST_F(TensorStoreTest, MakeResidentInterleavesTheRowsOfAPair) {
  write_file(dir_ / "model-00001-of-00002.safetensors",
             good_image({{"gate", "BF16", {2, 3, 4}, iota_bytes(48, 1)}, {"norm", "F32", {1}, iota_bytes(4, 120)}}));
  write_file(dir_ / "model-00002-of-00002.safetensors", good_image({{"up", "BF16", {2, 3, 4}, iota_bytes(48, 101)}}));
  write_index({{"gate", "model-00001-of-00002.safetensors"},
               {"norm", "model-00001-of-00002.safetensors"},
               {"up", "model-00002-of-00002.safetensors"}});
  TensorStore store = TensorStore::open_dir(dir_);
  const uint8_t* mapped_gate = store.get("gate").data;
  std::pair<uint64_t, uint64_t> last{0, 0};
  // "up" named as a plain tensor too: the pair's copy wins, there is one.
  const uint64_t copied =
      store.make_resident({"norm", "up"}, {{"gate", "up"}}, [&](uint64_t done, uint64_t total) { last = {done, total}; });
  EXPECT_EQ(copied, 96u + 4u);
  EXPECT_EQ(last, (std::pair<uint64_t, uint64_t>{100, 100}));
  EXPECT_EQ(store.resident_bytes(), 128u + 64u);
  const auto gate = store.interleaved_rows("gate"), up = store.interleaved_rows("up");
  ASSERT_TRUE(gate && up);
  EXPECT_EQ(gate->data, up->data);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(gate->data) % 64, 0u);
  EXPECT_EQ(gate->row_bytes, 8u);  // the last dimension: 4 bf16
  EXPECT_FALSE(gate->odd);
  EXPECT_TRUE(up->odd);
  EXPECT_EQ(gate->partner, "up");
  EXPECT_EQ(up->partner, "gate");
  EXPECT_FALSE(store.interleaved_rows("norm"));
  const std::vector<uint8_t> gate_bytes = iota_bytes(48, 1), up_bytes = iota_bytes(48, 101);
  for (size_t row = 0; row < 6; ++row) {
    EXPECT_TRUE(std::equal(gate_bytes.begin() + long(8 * row), gate_bytes.begin() + long(8 * row + 8), gate->data + 16 * row)) << row;
    EXPECT_TRUE(std::equal(up_bytes.begin() + long(8 * row), up_bytes.begin() + long(8 * row + 8), gate->data + 16 * row + 8)) << row;
  }
  EXPECT_FALSE(store.is_resident("gate"));
  EXPECT_EQ(store.get("gate").data, mapped_gate);
  const TensorView up_view = store.get("up");
  EXPECT_EQ(std::vector<uint8_t>(up_view.data, up_view.data + up_view.nbytes), up_bytes);
  EXPECT_TRUE(store.is_resident("norm"));
  // Naming the same copies again is a no-op.
  EXPECT_EQ(store.make_resident({"norm"}, {{"gate", "up"}}), 0u);
}

TEST_F(TensorStoreTest, MakeResidentRefusesPairsThatDoNotMatch) {
  write_file(dir_ / "model.safetensors",
             good_image({{"a", "F32", {2, 2}, iota_bytes(16, 1)}, {"b", "F32", {2, 3}, iota_bytes(24, 1)},
                         {"c", "BF16", {2, 4}, iota_bytes(16, 1)}, {"d", "F32", {2, 2}, iota_bytes(16, 9)}}));
  TensorStore store = TensorStore::open_dir(dir_);
  expect_error([&] { store.make_resident({}, {{"a", "b"}}); }, {"\"a\"", "\"b\"", "[2, 2]", "[2, 3]", "one dtype and one non-empty shape"});
  expect_error([&] { store.make_resident({}, {{"a", "c"}}); }, {"F32", "BF16"});
  expect_error([&] { store.make_resident({}, {{"a", "a"}}); }, {"\"a\"", "with itself"});
  expect_error([&] { store.make_resident({}, {{"a", "d"}, {"d", "a"}}); }, {"more than one copy"});
  expect_error([&] { store.make_resident({}, {{"a", "missing"}}); }, {"missing", dir_.string()});
  EXPECT_EQ(store.resident_bytes(), 0u);
  EXPECT_EQ(store.make_resident({}, {{"a", "d"}}), 32u);
}

// A pair over several copy pieces (32 MiB of each tensor a piece, so three here, the last short),
// each read with several preadv calls of up to IOV_MAX rows.
TEST_F(TensorStoreTest, MakeResidentInterleavesLargePairsInPieces) {
  const size_t row_bytes = 4096, rows = 8192 * 2 + 5, bytes = row_bytes * rows;
  std::vector<uint8_t> first(bytes), second(bytes);
  for (size_t i = 0; i < bytes; ++i) {
    first[i] = uint8_t((i * 2654435761u) >> 13);
    second[i] = uint8_t((i * 40503u) >> 7);
  }
  write_file(dir_ / "model.safetensors", good_image({{"w1", "U8", {int64_t(rows), int64_t(row_bytes)}, first},
                                                     {"w3", "U8", {int64_t(rows), int64_t(row_bytes)}, second}}));
  TensorStore store = TensorStore::open_dir(dir_);
  EXPECT_EQ(store.make_resident({}, {{"w1", "w3"}}), 2 * bytes);
  const auto copy = store.interleaved_rows("w1");
  ASSERT_TRUE(copy);
  for (size_t row = 0; row < rows; ++row) {
    ASSERT_TRUE(std::equal(first.begin() + long(row * row_bytes), first.begin() + long((row + 1) * row_bytes),
                           copy->data + 2 * row * row_bytes)) << "w1 row " << row;
    ASSERT_TRUE(std::equal(second.begin() + long(row * row_bytes), second.begin() + long((row + 1) * row_bytes),
                           copy->data + (2 * row + 1) * row_bytes)) << "w3 row " << row;
  }
}

// Of the pages under [data, data + bytes), the share the page cache holds.
double share_in_page_cache(const uint8_t* data, size_t bytes) {
  const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t first = uintptr_t(data) / page * page;
  const size_t pages = (uintptr_t(data) + bytes - first + page - 1) / page;
  std::vector<unsigned char> resident(pages);
  if (::mincore(reinterpret_cast<void*>(first), pages * page, resident.data()) != 0) return -1.0;
  size_t held = 0;
  for (unsigned char r : resident) held += r & 1;
  return double(held) / double(pages);
}

// The kernel reads ahead around whatever the test touches (8 MiB here: opening the file faults its
// header page), so the tensor is large and only its middle is watched.
TEST_F(TensorStoreTest, ReadAheadBringsAMappedTensorIntoThePageCache) {
  const size_t bytes = size_t(48) << 20, watched_begin = size_t(16) << 20, watched_bytes = size_t(16) << 20;
  std::vector<uint8_t> data(bytes);
  for (size_t i = 0; i < bytes; ++i) data[i] = uint8_t(i * 31 + 7);
  const auto path = dir_ / "model.safetensors";
  write_file(path, good_image({{"embed", "U8", {int64_t(bytes)}, data}, {"norm", "F32", {1}, iota_bytes(4, 3)}}));
  {  // out of the page cache, so that only read_ahead can bring it back
    const int fd = ::open(path.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
  TensorStore store = TensorStore::open_dir(dir_);
  store.make_resident({"norm"});
  const TensorView embed = store.get("embed");
  const uint8_t* watched = embed.data + watched_begin;
  const double before = share_in_page_cache(watched, watched_bytes);
  ASSERT_GE(before, 0.0) << "mincore failed";
  if (before > 0.5) GTEST_SKIP() << "this file system keeps the file cached (" << before << " of it)";
  EXPECT_TRUE(store.read_ahead("embed"));
  double after = before;
  for (int i = 0; i < 1000 && after < 1.0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    after = share_in_page_cache(watched, watched_bytes);
  }
  EXPECT_EQ(after, 1.0) << "before read_ahead: " << before;
  EXPECT_TRUE(std::equal(data.begin(), data.end(), embed.data));
  EXPECT_FALSE(store.read_ahead("norm"));  // a resident copy is in memory already
  expect_error([&] { store.read_ahead("lm_head"); }, {"lm_head", dir_.string()});
  SafetensorsFile in_memory = SafetensorsFile::from_bytes(good_image({{"x", "U8", {1}, {1}}}), "image");
  EXPECT_FALSE(in_memory.read_ahead("x"));
}

TEST(ResidentMemory, ArenaAlignsAndRefusesPastCapacity) {
  ResidentArena arena(250);  // rounded up to 256
  uint8_t* a = arena.allocate(10);
  uint8_t* b = arena.allocate(100);
  EXPECT_EQ(b - a, 64);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % (2 << 20), 0u);  // starts on a huge page boundary
  EXPECT_EQ(arena.used(), 64u + 128u);
  EXPECT_NE(arena.allocate(64), nullptr);  // exactly the rest
  expect_error([&] { arena.allocate(1); }, {"arena full"});
}

}  // namespace
}  // namespace inkling
