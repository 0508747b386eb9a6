// The one exception type the library throws for bad input (files, configs, requests).
// Messages name the offending file / tensor / field; the CLI prints them and exits 2.
#pragma once

#include <stdexcept>
#include <string>

namespace inkling {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace inkling
