// Sharded, layout-independent checkpoints (Megatron's distributed checkpoint,
// reduced): every rank saves the blocks of the global tensors it owns into
// its own safetensors file; rank 0 writes a manifest of all blocks. A loader
// under any other parallel layout assembles the blocks it needs from
// whatever saved blocks overlap them.
//
// On disk, under <save_dir>:
//   iter_0000100/rank_00003.safetensors  F32 blocks of rank 3; __metadata__
//                                        maps each in-file key to
//                                        {"name", "global_shape", "offsets"}
//   iter_0000100/manifest.json           format version, iteration, every
//                                        block (file, key, offsets, shape),
//                                        every file's size + crc32, the
//                                        caller's JSON state
//   latest_checkpointed_iteration.txt    "100"
//
// Commit protocol (save_checkpoint): shards go to iter_0000100.tmp/, each
// written atomically and fsynced; all ranks agree on success (an all-reduce
// of a failure flag); rank 0 writes the manifest atomically, renames the
// directory into place, fsyncs <save_dir> and replaces the tracker
// atomically; retention runs only after that. A checkpoint is visible only
// when complete: a save killed at any point leaves the previous one loadable.
//
// Loading (CheckpointReader::open) treats the directory as untrusted: the
// tracker must be a plain integer, the manifest is validated field by field,
// and every file's size and crc32 are verified before anything is returned.
// Every error is a CheckpointError naming the file and what is wrong.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "checkpoint/weight_source.h"
#include "common/file_system.h"
#include "common/progress.h"
#include "parallel/comm.h"
#include "tensor/tensor.h"

namespace mtrain::checkpoint {

inline constexpr int kShardedFormatVersion = 1;
inline constexpr const char* kTrackerFileName = "latest_checkpointed_iteration.txt";
inline constexpr const char* kManifestFileName = "manifest.json";

// This rank's piece of one global tensor.
struct ShardedTensor {
  std::string name;              // e.g. "decoder.layers.0.mlp.linear_fc1.weight" or "optimizer.exp_avg/<name>"
  Shape global_shape;            // the whole tensor
  std::vector<int64_t> offsets;  // where this rank's block starts in each dim
  Shape shape;                   // this rank's block
  const float* data = nullptr;   // row-major block; stored as F32
  // false: an identical copy held by another rank is saved instead (DP
  // replicas, TP-duplicated norms). Exactly one rank writes each block.
  bool replicated_writer = true;
};

struct SaveOptions {
  int keep_last = 0;  // > 0: keep this many iter_ directories (the new one included); 0 keeps all
  mode_t dir_mode = kDefaultDirMode;
  mode_t file_mode = kDefaultFileMode;
  // This rank's progress line over the tensors it writes ("Save checkpoint"),
  // or null for none (common/progress.h).
  ProgressSink* progress = nullptr;
};

// What a successful save did.
struct SaveResult {
  std::string path;                   // <save_dir>/iter_0000100
  int64_t total_bytes = 0;            // all ranks' shard files
  int64_t bytes_this_rank = 0;        // this rank's shard file
  std::vector<std::string> removed;   // iter_ directories deleted by retention (rank 0)
  std::vector<std::string> warnings;  // retention failures (the checkpoint itself is committed)
  std::string replaced;               // an existing directory of this iteration the save replaced (rank 0)
};

// "iter_0000100" and "<dir>/iter_0000100".
std::string iteration_dir_name(int64_t iteration);
std::string iteration_dir(const std::string& save_dir, int64_t iteration);

// Saves iteration `iteration` under `save_dir`; every rank of `world` calls
// it collectively with its own blocks. Throws CheckpointError, the same
// message on every rank, when any rank fails; the temporary directory is then
// removed and the previous checkpoint and tracker are untouched.
// An existing directory of the same iteration (a rerun into the same
// directory, a resume from an older iteration) is replaced only at commit
// time, once the new one is complete; if the tracker names it, the tracker
// first falls back to the newest other checkpoint, so it never names an
// incomplete one.
SaveResult save_checkpoint(FileSystem& fs, parallel::Comm& world, const std::string& save_dir, int64_t iteration,
                           const std::vector<ShardedTensor>& tensors, const std::string& state_json,
                           const SaveOptions& opts = {});

// The iteration the tracker names; throws CheckpointError naming the file
// when it is missing or not a plain non-negative integer.
int64_t read_tracker(FileSystem& fs, const std::string& load_dir);

// One saved block as the manifest describes it.
struct SavedBlock {
  std::string file;  // file name inside the iteration directory
  std::string key;   // tensor key inside that file
  std::vector<int64_t> offsets;
  Shape shape;
};

class CheckpointReader final : public WeightSource {
 public:
  // Opens iteration `iteration` (default: the tracker's) and verifies the
  // manifest and every file's size and crc32. Throws CheckpointError.
  static CheckpointReader open(FileSystem& fs, const std::string& load_dir, std::optional<int64_t> iteration = {});

  CheckpointReader(CheckpointReader&&) noexcept;
  CheckpointReader& operator=(CheckpointReader&&) noexcept;
  ~CheckpointReader();

  int64_t iteration() const { return iteration_; }
  const std::string& path() const { return dir_; }
  const std::string& state_json() const { return state_json_; }
  std::vector<std::string> names() const;
  std::string describe() const override { return dir_; }
  bool has(const std::string& name) const override { return tensors_.count(name) != 0; }
  Shape global_shape(const std::string& name) const override;
  const std::vector<SavedBlock>& blocks(const std::string& name) const;

  // Fills `out` (row-major, `shape`) with the block at `offsets` of global
  // tensor `name`, assembled from every saved block that overlaps it. Throws
  // CheckpointError naming the tensor when the request is out of bounds or
  // not fully covered by saved blocks.
  void read_block(const std::string& name, const std::vector<int64_t>& offsets, const Shape& shape,
                  float* out) const override;
  // The errors read_block would throw for this block (bounds, coverage), without reading data.
  void check_block(const std::string& name, const std::vector<int64_t>& offsets, const Shape& shape) const;

 private:
  struct Tensor {
    Shape global_shape;
    std::vector<SavedBlock> blocks;
  };
  CheckpointReader() = default;
  void load_manifest(const std::string& text);
  void open_files(FileSystem& fs);
  void assemble(const std::string& name, const std::vector<int64_t>& offsets, const Shape& shape, float* out) const;
  void copy_overlap(const SavedBlock& b, const std::vector<int64_t>& offsets, const Shape& shape, float* out,
                    std::vector<uint8_t>& covered) const;

  int64_t iteration_ = 0;
  std::string dir_;
  std::string manifest_path_;
  std::string state_json_;
  std::map<std::string, Tensor> tensors_;
  std::map<std::string, FileDigest> file_digests_;
  std::map<std::string, std::unique_ptr<SafetensorsFile>> files_;
};

}  // namespace mtrain::checkpoint
