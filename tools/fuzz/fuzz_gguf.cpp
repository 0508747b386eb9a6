// libFuzzer target for the GGUF reader and the ggml dequantizers.
//
// Built and run by tools/fuzz/run.sh (seed corpus: tools/fuzz/corpus/gguf; `-seed_corpus=1 DIR`
// writes its seeds into DIR).
//
// Every input must either parse into tensors whose views lie inside the image, in order, of the
// size their type and dims give, or throw inkling::Error. Every typed read of every key must
// return or throw inkling::Error, and dequantizing the first rows of every tensor of a
// dequantizable type must stay inside the tensor's bytes (ASan checks) and inside the grids.
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "../../tests/io/gguf_test_util.h"
#include "io/gguf.h"
#include "tensor/ggml_types.h"
#include "fuzz_util.h"

namespace {

using inkling::GgmlType;
using inkling::GgufValueType;
using inkling::testing::GgufBuilder;

void write_seeds(const char* dir) {
  std::vector<GgufBuilder> seeds(4);
  seeds[0].add_string("general.architecture", "inkling");
  seeds[0].add_u32("inkling.block_count", 2);
  seeds[0].add_array<uint8_t>("inkling.attention.sliding_window_pattern", GgufValueType::Bool, {1, 0});
  seeds[0].add_array<int32_t>("inkling.attention.head_count_kv", GgufValueType::I32, {2, 4});
  seeds[0].add_string_array("tokenizer.ggml.tokens", {"a", "b", "<|end|>"});
  seeds[0].add_tensor("token_embd.weight", GgmlType::F32, {8, 3});
  seeds[0].add_tensor("blk.0.attn_q.weight", GgmlType::Q8_0, {32, 2});
  seeds[1].alignment = 64;
  seeds[1].add_u32("general.alignment", 64);
  seeds[1].add_f32("inkling.logit_scale_denom", 8.0f);
  for (GgmlType type : {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::IQ2_XXS, GgmlType::IQ1_M})
    seeds[1].add_tensor("t" + std::to_string(uint32_t(type)), type, {256});
  seeds[2].version = 2;
  seeds[2].add_u16("split.no", 0);
  seeds[2].add_u16("split.count", 1);
  for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q5_1, GgmlType::IQ4_NL, GgmlType::BF16, GgmlType::F16})
    seeds[2].add_tensor("t" + std::to_string(uint32_t(type)), type, {32, 2});
  for (GgmlType type : {GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q5_K, GgmlType::IQ2_XS, GgmlType::IQ2_S,
                        GgmlType::IQ3_XXS, GgmlType::IQ3_S, GgmlType::IQ1_S, GgmlType::IQ4_XS})
    seeds[3].add_tensor("t" + std::to_string(uint32_t(type)), type, {256});
  int n = 0;
  for (const GgufBuilder& seed : seeds) seed.write(std::string(dir) + "/seed" + std::to_string(n++));
}

template <class Read>
void read_quietly(const Read& read) {
  try {
    read();
  } catch (const inkling::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  inkling::fuzz::write_seeds_if_asked(*argc, *argv, write_seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  try {
    auto file = inkling::GgufFile::from_bytes(std::move(bytes), "fuzz.gguf");
    for (const std::string& key : file.keys()) {
      if (!file.find(key)) std::abort();
      read_quietly([&] { file.string(key); });
      read_quietly([&] { file.unsigned_integer(key); });
      read_quietly([&] { file.signed_integer(key); });
      read_quietly([&] { file.number(key); });
      read_quietly([&] { file.boolean(key); });
      read_quietly([&] { file.integer_array(key); });
      read_quietly([&] { file.float_array(key); });
      read_quietly([&] { file.string_array(key); });
    }
    uint64_t expected = 0;
    for (const inkling::GgufTensor& tensor : file.tensors()) {
      if (file.find_tensor(tensor.name) != &tensor) std::abort();
      if (tensor.offset != expected || tensor.offset % file.alignment() != 0) std::abort();
      if (inkling::ggml_row_bytes(tensor.type, tensor.elements()) != tensor.nbytes) std::abort();
      if (file.data_offset() + tensor.offset + tensor.nbytes > file.file_bytes()) std::abort();
      expected = (tensor.offset + tensor.nbytes + file.alignment() - 1) / file.alignment() * file.alignment();
      volatile uint8_t sink = 0;
      for (uint64_t i = 0; i < tensor.nbytes; ++i) sink = sink ^ tensor.data[i];  // ASan checks bounds
      if (!inkling::ggml_type_info(tensor.type).dequantizable || tensor.row_length() == 0) continue;
      // A few rows, each decoded into a buffer of exactly its length.
      const uint64_t row_bytes = *inkling::ggml_row_bytes(tensor.type, tensor.row_length());
      if (tensor.row_length() > (int64_t(1) << 16)) continue;  // keep runs fast; the decoders are per block
      std::vector<float> row(size_t(tensor.row_length()));
      for (int64_t r = 0; r < tensor.rows() && r < 4; ++r)
        inkling::dequantize_ggml_row(tensor.type, tensor.data + uint64_t(r) * row_bytes, row.data(), tensor.row_length());
    }
  } catch (const inkling::Error&) {
  }
  return 0;
}
