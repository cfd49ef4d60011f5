#!/usr/bin/env bash
# Prints the README's "Planning a job" prediction table: each row is the dry
# run of the flags below, its numbers read from the report (stage 0; the
# largest distributed-optimizer shard). Re-run after a change to the cost
# model or the memory accounting and paste the rows; never edit them by hand.
# Usage: scripts/dry_run_table.sh [path/to/mtrain]
set -euo pipefail
bin=${1:-build/apps/mtrain/mtrain}
common=(--bf16 --micro_batch_size 1 --recompute_granularity selective --use_distributed_optimizer
  --train_iters 100 --lr_warmup_iters 0 --output_dir "${TMPDIR:-/tmp}/mtrain_dry_run_table" --dry_run)

# row <job> <layout> <nnodes> <mtrain args...>
row() {
  local job=$1 layout=$2 nnodes=$3
  shift 3
  local out status=0
  out=$(NNODES=$nnodes NPROC_PER_NODE=8 "$bin" "$@" "${common[@]}" 2>&1) || status=$?
  echo "$out" | awk -v job="$job" -v layout="$layout" -v status="$status" '
    function gib(line) { n = split(line, w, " "); return w[n - 1] }
    /^pipeline stage / { stage++ }
    stage == 1 && /^  weights / { weights = gib($0) }
    stage == 1 && /^  gradients / { grads = gib($0) }
    stage == 1 && /^  optimizer states / { opt = gib($0) }
    stage == 1 && /^  activations \(/ { acts = gib($0); slots = $2; sub(/\(/, "", slots) }
    stage == 1 && /^  peak reserved / { peak = gib($0) }
    stage == 1 && /^  headroom / { verdict = ($0 ~ /DOES NOT FIT/) ? "DOES NOT FIT" : "FITS" }
    /^Simulated step time/ { ms = $NF; sub(/ms/, "", ms); if (ms == "") ms = $(NF - 1) }
    /^  per device: / { tok = $3; mfu = $0; sub(/.*MFU /, "", mfu); sub(/ of.*/, "", mfu) }
    /hint: the cheapest change that fits/ { hint = $0; sub(/.*dry-run checked\): /, "", hint) }
    END {
      if (weights == "" || ms == "") { print "no report for " job " " layout " (exit " status ")" > "/dev/stderr"; exit 1 }
      if (hint != "") verdict = verdict " (hint: `" hint "`)"
      printf "| %s | %s | %s | %s | %s | %s (%s) | %s GiB | %s | %.1f s (%.0f tok/s, MFU %s) |\n",
             job, layout, weights, grads, opt, acts, slots, peak, verdict, ms / 1000, tok, mfu
    }'
}

echo "| job | layout | weights GiB | grads GiB | optimizer GiB | activations GiB (micro-batches in flight) | peak reserved | verdict | step time |"
echo "|---|---|---|---|---|---|---|---|---|"
llama=(pt --model_preset llama2-7b --seq_length 4096 --global_batch_size 64)
row "Llama-2-7B pt, s 4096, GBS 64, 8 x 910B3" "TP 8" 1 "${llama[@]}" --tensor_model_parallel_size 8 --sequence_parallel
row "Llama-2-7B pt, s 4096, GBS 64, 8 x 910B3" "DP 8" 1 "${llama[@]}"
qwen=(sft --model_preset qwen2.5-7b --max_length 4096 --global_batch_size 64 --sequence_parallel)
row "Qwen2.5-7B full fine-tuning (\`sft\`), s 4096, GBS 64, 8 x 910B3" "TP 2, DP 4" 1 "${qwen[@]}" \
  --tensor_model_parallel_size 2
row "Qwen2.5-7B full fine-tuning (\`sft\`), s 4096, GBS 64, 8 x 910B3" "TP 4, DP 2" 1 "${qwen[@]}" \
  --tensor_model_parallel_size 4
row "Qwen2.5-72B pt, s 4096, GBS 128, 32 x 910B3" "TP 8, PP 4 (stage 0)" 4 pt --model_preset qwen2.5-72b \
  --seq_length 4096 --global_batch_size 128 --tensor_model_parallel_size 8 --pipeline_model_parallel_size 4 \
  --sequence_parallel
row "GPT-3 175B pt, s 2048, V 51200, GBS 1536, 1024 x A100-SXM-80GB" "TP 8, PP 16, DP 8 (stage 0)" 128 pt \
  --model_preset gpt3-175b --seq_length 2048 --vocab_size 51200 --global_batch_size 1536 \
  --tensor_model_parallel_size 8 --pipeline_model_parallel_size 16 --sequence_parallel \
  --device_profile A100-SXM-80GB
