#!/usr/bin/env bash
# Installs the Debian packages mtrain builds against. Idempotent: does nothing
# when every package is already installed. Used by scripts/build.sh (and so
# scripts/demo.sh, scripts/test.sh, scripts/install.sh) and CI.
#   scripts/install_deps.sh          everything: mtrain, its tests and benchmarks
#   scripts/install_deps.sh --demo   only what the mtrain binary needs (the demo, install.sh)
set -euo pipefail

# What lib/ and apps/ build and link against (CMakeLists.txt, lib/*/CMakeLists.txt).
DEMO_PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libopenblas-dev libopenblas-openmp-dev
  libyaml-cpp-dev libcli11-dev libfmt-dev libspdlog-dev nlohmann-json3-dev
  libopenmpi-dev openmpi-bin libonig-dev libicu-dev libsentencepiece-dev
  zlib1g-dev                                            # lib/checkpoint
  libcsv-dev                                            # lib/data
  libprotobuf-c-dev protobuf-c-compiler libisal-dev     # lib/tensorboard
  libnlopt-dev                                          # lib/calibrate
)
# Only tests/ (configured with -DMTRAIN_BUILD_TESTS=ON, the default) uses these.
TEST_PACKAGES=(
  libgtest-dev libgmock-dev                             # every test
  liblzma-dev                                           # tests/data: tokenizer reference fixtures
  libpng-dev chromium-headless-shell                    # tests/apps: `mtrain report` opened in a headless browser
  libprotobuf-dev protobuf-compiler                     # tests/tensorboard: the C++ event-file reader
  python3-protobuf python3-crc32c                       # tests/tensorboard/check_events.py
)

case "${1:-}" in
  --demo) PACKAGES=("${DEMO_PACKAGES[@]}") ;;
  "") PACKAGES=("${DEMO_PACKAGES[@]}" "${TEST_PACKAGES[@]}") ;;
  *)
    echo "usage: scripts/install_deps.sh [--demo]" >&2
    exit 2
    ;;
esac

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "mtrain: installing Debian packages: ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
