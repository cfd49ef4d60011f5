#!/usr/bin/env bash
# Regenerates the end-to-end golden values in tests/functional/golden/
# (per-iteration lm loss and grad norm of the demo jobs) from a fresh build.
#
# Golden values change only through this script, in a commit that says why
# (project conventions: "Golden values change only through a script in scripts/").
# It rebuilds, runs the Golden.* tests with MTRAIN_REGEN_GOLDEN=1 (which makes
# them write the files instead of comparing), runs them again normally as a
# check, and shows the diff to review.
#
# Usage: scripts/regen_golden.sh            (build dir: $MTRAIN_BUILD_DIR or build/)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${MTRAIN_BUILD_DIR:-$ROOT/build}"
bash "$ROOT/scripts/build.sh"
TEST_BIN="$BUILD_DIR/tests/apps/test_mtrain_golden"

MTRAIN_REGEN_GOLDEN=1 "$TEST_BIN" --gtest_filter='Golden.*'
"$TEST_BIN" --gtest_filter='Golden.*'   # the new files must pass as they are

echo
echo "Rewrote tests/functional/golden/. Review and commit with the reason, e.g.:"
echo "  git diff --stat -- tests/functional/golden/"
git -C "$ROOT" diff --stat -- tests/functional/golden/ || true
