# Sourced by the run.sh of each Python-driven suite (tests/gguf, tests/grammar, tests/server).
# Picks the interpreter scripts/test_deps.sh prepared (else python3) and stops the suite, saying
# what to run, when a module it imports is missing, so a missing package never reads as a failure
# of the engine.

# use_test_python "the GGUF tests" pytest numpy gguf: sets $python, or exits 1 naming the modules.
use_test_python() {
  local suite="$1"
  shift
  local root
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  python="$root/build/test-venv/bin/python"
  [ -x "$python" ] || python=python3
  local modules
  modules="$(IFS=,; echo "$*")"
  if ! "$python" -c "import $modules" 2>/dev/null; then
    echo "$suite need the Python modules ${modules//,/, }: run scripts/test_deps.sh" >&2
    exit 1
  fi
}

# run_pytest_in DIR ARGS...: pytest over DIR, or over only the test files ARGS name.
run_pytest_in() {
  local dir="$1"
  shift
  local everything=(.)
  for arg in "$@"; do [[ "$arg" == *.py || "$arg" == *.py::* ]] && everything=(); done
  cd "$dir"
  exec "$python" -m pytest -q -rs -p no:cacheprovider "$@" "${everything[@]}"
}
