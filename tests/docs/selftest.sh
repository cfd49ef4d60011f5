#!/usr/bin/env bash
# The doc test can fail: runs run_doc_blocks.sh on fixtures/planted_bad_flag.md
# (a renamed flag, a `bash` block, a no-run block without a reason) and checks
# that it exits non-zero naming each mistake by file:line, and still counts the
# good block and the explained no-run block.
#   selftest.sh SOURCE_ROOT MTRAIN_DIR SCRATCH_DIR
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
page="$here/fixtures/planted_bad_flag.md"
out=$(bash "$here/run_doc_blocks.sh" "$page" "$1" "$2" "$3" 2>&1)
rc=$?
echo "$out"
fail() { echo "selftest: $*" >&2; exit 1; }
[ $rc -ne 0 ] || fail "the doc test passed a page with a renamed flag"
rel=${page#"$(cd "$1" && pwd)"/}
grep -q "^FAILED $rel:1[23]: exit 2 (block at $rel:12" <<< "$out" || fail "the renamed flag was not reported at $rel:12 with exit 2"
grep -q "unknown flag --train_iter; did you mean --train_iters" <<< "$out" || fail "mtrain's message about the flag is not shown"
grep -q "^$rel:18: block marked \"bash\"" <<< "$out" || fail "the bash block was not refused"
grep -q "^$rel:24: no-run block without" <<< "$out" || fail "the no-run block without a reason was not refused"
grep -q "^  no-run $rel:31: shows the convention" <<< "$out" || fail "the explained no-run block was not listed"
grep -q "2 blocks run, 1 failed, 1 not run (no-run), 2 malformed" <<< "$out" || fail "wrong counts"
rm -rf "$3"
echo "selftest: the doc test fails as it should"
