#!/usr/bin/env bash
# Builds the `inkling` binary alone (the build's output goes to build/demo-build.log), then runs
# `inkling generate` with the arguments given; with none, a short prompt to the synthetic demo
# model (written to ~/.cache/inkling on first use; random weights, so its text is noise).
# stdout carries only the generated text; notes and speeds go to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
mkdir -p build
log=build/demo-build.log
echo "building inkling (the first build takes about 6 minutes on two idle cores; log: $log) ..." >&2
if ! { cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j"$(nproc)" --target inkling; } >"$log" 2>&1; then
  tail -n 40 "$log" >&2
  echo "the build failed; the whole log is in $log" >&2
  exit 1
fi
if [ $# -eq 0 ]; then
  set -- -p "The quick brown fox" -n 32
fi
exec ./build/inkling generate "$@"
