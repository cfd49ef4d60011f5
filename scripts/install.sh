#!/usr/bin/env bash
# Builds the mtrain binary (only the packages it needs, no tests) and installs
# it with `cmake --install`: PREFIX/bin/mtrain and PREFIX/share/mtrain/configs
# (model presets, device profiles). Usage: scripts/install.sh [PREFIX]
# PREFIX defaults to /usr/local as root, else ~/.local.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${MTRAIN_BUILD_DIR:-$ROOT/build}"
if [ "$#" -gt 1 ]; then
  echo "usage: scripts/install.sh [PREFIX]" >&2
  exit 2
fi
if [ "$#" -eq 1 ]; then
  PREFIX="$1"
elif [ "$(id -u)" -eq 0 ]; then
  PREFIX=/usr/local
else
  PREFIX="$HOME/.local"
fi
bash "$ROOT/scripts/build.sh" --demo
cmake --install "$BUILD_DIR" --prefix "$PREFIX"
BIN="$(cd "$PREFIX/bin" && pwd)"
echo "mtrain: installed $BIN/mtrain"
if [ "$(command -v mtrain 2>/dev/null || true)" != "$BIN/mtrain" ]; then
  echo "mtrain: to run it as \`mtrain\`, put $BIN on your PATH, e.g.:"
  echo "  echo 'export PATH=\"$BIN:\$PATH\"' >> ~/.bashrc && export PATH=\"$BIN:\$PATH\""
fi
