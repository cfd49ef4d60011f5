#!/usr/bin/env bash
# Reruns the tolerance-sensitive tests (ctest label `numeric`) under every
# OpenBLAS core type and thread count of the matrix, so that no tolerance
# depends on which CPU or BLAS kernel runs it. Called by scripts/test.sh when
# MTRAIN_TEST_BLAS_MATRIX=1 (what .ci/run does), after the normal suite.
#
#   MTRAIN_TEST_CORETYPES  core types (default: Haswell SkylakeX Cooperlake Zen)
#   MTRAIN_TEST_THREADS    thread counts (default: 1 2)
#
# Debian's OpenBLAS is built with DYNAMIC_ARCH and picks a kernel per CPU;
# OPENBLAS_CORETYPE forces one, and an unknown or unavailable name silently
# falls back to the detected core. So each core is checked with
# OPENBLAS_VERBOSE=2 ("Core: <name>") and a mismatch fails the run. A core
# whose instructions this CPU lacks (SkylakeX/Cooperlake need AVX-512) is
# skipped with a message: it cannot run here at all.
set -euo pipefail
BUILD_DIR="${1:?usage: test_blas_matrix.sh <build dir> [extra ctest args]}"
shift
CORES="${MTRAIN_TEST_CORETYPES:-Haswell SkylakeX Cooperlake Zen}"
THREADS="${MTRAIN_TEST_THREADS:-1 2}"
PROBE="$BUILD_DIR/apps/mtrain/mtrain"

# The CPU flags a core's kernels execute (OpenBLAS 0.3.21 kernel sets).
required_flags() {
  case "$1" in
    Haswell | Zen) echo "avx2 fma" ;;
    SkylakeX) echo "avx2 fma avx512f avx512bw avx512vl avx512dq" ;;
    Cooperlake) echo "avx2 fma avx512f avx512bw avx512vl avx512dq avx512_bf16" ;;
    *) echo "" ;;
  esac
}

cpu_flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
failed=()
summary=()
for core in $CORES; do
  missing=""
  for f in $(required_flags "$core"); do
    [[ "$cpu_flags" == *" $f "* ]] || missing+=" $f"
  done
  if [ -n "$missing" ]; then
    echo "blas matrix: SKIPPED core $core: this CPU lacks$missing"
    summary+=("$core: skipped (CPU lacks$missing)")
    continue
  fi
  used="$(OPENBLAS_CORETYPE="$core" OPENBLAS_VERBOSE=2 "$PROBE" --help 2>&1 >/dev/null | sed -n 's/^Core: //p' | tail -1)"
  if [ "$used" != "$core" ]; then
    echo "blas matrix: OPENBLAS_CORETYPE=$core runs the '$used' kernels instead;" \
      "this OpenBLAS cannot select $core (check 'OPENBLAS_CORETYPE=$core OPENBLAS_VERBOSE=2 $PROBE --help')" >&2
    exit 1
  fi
  for t in $THREADS; do
    echo "=== blas matrix: OPENBLAS_CORETYPE=$core, $t thread(s): ctest -L numeric"
    start=$SECONDS
    # Threads: OpenBLAS reads OPENBLAS_NUM_THREADS at load, OpenMP and mtrain
    # read OMP_NUM_THREADS. With 2 threads per test and ctest -j, the cores
    # are oversubscribed; passive waiting keeps OpenMP barriers from spinning.
    if (cd "$BUILD_DIR" && OPENBLAS_CORETYPE="$core" OPENBLAS_NUM_THREADS="$t" OMP_NUM_THREADS="$t" \
      OMP_WAIT_POLICY=PASSIVE ctest --output-on-failure -j "$(nproc)" --timeout 600 --no-tests=error -L numeric "$@"); then
      summary+=("$core x $t thread(s): passed in $((SECONDS - start)) s")
    else
      summary+=("$core x $t thread(s): FAILED in $((SECONDS - start)) s")
      failed+=("$core/$t")
    fi
  done
done
echo "=== blas matrix summary"
printf '  %s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "blas matrix: failed under ${failed[*]} (rerun one with OPENBLAS_CORETYPE=<core> OMP_NUM_THREADS=<n> OPENBLAS_NUM_THREADS=<n> ctest -L numeric)" >&2
  exit 1
fi
