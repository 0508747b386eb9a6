#!/usr/bin/env bash
# Installs what the server's end-to-end tests and the GGUF tests use, only when missing: pytest, the official openai /
# anthropic clients and selenium into build/test-venv, and Debian's chromium + chromedriver for the
# chat page's browser tests; llguidance, jsonschema (with rfc3339-validator for its date-time and
# time checks) and numpy for the structured-output tests. Tests and references only: the engine itself never uses Python.
# A browser that cannot be installed is a warning (those tests then skip, saying why), an error
# when INKLING_REQUIRE_BROWSER=1 (CI sets it).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build/test-venv
packages=(pytest openai anthropic requests selenium gguf llguidance jsonschema rfc3339-validator numpy)
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
apt_updated=0
apt_install() {
  if [ "$apt_updated" -eq 0 ]; then
    $SUDO apt-get update -qq
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
# A venv left half-made (an interrupted first run) has a python but a broken pip: start it again.
if [ -x "$venv/bin/python" ] && ! "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
  echo "the test venv $venv is incomplete (pip does not run): making it again" >&2
  rm -rf "$venv"
fi
if [ ! -x "$venv/bin/python" ]; then
  if ! python3 -m venv "$venv" >/dev/null 2>&1; then
    echo "installing: python3-venv" >&2
    apt_install python3 python3-venv
    rm -rf "$venv"
    python3 -m venv "$venv"
  fi
fi
if ! "$venv/bin/python" -c "import pytest, openai, anthropic, requests, selenium, gguf, llguidance, jsonschema, rfc3339_validator, numpy" 2>/dev/null; then
  echo "installing into $venv: ${packages[*]}" >&2
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "${packages[@]}"
fi
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  echo "installing: chromium chromium-driver" >&2
  if ! (apt_install chromium chromium-driver); then
    if [ "${INKLING_REQUIRE_BROWSER:-0}" = 1 ]; then
      echo "error: could not install chromium and chromium-driver (INKLING_REQUIRE_BROWSER=1)" >&2
      exit 1
    fi
    echo "warning: could not install chromium and chromium-driver; the browser tests will be skipped" >&2
  fi
fi
