#!/usr/bin/env bash
# Runs the server's end-to-end pytest suite against INKLING_BINARY (ctest sets it), with the
# interpreter scripts/test_deps.sh prepared, else python3.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
python="$root/build/test-venv/bin/python"
[ -x "$python" ] || python=python3
if ! "$python" -c "import pytest, openai, anthropic, requests" 2>/dev/null; then
  echo "the server tests need pytest, openai, anthropic and requests: run scripts/test_deps.sh" >&2
  exit 1
fi
cd "$here"
# The whole directory unless test files are named.
everything=(.)
for arg in "$@"; do [[ "$arg" == *.py || "$arg" == *.py::* ]] && everything=(); done
exec "$python" -m pytest -q -p no:cacheprovider "$@" "${everything[@]}"
