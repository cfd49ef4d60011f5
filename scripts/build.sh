#!/usr/bin/env bash
# Configures and builds mtrain (Release, -O3 -march=native) into build/.
# Installs missing Debian packages first. Usage: scripts/build.sh [extra cmake args]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/install_deps.sh"
BUILD_DIR="${MTRAIN_BUILD_DIR:-$ROOT/build}"
cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)"
