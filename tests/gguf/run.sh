#!/usr/bin/env bash
# Runs the GGUF pytest suite (dequantizers bit for bit against gguf-py; end-to-end checks against
# llama.cpp's converter, which skip without it) with the interpreter scripts/test_deps.sh prepared.
# ctest sets DEQUANTIZE_ROWS and INKLING_BINARY.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
python="$root/build/test-venv/bin/python"
[ -x "$python" ] || python=python3
if ! "$python" -c "import pytest, numpy, gguf" 2>/dev/null; then
  echo "the GGUF tests need pytest, numpy and gguf: run scripts/test_deps.sh" >&2
  exit 1
fi
cd "$here"
everything=(.)
for arg in "$@"; do [[ "$arg" == *.py || "$arg" == *.py::* ]] && everything=(); done
exec "$python" -m pytest -q -rs -p no:cacheprovider "$@" "${everything[@]}"
