#!/usr/bin/env bash
# Builds every libFuzzer target with clang (ASan + UBSan) into build-fuzz/ and runs each on its
# committed seed corpus (tools/fuzz/corpus/NAME) for SECONDS (default 60). New inputs go to
# build-fuzz/work/NAME, never into the committed corpus. A crash, a sanitizer report, a leak or an
# invariant abort fails the run and leaves the reproducer in build-fuzz/NAME-crash-*.
#
#   tools/fuzz/run.sh [SECONDS] [NAME...]     # NAME: safetensors gguf config tokenizer jinja output_parser front_doors
#   tools/fuzz/run.sh ci [NAME...]            # what CI runs: see below
#
# `ci` runs each target from a fresh work directory with a fixed seed for a fixed number of
# executions, about a minute's worth here (capped at two minutes of wall time): the same binary
# then repeats the same inputs, so CI replays, or stops early inside, a run that passed here
# rather than rolling new dice on every push. Longer random runs (SECONDS) are how bugs are found.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds="${1:-60}"
shift || true
ci=0
if [ "$seconds" = ci ]; then
  ci=1
  seconds=120
fi
# Executions a target made in about 60 s on the 2-core machine that set these.
ci_runs() {
  case "$1" in
    safetensors) echo 300000 ;; gguf) echo 300000 ;; config) echo 300000 ;; tokenizer) echo 40000 ;;
    jinja) echo 10000 ;; output_parser) echo 100000 ;; front_doors) echo 1300 ;;
  esac
}
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(safetensors gguf config tokenizer jinja output_parser front_doors)

if ! command -v clang++ >/dev/null || ! [ -e "$(clang++ -print-resource-dir 2>/dev/null)/lib/linux/libclang_rt.fuzzer-x86_64.a" ]; then
  echo "installing: clang libclang-rt-14-dev (libFuzzer)" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq clang libclang-rt-14-dev >/dev/null
fi

out=build-fuzz
mkdir -p "$out/obj" "$out/work"
flags=(-std=c++20 -g -O1 -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -Isrc
       "-DINKLING_SOURCE_DIR=\"$PWD\"")
pcre=($(pkg-config --cflags --libs libpcre2-8))

# Sources each target links (the fuzz entry point itself comes first).
sources_of() {
  # The tokenizer reads GGUF vocabularies too (gguf_tokenizer.cpp): it links the GGUF reader.
  local tok="src/runtime/tokenizer/*.cpp src/io/text_file.cpp src/io/gguf.cpp src/io/mapped_file.cpp src/io/resident_memory.cpp src/tensor/ggml_types.cpp src/tensor/tensor_view.cpp src/tensor/dtype.cpp"
  local jinja="src/runtime/jinja/*.cpp"
  case "$1" in
    safetensors) echo "src/io/safetensors.cpp src/io/mapped_file.cpp src/tensor/dtype.cpp src/tensor/tensor_view.cpp" ;;
    gguf) echo "src/io/gguf.cpp src/io/gguf_writer.cpp src/io/mapped_file.cpp src/io/resident_memory.cpp src/tensor/ggml_types.cpp src/tensor/ggml_dequantize.cpp src/tensor/dtype.cpp src/tensor/tensor_view.cpp" ;;
    config) echo "src/model/config.cpp src/io/text_file.cpp" ;;
    tokenizer) echo "$tok" ;;
    jinja) echo "$jinja src/io/text_file.cpp" ;;
    output_parser) echo "src/runtime/chat/*.cpp $jinja $tok" ;;
    front_doors) echo "src/apps/server/front_door.cpp src/apps/server/http_util.cpp src/apps/server/openai_*.cpp
                       src/apps/server/anthropic_messages.cpp src/runtime/serve/prompt.cpp
                       src/runtime/serve/turn_output.cpp src/runtime/serve/tool_forcer.cpp
                       src/runtime/generate/sampler.cpp src/runtime/grammar/*.cpp src/runtime/chat/*.cpp $jinja $tok" ;;
    *) echo "unknown fuzz target: $1" >&2; exit 2 ;;
  esac
}

# Compiles each source into build-fuzz/obj once (again when it or any header is newer), nproc at a time.
compile_all() {
  local objs=() running=0
  for src in "$@"; do
    local obj="$out/obj/$(echo "$src" | tr '/' '_').o"
    objs+=("$obj")
    if [ ! -e "$obj" ] || [ "$src" -nt "$obj" ] || [ -n "$(find src -name '*.h' -newer "$obj" -print -quit)" ]; then
      clang++ "${flags[@]}" -c "$src" -o "$obj" &
      running=$((running + 1))
      if [ "$running" -ge "$(nproc)" ]; then wait -n; running=$((running - 1)); fi
    fi
  done
  wait
  for obj in "${objs[@]}"; do [ -e "$obj" ] || { echo "compiling $obj failed" >&2; exit 1; }; done
  printf '%s\n' "${objs[@]}"
}

status=0
for name in "${targets[@]}"; do
  srcs=(tools/fuzz/fuzz_$name.cpp $(sources_of "$name"))
  echo "== fuzz_$name: building ${#srcs[@]} sources" >&2
  objs=($(compile_all "${srcs[@]}"))
  clang++ -fsanitize=fuzzer,address,undefined "${objs[@]}" "${pcre[@]}" -o "$out/fuzz_$name"
  work="$out/work/$name"
  if [ "$ci" = 1 ]; then
    work="$out/ci-work/$name"
    rm -rf "$work"
  fi
  mkdir -p "$work" "tools/fuzz/corpus/$name"
  budget=(-max_total_time="$seconds")
  [ "$ci" = 1 ] && budget+=(-seed=1 -runs="$(ci_runs "$name")")
  dict=(); [ -f "tools/fuzz/$name.dict" ] && dict=(-dict="tools/fuzz/$name.dict")
  echo "== fuzz_$name: ${seconds}s on tools/fuzz/corpus/$name" >&2
  log="$out/fuzz_$name.log"
  max_len=4096
  [ "$name" = tokenizer ] && max_len=16384  # a small vocab file is ~5 KB
  [ "$name" = jinja ] && max_len=32768      # the Inkling template alone is 22 KB
  [ "$name" = gguf ] && max_len=8192        # room for a few 256-element blocks of every type
  if "$out/fuzz_$name" "${budget[@]}" -max_len="$max_len" -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 \
       -artifact_prefix="$out/$name-" "${dict[@]}" "$work" "tools/fuzz/corpus/$name" >"$log" 2>&1; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
    secs=$(grep -o 'Done [0-9]* runs in [0-9]* second' "$log" | grep -o '[0-9]* second' | grep -o '[0-9]*' || echo "?")
    echo "fuzz_$name: ok, $runs executions in ${secs}s" >&2
  else
    echo "fuzz_$name: FAILED (log: $log)" >&2
    tail -40 "$log" >&2
    status=1
  fi
done
exit $status
