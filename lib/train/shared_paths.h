// Before any data is read or any step is trained, the ranks of a multi-rank
// run prove that the directories they share are one directory: Megatron
// requires a shared file system for --save / --load, and without this check
// two nodes with node-local (or differently named) save directories train to
// the end and then fail at the first save.
//
// For --output_dir (--save), --load and, when several ranks are profiled
// (the merged trace reads every rank's file), --profile_save_path:
//   1. every rank gathers every rank's path string: they must be equal;
//   2. a directory written to: rank 0 creates it and writes a probe file
//      holding a random nonce; every rank reads it back and checks the nonce;
//      rank 0 removes it. --load (maybe read-only): every rank reads its
//      tracker file, and all must see the same one.
// The results are gathered, so every rank decides alike and throws the same
// DistributedError (printed once, exit 8) naming the nodes, hosts and paths;
// a directory rank 0 cannot create or write is a ConfigError (exit 3).
// A world of one rank checks nothing.
#pragma once

#include "config/args.h"
#include "parallel/comm.h"

namespace mtrain::train {

// `node`: this rank's node index (NODE_RANK under a multi-node launch).
void check_shared_paths(const config::Args& args, parallel::Comm& world, int node);

}  // namespace mtrain::train
