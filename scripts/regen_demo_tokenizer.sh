#!/usr/bin/env bash
# Rewrites configs/demo/tokenizer.json by retraining the byte-level BPE
# tokenizer (vocab 1024 incl. <|endoftext|>, <|im_start|>, <|im_end|>) on
# configs/demo/sft.jsonl (ChatML-rendered) and configs/demo/pt.txt.
#
# The test TokenizerTest.ShippedDemoTokenizerIsReproducible compares the
# committed file with a fresh training run byte for byte; with
# MTRAIN_REGEN_GOLDEN=1 it writes the file instead. Run this after changing
# the demo data (scripts/gen_demo_data.py) or the trainer, and commit the
# new tokenizer.json with a message that says why.
#
# Usage: scripts/regen_demo_tokenizer.sh [build-dir]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${1:-build}"

cmake -S . -B "$BUILD_DIR" -G Ninja >/dev/null
cmake --build "$BUILD_DIR" --target test_bpe_trainer
MTRAIN_REGEN_GOLDEN=1 "$BUILD_DIR/tests/data/test_bpe_trainer" \
  --gtest_filter=TokenizerTest.ShippedDemoTokenizerIsReproducible
# Check: a second run must now reproduce the file exactly.
"$BUILD_DIR/tests/data/test_bpe_trainer" --gtest_filter=TokenizerTest.ShippedDemoTokenizerIsReproducible
git --no-pager diff --stat -- configs/demo/tokenizer.json || true
