#!/usr/bin/env bash
# Builds and runs every test (unit, conformance and CLI tests) through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"
