// Where a decode step's time goes: wall time and weight bytes of every weight product, summed
// per label (`inkling bench --profile`). Off by default; when off a product pays one relaxed load.
//
// The model labels its products by what they compute (ProductLabel); the kernels time each
// outermost product call (a matvec inside a matmul is not counted twice) on the calling thread.
// Labels are string literals: their pointers are the keys.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace inkling::kernels {

void set_product_profiling(bool on);
bool product_profiling();

// Products started on this thread while it lives carry `label` (the innermost label wins).
class ProductLabel {
 public:
  explicit ProductLabel(const char* label);
  ~ProductLabel();
  ProductLabel(const ProductLabel&) = delete;
  ProductLabel& operator=(const ProductLabel&) = delete;

 private:
  const char* saved_;
};

struct ProductTimes {
  std::string label;  // "other products" for products started with no label
  int64_t calls = 0;
  int64_t weight_bytes = 0;  // each product's weights counted once, however many rows of x it took
  double seconds = 0;
};
// Every label seen since the last reset, in the order first seen.
std::vector<ProductTimes> product_profile();
void reset_product_profile();

namespace detail {
// Times one product call when profiling is on and no product is already being timed on this
// thread.
class ProductTimer {
 public:
  explicit ProductTimer(int64_t weight_bytes);
  ~ProductTimer();
  ProductTimer(const ProductTimer&) = delete;
  ProductTimer& operator=(const ProductTimer&) = delete;

 private:
  int64_t bytes_ = -1;  // -1: not timing
  int64_t start_ns_ = 0;
};
}  // namespace detail

}  // namespace inkling::kernels
