// Helpers for building safetensors images by hand (valid and deliberately malformed).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"

namespace inkling::testing {

// 8-byte little-endian header length + header text + data section. `declared_len` overrides the
// length prefix (to make it lie).
inline std::vector<uint8_t> raw_image(const std::string& header, const std::vector<uint8_t>& data = {},
                                      std::optional<uint64_t> declared_len = std::nullopt) {
  uint64_t len = declared_len ? *declared_len : header.size();
  // Sized once and filled in place: growing an 8-byte vector with insert() made GCC 12 warn
  // -Warray-bounds about its reallocation path.
  std::vector<uint8_t> out(8 + header.size() + data.size());
  for (int i = 0; i < 8; ++i) out[size_t(i)] = uint8_t(len >> (8 * i));
  std::copy(header.begin(), header.end(), out.begin() + 8);
  std::copy(data.begin(), data.end(), out.begin() + 8 + std::ptrdiff_t(header.size()));
  return out;
}

struct RawTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// A well-formed image: tensors laid out back to back in the given order, header padded with
// spaces to a multiple of 8 bytes (as the reference writer does).
inline std::vector<uint8_t> good_image(const std::vector<RawTensor>& tensors,
                                       const std::map<std::string, std::string>& metadata = {}) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<uint8_t> data;
  for (const RawTensor& tensor : tensors) {
    header[tensor.name] = {{"dtype", tensor.dtype},
                           {"shape", tensor.shape},
                           {"data_offsets", {data.size(), data.size() + tensor.bytes.size()}}};
    data.insert(data.end(), tensor.bytes.begin(), tensor.bytes.end());
  }
  std::string text = header.dump();
  while (text.size() % 8) text += ' ';
  return raw_image(text, data);
}

inline std::vector<uint8_t> iota_bytes(size_t count, uint8_t start = 0) {
  std::vector<uint8_t> out(count);
  for (size_t i = 0; i < count; ++i) out[i] = uint8_t(start + i);
  return out;
}

inline void write_file(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

inline void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

// Runs `body`, expects inkling::Error, and checks that its message contains every phrase.
inline void expect_error(const std::function<void()>& body, const std::vector<std::string>& phrases) {
  try {
    body();
  } catch (const Error& error) {
    std::string message = error.what();
    for (const std::string& phrase : phrases)
      EXPECT_NE(message.find(phrase), std::string::npos)
          << "message: " << message << "\nlacks: " << phrase;
    return;
  } catch (const std::exception& other) {
    ADD_FAILURE() << "threw a non-inkling exception: " << other.what();
    return;
  }
  ADD_FAILURE() << "did not throw; expected an error mentioning " << phrases.front();
}

// A fresh scratch directory per test, removed afterwards.
class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("inkling_io_" + std::to_string(::getpid()) + "_" + info->name() + "_" +
            std::to_string(counter++));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::filesystem::path dir_;
};

}  // namespace inkling::testing
