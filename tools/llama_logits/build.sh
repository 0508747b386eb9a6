#!/usr/bin/env bash
# Builds tools/llama_logits/llama_logits.cpp against a llama.cpp build (never part of inkling's
# CMake build: it links libllama).
#
#   tools/llama_logits/build.sh LLAMA_CPP_DIR [OUTPUT]   (default OUTPUT: build/llama_logits)
#
# LLAMA_CPP_DIR is a checkout built in LLAMA_CPP_DIR/build (build/bin/libllama.so); the binary
# finds the libraries there through its rpath.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
llama="$(cd "${1:?usage: build.sh LLAMA_CPP_DIR [OUTPUT]}" && pwd)"
out="${2:-$here/../../build/llama_logits}"
lib="$llama/build/bin"
[[ -f "$lib/libllama.so" ]] || { echo "no $lib/libllama.so: build llama.cpp first" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
"${CXX:-c++}" -std=c++17 -O2 -Wall -Wextra -I"$llama/include" -I"$llama/ggml/include" \
  "$here/llama_logits.cpp" -o "$out" -L"$lib" -lllama -lggml -lggml-base -Wl,-rpath,"$lib"
echo "$out"
