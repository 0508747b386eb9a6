#!/usr/bin/env bash
# The structured-output tests against Python references (tests/grammar/structured_outputs.py):
# validity under `jsonschema` and the mask differential against llguidance. INKLING_BINARY (ctest
# sets it) is the binary under test.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../python_suite.sh"
use_test_python "the structured-output tests" llguidance jsonschema numpy rfc3339_validator
exec "$python" "$here/structured_outputs.py" "$@"
