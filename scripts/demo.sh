#!/usr/bin/env bash
# Builds, then generates text from a synthetic demo checkpoint (written on first use).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
./build/inkling generate "$@"
