// A non-owning view of a dense row-major tensor (usually straight into an mmap'd file).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/dtype.h"

namespace inkling {

struct TensorView {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t nbytes = 0;

  int64_t numel() const {
    int64_t count = 1;
    for (int64_t dim : shape) count *= dim;
    return count;
  }
  int rank() const { return int(shape.size()); }
  float at_f32(size_t index) const { return load_as_f32(data, dtype, index); }
};

// "[2048, 128]" for messages.
std::string shape_to_string(const std::vector<int64_t>& shape);

}  // namespace inkling
