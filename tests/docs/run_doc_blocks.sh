#!/usr/bin/env bash
# The doc test: runs every shell block of one Markdown page.
#   run_doc_blocks.sh PAGE.md SOURCE_ROOT MTRAIN_DIR SCRATCH_DIR
# Convention (docs/proofs.md, "The doc test"):
#   ```sh            run, in page order, each block with bash -e -o pipefail
#   ```sh no-run     not run: needs an HTML comment `<!-- no-run: reason -->` on
#                    the line just before the fence; counted and listed
#   ```text          output, never run (so are blocks without an info string)
#   ```bash / shell / console / zsh   refused: say sh or text
# All blocks of a page share one scratch directory (SCRATCH_DIR, emptied first)
# holding a copy of SOURCE_ROOT/configs, so a block can use an earlier block's
# outputs and nothing is written into the source tree. MTRAIN_DIR goes first on
# PATH, so `mtrain` is the build's binary. stdin is /dev/null. A failing command
# is reported as PAGE:LINE (a line of that command: bash names one of the lines
# of a command continued with backslashes). The examples carry
# their own short iteration counts; nothing is rewritten. The scratch directory
# is removed when every block passed and kept otherwise.
set -uo pipefail

if [ $# -ne 4 ]; then
  echo "usage: $0 PAGE.md SOURCE_ROOT MTRAIN_DIR SCRATCH_DIR" >&2
  exit 2
fi
page=$1
root=$(cd "$2" && pwd)
bindir=$(cd "$3" && pwd)
scratch=$4
if [ ! -x "$bindir/mtrain" ]; then
  echo "doc test: no mtrain binary in $bindir (build the mtrain target first)" >&2
  exit 1
fi
case "$page" in
  "$root"/*) rel=${page#"$root"/} ;;
  *) rel=$page ;;
esac

rm -rf "$scratch"
mkdir -p "$scratch/.doc_blocks" "$scratch/.doc_logs"
scratch=$(cd "$scratch" && pwd)
cp -r "$root/configs" "$scratch/configs"
blocks="$scratch/.doc_blocks"

# Extract: one file per runnable block (named by the page line of its first
# command line) and a manifest of `run LINE FILE`, `norun LINE REASON`,
# `bad LINE WHAT`.
awk -v dir="$blocks" '
  function trim(s) { sub(/^[ \t]+/, "", s); sub(/[ \t]+$/, "", s); return s }
  BEGIN { infence = 0; prev = "" }
  {
    line = $0
    if (!infence) {
      if (match(line, /^[ \t]*(```+|~~~+)/)) {
        fence = trim(substr(line, RSTART, RLENGTH))
        info = trim(substr(line, RSTART + RLENGTH))
        infence = 1; mode = "skip"
        n = split(info, w, /[ \t]+/)
        lang = (n >= 1) ? w[1] : ""
        if (lang == "sh") {
          if (n >= 2 && w[2] == "no-run") {
            reason = ""
            if (match(prev, /<!--[ \t]*no-run:[^>]*-->/)) {
              reason = prev
              sub(/^.*<!--[ \t]*no-run:[ \t]*/, "", reason)
              sub(/[ \t]*-->.*$/, "", reason)
            }
            if (reason == "") printf "bad %d no-run block without a <!-- no-run: reason --> comment on the line before\n", NR
            else printf "norun %d %s\n", NR, reason
          } else if (n >= 2) {
            printf "bad %d unknown sh block option \"%s\" (only no-run)\n", NR, w[2]
          } else {
            mode = "run"; start = NR + 1
            file = sprintf("%s/%06d.sh", dir, start)
            printf "" > file
            printf "run %d %s\n", start, file
          }
        } else if (lang == "bash" || lang == "shell" || lang == "console" || lang == "zsh" || lang == "shell-session") {
          printf "bad %d block marked \"%s\": mark commands sh (run by this test) and output text\n", NR, lang
        }
        prev = line
        next
      }
    } else {
      t = trim(line)
      if (index(t, fence) == 1 && trim(substr(t, length(fence) + 1)) == "" && length(t) >= length(fence)) {
        if (mode == "run") close(file)
        infence = 0; prev = line
        next
      }
      if (mode == "run") print line > file
    }
    prev = line
  }
  END { if (infence) printf "bad %d unclosed code block\n", NR }
' "$page" > "$scratch/.doc_manifest"

export PATH="$bindir:$PATH"
# A block may call mpirun itself (`mpirun -np 2 mtrain devices`): as root in a
# container Open MPI wants these, and 2-core machines need oversubscription.
# mtrain's own launcher sets the equivalent options itself.
if [ "$(id -u)" = 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_rmaps_base_oversubscribe=1
# The suite runs beside this test on few cores: OpenMP's spinning barriers
# make an oversubscribed step tens of times slower (docs/launching.md,
# "Threads"), so unless the caller says otherwise threads wait passively and a
# rank runs one thread.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
# Keep this page's `mtrain npu-smi` view to its own ranks.
export MTRAIN_NPU_STATUS_DIR="$scratch/.npu-status"

ran=0 failed=0 bad=0
norun_list=()
while read -r kind line rest; do
  case "$kind" in
    bad)
      echo "$rel:$line: $rest" >&2
      bad=$((bad + 1))
      ;;
    norun)
      norun_list+=("$rel:$line: $rest")
      ;;
    run)
      file=$rest
      log="$scratch/.doc_logs/block_$line.log"
      script="$scratch/.doc_blocks/run_$line.sh"
      # Two header lines, then the block: LINENO - 3 + line = the page line.
      {
        echo "trap 'echo \"doc-test: $rel:\$((LINENO - 3 + $line)): exit \$?\" >&2' ERR"
        echo "set -o pipefail"
        cat "$file"
      } > "$script"
      ran=$((ran + 1))
      start_s=$(date +%s)
      (cd "$scratch" && timeout "${MTRAIN_DOC_BLOCK_TIMEOUT:-600}" bash -eE "$script" < /dev/null) > "$log" 2>&1
      rc=$?
      secs=$(($(date +%s) - start_s))
      if [ $rc -ne 0 ]; then
        failed=$((failed + 1))
        where=$(grep -o "doc-test: $rel:[0-9]*" "$log" | tail -n 1 | sed 's/^doc-test: //')
        [ -n "$where" ] || where="$rel:$line"
        [ $rc -eq 124 ] && echo "$where: block timed out after ${MTRAIN_DOC_BLOCK_TIMEOUT:-600} s" >&2
        echo "FAILED $where: exit $rc (block at $rel:$line, ${secs} s); last lines of its output:" >&2
        tail -n 40 "$log" | sed 's/^/    /' >&2
      else
        echo "ok     $rel:$line (${secs} s)"
      fi
      ;;
  esac
done < "$scratch/.doc_manifest"

echo "$rel: $ran blocks run, $failed failed, ${#norun_list[@]} not run (no-run), $bad malformed"
for n in "${norun_list[@]}"; do echo "  no-run $n"; done
if [ $failed -ne 0 ] || [ $bad -ne 0 ]; then
  echo "scratch directory kept: $scratch" >&2
  exit 1
fi
rm -rf "$scratch"
exit 0
