#!/usr/bin/env bash
# Configures and builds mtrain (Release, -O3 -march=native) into build/.
# Installs missing Debian packages first.
#   scripts/build.sh [extra cmake args]          everything: mtrain, tests, benchmarks
#   scripts/build.sh --demo [extra cmake args]   the mtrain binary only (no test packages,
#                                                tests/ and bench/ not configured)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${MTRAIN_BUILD_DIR:-$ROOT/build}"
if [ "${1:-}" = --demo ]; then
  shift
  bash "$ROOT/scripts/install_deps.sh" --demo
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMTRAIN_BUILD_TESTS=OFF "$@" >/dev/null
  cmake --build "$BUILD_DIR" -j "$(nproc)" --target mtrain
else
  bash "$ROOT/scripts/install_deps.sh"
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMTRAIN_BUILD_TESTS=ON "$@" >/dev/null
  cmake --build "$BUILD_DIR" -j "$(nproc)"
fi
