#!/usr/bin/env bash
# bench_plan: wall time of `mtrain plan` for qwen2.5-7b over 8 NPUs (issue 13:
# interactive, under 10 s). Not a test: ctest never runs it; the figure goes
# into README "mtrain plan". Usage: bench/bench_plan.sh [path/to/mtrain] [runs]
set -euo pipefail
bin=${1:-build/apps/mtrain/mtrain}
runs=${2:-3}
args=(plan --model_preset qwen2.5-7b --nnodes 1 --nproc_per_node 8 --global_batch_size 64 --seq_length 4096 --bf16)
"$bin" "${args[@]}" --top 1 | head -1  # the candidate counts
for i in $(seq "$runs"); do
  start=$(date +%s.%N)
  "$bin" "${args[@]}" --json >/dev/null
  end=$(date +%s.%N)
  echo "run $i: $(echo "$end - $start" | bc) s"
done
