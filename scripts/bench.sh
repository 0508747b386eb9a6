#!/usr/bin/env bash
# The speed comparison: writes the `bench` preset in bf16, mlx-4bit and nvfp4 (once, ~5 + 2 x 1.6 GB
# under $INKLING_BENCH_DIR, default ~/.cache/inkling) and runs `inkling bench` on each with 2 threads.
# Usage: scripts/bench.sh [extra `inkling bench` flags, e.g. -p 512 -n 128 --reps 3]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
dir="${INKLING_BENCH_DIR:-$HOME/.cache/inkling}"
mkdir -p "$dir"
for layout in original-bf16 mlx-4bit nvfp4; do
  ckpt="$dir/bench-$layout"
  [ -f "$ckpt/config.json" ] || ./build/inkling synth "$ckpt" --layout "$layout" --preset bench
done
for layout in original-bf16 mlx-4bit nvfp4; do
  ./build/inkling bench -m "$dir/bench-$layout" -t "${THREADS:-2}" "$@" | tail -n 1
done
