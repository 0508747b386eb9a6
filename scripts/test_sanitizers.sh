#!/usr/bin/env bash
# The sanitizer builds CI runs after the main suite (each in its own build directory):
#   build-asan: AddressSanitizer + UndefinedBehaviorSanitizer (UB is fatal), every test;
#   build-tsan: ThreadSanitizer, the server binary under the scheduler-heavy end-to-end tests
#               (concurrency, batching, disconnects, hostile traffic) and the serve unit tests.
# Usage: scripts/test_sanitizers.sh [asan] [tsan]   (both when none given)
set -euo pipefail
cd "$(dirname "$0")/.."
which=("$@")
[ ${#which[@]} -eq 0 ] && which=(asan tsan)
scripts/deps.sh
scripts/test_deps.sh
jobs="$(nproc)"
# The server suite's bounds on how soon things happen stretch for these slower binaries, and its
# RSS-plateau verdict is off (ASan's quarantine keeps freed memory); see tests/server/conftest.py.
export INKLING_TEST_TIME_SCALE=4 INKLING_TEST_SANITIZED=1
# -O1 with line tables: a fraction of the compile time of -O2 -g, readable stacks.
flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1" -DINKLING_BUILD_BENCH=OFF)
for kind in "${which[@]}"; do
  case "$kind" in
    asan)
      cmake -S . -B build-asan "${flags[@]}" -DINKLING_SANITIZE=ON >/dev/null
      cmake --build build-asan -j"$jobs"
      # Every test but the two long comparisons with Python references (minutes of generations
      # and dequantized blocks; their C++ paths run under ASan in test_grammar and test_io).
      ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
        ctest --test-dir build-asan --output-on-failure -j"$jobs" -E '^(grammar_structured_outputs|gguf_python)$'
      ;;
    tsan)
      cmake -S . -B build-tsan "${flags[@]}" -DINKLING_TSAN=ON >/dev/null
      cmake --build build-tsan -j"$jobs" --target inkling test_serve
      # tests/tsan.supp: Debian's httplib library is not TSan-built (its own locking is invisible).
      # One OpenMP thread: libgomp is not TSan-built either, and only synth's weight filling uses it.
      export TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp"
      export OMP_NUM_THREADS=1
      build-tsan/test_serve
      INKLING_BINARY="$PWD/build-tsan/inkling" tests/server/run.sh -k "not page" \
        test_server.py test_batching.py test_hostile.py test_chat_completions.py
      ;;
    *) echo "unknown sanitizer build: $kind (asan, tsan)" >&2; exit 2 ;;
  esac
done
