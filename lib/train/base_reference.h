// The frozen base of a LoRA run, recorded by reference in its checkpoints
// instead of by value: a LoRA checkpoint holds the trainable tensors (the
// adapters, modules_to_save) and their optimizer state only. The reference
// (a JSON object in the checkpoint state under "base") is one of
//   {"kind": "hf", "path": <dir>, "files": {<name>: {"size", "crc32"}}}
//       --model <hf_dir>: config.json and every *.safetensors* file
//   {"kind": "checkpoint", "path": <load dir>, "iteration": N,
//    "files": {"manifest.json": {...}}}
//       --load of a full checkpoint; its manifest holds every shard's size
//       and crc32 (verified when it is opened), so its digest covers them
//   {"kind": "random", "seed": S}
//       random init: the initialisation is a function of the seed, the
//       tensor's name and the model shape (recorded in the state as well),
//       independent of the parallel layout, so seed + shape are exact.
// A resume, export and infer rebuild the base from the reference and refuse
// (exit 5, naming the file) one whose files changed.
#pragma once

#include <memory>
#include <string>

#include "checkpoint/sharded_checkpoint.h"
#include "common/file_system.h"
#include "nlohmann/json.hpp"
#include "train/checkpointing.h"

namespace mtrain::train {

nlohmann::json hf_base_reference(FileSystem& fs, const std::string& dir);
nlohmann::json checkpoint_base_reference(FileSystem& fs, const std::string& load_dir, int64_t iteration);
nlohmann::json random_base_reference(uint64_t seed);

// Refuses a reference that is malformed or whose files changed since the
// save (CheckpointError naming the file; `where` is the LoRA checkpoint).
// `seed`: this run's --seed, which a random base must have been made with.
void verify_base_reference(FileSystem& fs, const nlohmann::json& ref, uint64_t seed, const std::string& where);

// Loads the base weights the reference names into `t` (verified first).
void load_base_reference(FileSystem& fs, const nlohmann::json& ref, TrainingState& t);

// The weights of checkpoint `r` as export and infer read them: a full
// checkpoint as it is; a LoRA checkpoint's trainable tensors over the frozen
// base its reference names (a --model HF directory, a full checkpoint, or the
// random init of its seed), verified first by verify_base_reference, so a
// changed or missing base is refused exactly as a resume refuses it.
// `r` must outlive the result. (base_weights.cc)
std::unique_ptr<checkpoint::WeightSource> checkpoint_weights(FileSystem& fs, const checkpoint::CheckpointReader& r);

}  // namespace mtrain::train
