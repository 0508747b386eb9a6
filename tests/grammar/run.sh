#!/usr/bin/env bash
# The structured-output tests against Python references (tests/grammar/structured_outputs.py):
# validity under `jsonschema` and the mask differential against llguidance. Uses the interpreter
# scripts/test_deps.sh prepares; INKLING_BINARY (ctest sets it) is the binary under test.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
python="$root/build/test-venv/bin/python"
[ -x "$python" ] || python=python3
if ! "$python" -c "import llguidance, jsonschema, numpy, rfc3339_validator" 2>/dev/null; then
  echo "the structured-output tests need llguidance, jsonschema, numpy and rfc3339-validator: run scripts/test_deps.sh" >&2
  exit 1
fi
exec "$python" "$here/structured_outputs.py" "$@"
