#!/usr/bin/env bash
# One machine, torchrun style: NPROC_PER_NODE ranks (MindSpeed: NPUS_PER_NODE),
# one simulated NPU each. mtrain re-launches itself under OpenMPI's mpirun,
# prints the exact command (`run sh: ...`) and exits with the job's exit code.
#
#   scripts/launch_single_node.sh                         # mtrain devices on 4 ranks
#   NPROC_PER_NODE=2 scripts/launch_single_node.sh        # ... on 2 ranks
#   scripts/launch_single_node.sh demo                    # the demo model with TP/PP below
#   scripts/launch_single_node.sh sft configs/sft_demo.yaml --tensor_model_parallel_size 2
#
# Variables: NPROC_PER_NODE (default 4), ASCEND_RT_VISIBLE_DEVICES, OMP_NUM_THREADS,
# TP / PP for `demo` (DP = NPROC_PER_NODE / (TP*PP)); docs/LAUNCH.md has all of them.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${MTRAIN_BUILD_DIR:-$ROOT/build}"
MTRAIN="$BUILD_DIR/apps/mtrain/mtrain"
[[ -x "$MTRAIN" ]] || bash "$ROOT/scripts/build.sh"

export NPROC_PER_NODE="${NPROC_PER_NODE:-${NPUS_PER_NODE:-4}}"
# The demo model (4 layers, 4 heads, 2 KV groups) splits with TP <= 2 and PP | 4; defaults: 4 ranks = TP 2 x PP 2 x DP 1.
TP="${TP:-2}"
PP="${PP:-2}"

if [[ $# -eq 0 ]]; then
  set -- devices
elif [[ "$1" == demo ]]; then
  shift
  set -- sft configs/sft_demo.yaml --tensor_model_parallel_size "$TP" --pipeline_model_parallel_size "$PP" "$@"
fi
cd "$ROOT"
exec "$MTRAIN" "$@"
