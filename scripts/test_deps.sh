#!/usr/bin/env bash
# Installs the Python packages the server's end-to-end tests use (pytest and the official openai /
# anthropic clients) into build/test-venv, only when missing. Tests and references only: the
# engine itself never uses Python.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build/test-venv
packages=(pytest openai anthropic requests)
if [ ! -x "$venv/bin/python" ]; then
  if ! python3 -m venv "$venv" >/dev/null 2>&1; then
    echo "installing: python3-venv" >&2
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3 python3-venv >/dev/null
    rm -rf "$venv"
    python3 -m venv "$venv"
  fi
fi
if ! "$venv/bin/python" -c "import pytest, openai, anthropic, requests" 2>/dev/null; then
  echo "installing into $venv: ${packages[*]}" >&2
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "${packages[@]}"
fi
