#!/usr/bin/env bash
# Plants one break of the layer rules in a scratch tree (with the real lib/LAYERS
# unless the case writes its own) and checks that scripts/check_layers.sh fails
# and names the file:line and the rule; the `clean` cases check that it passes.
# Usage: check_layers_test.sh <repo root> <case>
set -uo pipefail
REPO="$1"
CASE="$2"
TREE="$(mktemp -d)"
trap 'rm -rf "$TREE"' EXIT

# put <path> <line>...: writes a file of the scratch tree, one argument a line.
put() {
  mkdir -p "$(dirname "$TREE/$1")"
  local f="$TREE/$1"
  shift
  printf '%s\n' "$@" >"$f"
}
# lines <path> <n>: a source file of n lines.
lines() {
  mkdir -p "$(dirname "$TREE/$1")"
  for ((i = 1; i <= $2; i++)); do echo "int v$i = $i;"; done >"$TREE/$1"
}
notes() { put docs/DESIGN-NOTES.md "# Design notes" "" "## Files over 450 lines" "" "$@" "" "## Next"; }

# A small tree that keeps the rules: own-folder, downward and apps includes.
mkdir -p "$TREE/lib"
cp "$REPO/lib/LAYERS" "$TREE/lib/LAYERS"
put lib/device/device.h '#pragma once' '#include "common/errors.h"'
put lib/tensor/x.h '#pragma once' '#include "tensor/tensor.h"' '#include "device/device.h"' '#include <vector>'
put lib/parallel/comm.h '#pragma once' '#include "tensor/x.h"' '#include <mpi.h>'
put apps/mtrain/main.cc '#include "mtrain/launch/run.h"' '#include "parallel/comm.h"' '#include "fmt/core.h"'

expect=0  # 0: the check passes; 1: it fails and prints every pattern
patterns=()
case "$CASE" in
  clean) ;;
  clean_long_listed)  # a long file with its reason, and one of exactly 450 lines
    lines lib/tensor/long.cc 451
    lines lib/tensor/limit.cc 450
    notes '- `lib/tensor/long.cc` — kept whole: the reason is here.' ;;
  forbidden_include)
    put lib/tensor/x.h '#pragma once' '// the tensor layer reaching up' '#include "parallel/comm.h"'
    expect=1
    patterns=('lib/tensor/x.h:3: lib/tensor must not include parallel/comm.h (rule: tensor never includes parallel, lib/LAYERS:'
              'hint: ') ;;
  not_in_list)
    put lib/data/y.cc '#include "data/y.h"' '#include "device/device.h"'
    expect=1
    patterns=('lib/data/y.cc:2: lib/data must not include device/device.h (rule: lib/data may include only: common config, lib/LAYERS:') ;;
  only_header)
    put lib/train/m.cc '#include "train/m.h"' '' '#include <mpi.h>'
    expect=1
    patterns=('lib/train/m.cc:3: lib/train must not include <mpi.h> (rule: only parallel apps/mtrain include mpi.h') ;;
  folder_without_line)
    put lib/newthing/z.h '#pragma once'
    expect=1
    patterns=('lib/LAYERS: lib/newthing has no line') ;;
  cycle)
    put lib/LAYERS 'a: b' 'b: c' 'c: a' 'd: a'
    rm -rf "$TREE/lib/device" "$TREE/lib/tensor" "$TREE/lib/parallel" "$TREE/apps"
    expect=1
    patterns=('the rules have a cycle: ' 'a -> b' 'b -> c' 'c -> a') ;;
  never_through_chain)  # data may use observe, observe may use parallel: data reaches parallel
    sed -i 's/^data: .*/data: common config observe/' "$TREE/lib/LAYERS"
    expect=1
    patterns=('the may-include lines let data reach parallel (data -> observe -> parallel) (rule: data never includes parallel)') ;;
  unlinked)  # tensor includes device but links only common
    put lib/device/CMakeLists.txt 'mtrain_library(device)' 'target_link_libraries(mtrain_device PUBLIC mtrain_common)'
    put lib/tensor/CMakeLists.txt 'mtrain_library(tensor)' '# mtrain_device' \
        'target_link_libraries(mtrain_tensor' '  PUBLIC mtrain_common)'
    expect=1
    patterns=('lib/tensor/x.h:3: lib/tensor includes device/ but lib/tensor/CMakeLists.txt does not link mtrain_device') ;;
  clean_linked_through)  # tensor reaches mtrain_device through mtrain_profiler
    put lib/device/CMakeLists.txt 'mtrain_library(device)' 'target_link_libraries(mtrain_device PUBLIC mtrain_common)'
    put lib/profiler/CMakeLists.txt 'target_link_libraries(mtrain_profiler PUBLIC mtrain_device)'
    put lib/tensor/CMakeLists.txt 'mtrain_library(tensor)' 'target_link_libraries(mtrain_tensor PRIVATE mtrain_profiler)' ;;
  long_file)
    lines lib/tensor/long.cc 451
    expect=1
    patterns=('lib/tensor/long.cc:451: 451 lines, over 450' 'Files over 450 lines" in docs/DESIGN-NOTES.md') ;;
  long_file_no_reason)
    lines lib/tensor/long.cc 460
    notes '- `lib/tensor/long.cc` —'
    expect=1
    patterns=('docs/DESIGN-NOTES.md:5: lib/tensor/long.cc needs a one-line reason') ;;
  long_file_stale)
    lines lib/tensor/long.cc 450
    notes '- `lib/tensor/long.cc` — once long.'
    expect=1
    patterns=('docs/DESIGN-NOTES.md:5: lib/tensor/long.cc is listed under "Files over 450 lines" but has 450 lines: remove the line') ;;
  *) echo "unknown case $CASE" >&2; exit 2 ;;
esac

out="$(bash "$REPO/scripts/check_layers.sh" "$TREE" 2>&1)"
rc=$?
echo "$out"
status=0
if [ "$expect" = 0 ] && [ "$rc" != 0 ]; then
  echo "FAIL: the check failed (exit $rc) on a tree that keeps the rules"; status=1
elif [ "$expect" = 1 ] && [ "$rc" != 1 ]; then
  echo "FAIL: the check exited $rc on a planted break (want 1)"; status=1
fi
for p in "${patterns[@]}"; do
  if ! grep -qF -- "$p" <<<"$out"; then echo "FAIL: the output does not say: $p"; status=1; fi
done
exit $status
