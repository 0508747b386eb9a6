#!/usr/bin/env bash
# Runs the server's end-to-end pytest suite against INKLING_BINARY (ctest sets it).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../python_suite.sh"
use_test_python "the server tests" pytest openai anthropic requests
run_pytest_in "$here" "$@"
