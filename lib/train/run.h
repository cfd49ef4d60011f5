// run_training: everything `mtrain sft` / `mtrain pt` does after the command
// line is parsed: threads, output directory and args.json, tokenizer and
// data, the simulated device, model, optimizer, schedule and hooks, the
// training loop, and the closing sample answers. Returns the exit code.
#pragma once

#include "config/args.h"

namespace mtrain::train {

int run_training(const config::Args& args);

// Threads for OpenBLAS and mtrain's kernels: --num_threads, else
// OMP_NUM_THREADS / OPENBLAS_NUM_THREADS, else cores / ranks on this node.
int configure_threads(const config::Args& args, int local_ranks);

}  // namespace mtrain::train
