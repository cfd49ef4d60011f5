#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs the whole ctest
# suite. Extra arguments go to ctest (e.g. scripts/test.sh -L unit).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/build.sh"
bash "$ROOT/scripts/fetch_tokenizer_files.sh"
BUILD_DIR="${MTRAIN_BUILD_DIR:-$ROOT/build}"
cd "$BUILD_DIR"
ctest --output-on-failure -j "$(nproc)" --timeout 600 "$@"
