#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs the whole ctest
# suite. Extra arguments go to ctest (e.g. scripts/test.sh -L unit).
# MTRAIN_TEST_BLAS_MATRIX=1 then reruns the tolerance-sensitive tests (label
# numeric) under each OpenBLAS core type x {1, 2} threads
# (scripts/test_blas_matrix.sh; CI sets it).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/build.sh"
bash "$ROOT/scripts/fetch_tokenizer_files.sh"
BUILD_DIR="${MTRAIN_BUILD_DIR:-$ROOT/build}"
(cd "$BUILD_DIR" && ctest --output-on-failure -j "$(nproc)" --timeout 600 "$@")
if [ "${MTRAIN_TEST_BLAS_MATRIX:-0}" = 1 ]; then
  bash "$ROOT/scripts/test_blas_matrix.sh" "$BUILD_DIR" "$@"
fi
