#!/usr/bin/env bash
# Builds (warnings as errors) and runs every test (unit, conformance, CLI tests and the server's
# end-to-end suite) through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh -DINKLING_WERROR=ON
scripts/test_deps.sh
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"
