// TensorStore: single-file, loose-file and index-sharded checkpoint directories.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

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

}  // namespace
}  // namespace inkling
