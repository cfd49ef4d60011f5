#!/usr/bin/env bash
# Installs the Debian packages mtrain builds against. Idempotent: does nothing
# when every package is already installed. Used by scripts/demo.sh,
# scripts/test.sh and CI.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libopenblas-dev libopenblas-openmp-dev
  libyaml-cpp-dev libcli11-dev libfmt-dev libspdlog-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev
  libopenmpi-dev openmpi-bin libonig-dev libicu-dev libsentencepiece-dev
  liblzma-dev
  zlib1g-dev
  libcsv-dev
  libpng-dev chromium-headless-shell  # tests: `mtrain report` opened in a headless browser
  libprotobuf-c-dev protobuf-c-compiler libisal-dev
  libprotobuf-dev protobuf-compiler
  python3-protobuf python3-crc32c
)

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
