#!/usr/bin/env bash
# Side by side with a llama.cpp build that has the Inkling architecture, on the same weights, in
# one run: llama-bench and `inkling bench` alternate so both see the same host conditions.
#
#   scripts/bench-vs-llama.sh LLAMA_BENCH GGUF_BF16 GGUF_Q4_0 CKPT_BF16 CKPT_MLX4 CKPT_NVFP4
#
# GGUF_BF16 is CKPT_BF16 converted by that build's convert_hf_to_gguf.py (--outtype bf16) and
# GGUF_Q4_0 its `llama-quantize ... Q4_0`; the inkling checkpoints are `inkling synth --preset
# bench` (the mlx-4bit / nvfp4 ones from the same seed). Environment: THREADS (2), PP (512),
# TG (128), REPS (3). Prints one markdown table row per run.
set -euo pipefail
if [ $# -ne 6 ]; then
  sed -n '2,10p' "$0" >&2
  exit 2
fi
llama_bench=$1 gguf_bf16=$2 gguf_q4=$3 ckpt_bf16=$4 ckpt_mlx=$5 ckpt_nvfp4=$6
threads=${THREADS:-2} pp=${PP:-512} tg=${TG:-128} reps=${REPS:-3}
cd "$(dirname "$0")/.."
[ -x build/inkling ] || scripts/build.sh
llama() {
  "$llama_bench" -m "$1" -p "$pp" -n "$tg" -t "$threads" -r "$reps" -o md 2>/dev/null | grep -E "^\| .*(pp|tg)[0-9]+" |
    sed "s/^/| llama.cpp /"
}
inkling() { ./build/inkling bench -m "$1" -p "$pp" -n "$tg" -t "$threads" --reps "$reps" "${@:2}" 2>/dev/null | tail -n 1; }
llama "$gguf_bf16"
inkling "$ckpt_bf16"
inkling "$ckpt_bf16" --fast
llama "$gguf_q4"
inkling "$ckpt_mlx" --fast
inkling "$ckpt_nvfp4" --fast
