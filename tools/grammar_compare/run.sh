#!/usr/bin/env bash
# Our grammar engine beside llguidance and xgrammar (compile time, mask time per token, mask
# agreement): `tools/grammar_compare/run.sh [--every N] [--runs N] [--tokens N]`. Not part of the default
# test run: xgrammar's wheel requires torch, transformers and triton (gigabytes), which the engine
# and its tests never need. This venv (build/xgrammar-venv) installs xgrammar without its
# dependencies, plus the few its compiler and matcher use; compare.py stands in for the torch and
# transformers imports (see there). INKLING_BINARY names the binary (default build/inkling).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="$root/build/xgrammar-venv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
# find_spec: xgrammar itself cannot be imported without compare.py's stand-ins.
if ! "$venv/bin/python" -c "import tvm_ffi, pydantic, llguidance, jsonschema, numpy, importlib.util as u; assert u.find_spec('xgrammar')" 2>/dev/null; then
  echo "installing into $venv: xgrammar (without its dependencies), apache-tvm-ffi, pydantic, llguidance, jsonschema, numpy" >&2
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps xgrammar==0.2.9  # the version docs/grammar.md measured
  "$venv/bin/python" -m pip install -q --disable-pip-version-check apache-tvm-ffi pydantic typing-extensions llguidance jsonschema numpy
fi
exec "$venv/bin/python" "$here/compare.py" "$@"
