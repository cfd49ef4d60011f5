#!/usr/bin/env bash
# bench_plan: wall and CPU time of `mtrain plan` (issue 13: interactive, under
# 10 s, for qwen2.5-7b over 8 NPUs; issue 16: the CP and EP searches, Llama-2-7B
# at 32K on 8 NPUs and Qwen3-30B-A3B on 2 nodes of 8). Not a test: ctest never
# runs it; the figures go into docs/measurements.md "mtrain plan" (dry runs on every core: CPU > wall).
# Usage: bench/bench_plan.sh [path/to/mtrain] [runs]
set -euo pipefail
bin=${1:-build/apps/mtrain/mtrain}
runs=${2:-3}
# Issue 24's targets on this 2-core machine: the 18.4B GPT of Narayanan et al. 2021 (Table 1: 48 heads,
# h 6144, 40 layers) on 256 devices, global batch 1024, < 30 s; Llama-2-7B with global batch 256 on 8 NPUs
# < 3 s; Qwen3-30B-A3B on 2 x 8 < 5 s.
jobs=(
  "--model_preset gpt3-175b --num_layers 40 --hidden_size 6144 --ffn_hidden_size 24576 --num_attention_heads 48 --seq_length 2048 --max_position_embeddings 2048 --vocab_size 51200 --global_batch_size 1024 --nnodes 32 --nproc_per_node 8 --fp16"
  "--model_preset llama2-7b --nnodes 1 --nproc_per_node 8 --global_batch_size 256 --seq_length 4096 --bf16"
  "--model_preset qwen2.5-7b --nnodes 1 --nproc_per_node 8 --global_batch_size 64 --seq_length 4096 --bf16"
  "--model_preset llama2-7b --nnodes 1 --nproc_per_node 8 --global_batch_size 8 --seq_length 32768 --max_position_embeddings 32768 --bf16"
  "--model_preset qwen3-30b-a3b --nnodes 2 --nproc_per_node 8 --global_batch_size 16 --seq_length 4096 --bf16"
)
for job in "${jobs[@]}"; do
  read -r -a args <<<"plan $job"
  echo "== mtrain ${args[*]}"
  "$bin" "${args[@]}" --top 1 | head -1  # the candidate counts
  for i in $(seq "$runs"); do
    # %e wall, %U + %S CPU seconds: on a shared machine the CPU time is the figure that travels.
    /usr/bin/time -f "run $i: %e s wall, %U s user + %S s sys" "$bin" "${args[@]}" --json >/dev/null
  done
done
