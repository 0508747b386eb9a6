#!/usr/bin/env bash
# Runs the GGUF pytest suite (dequantizers bit for bit against gguf-py; end-to-end checks against
# llama.cpp's converter, which skip without it). ctest sets DEQUANTIZE_ROWS and INKLING_BINARY.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../python_suite.sh"
use_test_python "the GGUF tests" pytest numpy gguf
run_pytest_in "$here" "$@"
