#!/usr/bin/env bash
# The layer check (ctest: layers.check, so scripts/test.sh and .ci/run run it).
# Fails, naming file:line and the rule, when
#   - a file of lib/<x> or apps/<x> includes "<y>/..." that lib/LAYERS does not
#     let <x> use, or a header an `only` line keeps to other folders;
#   - lib/LAYERS itself has a cycle, a folder without a line, or a chain of
#     allowed includes that breaks a `never` line;
#   - lib/<x>/CMakeLists.txt does not link (directly or through another library)
#     the mtrain_<y> it includes from;
#   - a .cc/.h under lib/ is over 450 lines and docs/DESIGN-NOTES.md does not
#     list it with a reason under "## Files over 450 lines" (or lists a file
#     that is no longer over).
# Usage: scripts/check_layers.sh [ROOT]   (ROOT: a tree with lib/LAYERS; default
# this repository). Needs only bash, find, sort and a POSIX awk.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "${1:-$HERE/..}"
[ -f lib/LAYERS ] || { echo "check_layers: $(pwd)/lib/LAYERS not found" >&2; exit 2; }
notes=docs/DESIGN-NOTES.md
notes_file=$notes
[ -f "$notes" ] || notes_file=/dev/null
dirs=lib
[ -d apps ] && dirs="lib apps"
folders=$(find $dirs -mindepth 1 -maxdepth 1 -type d | LC_ALL=C sort)
mapfile -t cmakes < <(find $dirs -mindepth 2 -maxdepth 2 -name CMakeLists.txt | LC_ALL=C sort)
mapfile -t sources < <(find $dirs -type f \( -name '*.cc' -o -name '*.h' \) | LC_ALL=C sort)
exec awk -v rules=lib/LAYERS -v notes="$notes" -v notes_file="$notes_file" -v max_lines=450 \
  -v folders="$folders" -f "$HERE/check_layers.awk" lib/LAYERS "$notes_file" "${cmakes[@]}" "${sources[@]}"
