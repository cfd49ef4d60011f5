#!/usr/bin/env bash
# Several machines, torchrun style: run this same script on every node, with
# only NODE_RANK differing. Node 0 (the machine that owns MASTER_ADDR) starts
# OpenMPI's ompi-server and hands its address out on MASTER_ADDR:MASTER_PORT;
# every node runs its own mpirun with NPROC_PER_NODE ranks, and the ranks join
# one world of NNODES x NPROC_PER_NODE (world rank = NODE_RANK*NPROC_PER_NODE + local).
# A node that does not arrive within MTRAIN_RDZV_TIMEOUT seconds makes the
# others stop with exit code 8 and a message naming it.
#
#   node 0:  NNODES=2 NODE_RANK=0 MASTER_ADDR=10.0.0.1 scripts/launch_multi_node.sh
#   node 1:  NNODES=2 NODE_RANK=1 MASTER_ADDR=10.0.0.1 scripts/launch_multi_node.sh
#   (one machine, two shells: MASTER_ADDR=127.0.0.1 and NODE_RANK=0 / 1)
#   ... scripts/launch_multi_node.sh demo       # the demo model with TP/PP below
#   ... scripts/launch_multi_node.sh sft job.yaml --tensor_model_parallel_size 2
#
# Variables: NNODES (default 2), NODE_RANK (required), MASTER_ADDR (required),
# MASTER_PORT (default 29500; ompi-server uses MASTER_PORT+1), NPROC_PER_NODE
# (default 2), MTRAIN_RDZV_TIMEOUT (default 120 s), MTRAIN_IFNAME (the NIC for
# OpenMPI's traffic; default: the one that reaches MASTER_ADDR), TP / PP for `demo`.
# Ports and firewalls: docs/LAUNCH.md.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${MTRAIN_BUILD_DIR:-$ROOT/build}"
MTRAIN="$BUILD_DIR/apps/mtrain/mtrain"

: "${NODE_RANK:?set NODE_RANK (0 on the machine that owns MASTER_ADDR, then 1, 2, ...)}"
: "${MASTER_ADDR:?set MASTER_ADDR to node 0 address (the same on every node)}"
export NNODES="${NNODES:-2}" NODE_RANK MASTER_ADDR
export MASTER_PORT="${MASTER_PORT:-29500}"
export NPROC_PER_NODE="${NPROC_PER_NODE:-${NPUS_PER_NODE:-2}}"
# The demo model (4 layers, 4 heads, 2 KV groups) splits with TP <= 2 and PP | 4; defaults: 2 nodes x 2 ranks = TP 2 (inside a node) x DP 2.
TP="${TP:-2}"
PP="${PP:-1}"
[[ -x "$MTRAIN" ]] || bash "$ROOT/scripts/build.sh"

if [[ $# -eq 0 ]]; then
  set -- devices
elif [[ "$1" == demo ]]; then
  shift
  set -- sft configs/sft_demo.yaml --tensor_model_parallel_size "$TP" --pipeline_model_parallel_size "$PP" "$@"
fi
cd "$ROOT"
exec "$MTRAIN" "$@"
