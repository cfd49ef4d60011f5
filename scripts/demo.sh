#!/usr/bin/env bash
# The demo (main job): installs the packages mtrain needs (not the test-only
# ones), builds the mtrain binary only, and runs `mtrain sft` on the shipped
# tiny Qwen-style model and instruction dataset.
# Training takes about four minutes on 2 cores; the log shows the loss falling
# and the run ends with what the model now answers to three dataset prompts.
# Extra arguments are passed to mtrain (e.g. scripts/demo.sh --train_iters 100).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/build.sh" --demo
BUILD_DIR="${MTRAIN_BUILD_DIR:-$ROOT/build}"
cd "$ROOT"
set -x
"$BUILD_DIR/apps/mtrain/mtrain" sft configs/sft_demo.yaml "$@"
