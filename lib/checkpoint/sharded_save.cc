// save_checkpoint: the collective commit protocol of sharded_checkpoint.h.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/sharded_checkpoint.h"
#include "common/atomic_file.h"
#include "common/errors.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"

namespace mtrain::checkpoint {

using json = nlohmann::json;

std::string iteration_dir_name(int64_t iteration) { return fmt::format("iter_{:07d}", iteration); }

std::string iteration_dir(const std::string& save_dir, int64_t iteration) {
  return save_dir + "/" + iteration_dir_name(iteration);
}

namespace {

std::string rank_file_name(int rank) { return fmt::format("rank_{:05d}.safetensors", rank); }

void validate_tensor(const ShardedTensor& t) {
  const size_t dims = t.global_shape.size();
  if (t.name.empty()) throw CheckpointError("a sharded tensor has an empty name");
  if (t.offsets.size() != dims || t.shape.size() != dims) {
    throw CheckpointError(fmt::format("sharded tensor {}: global shape {}, offsets of {} dims, block shape {}", t.name,
                                      shape_str(t.global_shape), t.offsets.size(), shape_str(t.shape)));
  }
  for (size_t d = 0; d < dims; ++d) {
    if (t.global_shape[d] < 0 || t.offsets[d] < 0 || t.shape[d] < 0 || t.offsets[d] > t.global_shape[d] - t.shape[d]) {
      throw CheckpointError(
          fmt::format("sharded tensor {}: block {} at offset {} of dim {} exceeds the global shape {}", t.name,
                      shape_str(t.shape), t.offsets[d], d, shape_str(t.global_shape)));
    }
  }
  if (t.data == nullptr && shape_numel(t.shape) > 0) {
    throw CheckpointError(fmt::format("sharded tensor {}: no data", t.name));
  }
}

// Every rank learns whether any rank failed; on failure every rank throws the
// message of the lowest failing rank.
void agree(parallel::Comm& world, const std::optional<std::string>& error) {
  const int32_t me = error ? world.rank() : world.size();
  const int32_t first = world.all_reduce_value(me, parallel::ReduceOp::kMin);
  if (first == world.size()) return;
  int64_t len = first == world.rank() ? static_cast<int64_t>(error->size()) : 0;
  world.broadcast(&len, 1, first);
  std::vector<uint8_t> bytes(static_cast<size_t>(len));
  if (first == world.rank()) std::copy(error->begin(), error->end(), bytes.begin());
  world.broadcast(bytes.data(), len, first);
  const std::string msg(bytes.begin(), bytes.end());
  throw CheckpointError(first == world.rank() ? msg : fmt::format("rank {}: {}", first, msg),
                        "the save was abandoned on every rank; the previous checkpoint and the tracker are untouched");
}

// Runs `step`; a CheckpointError or IoError becomes the returned message.
// Anything else (a dead process, a communication failure) propagates.
std::optional<std::string> attempt(const std::function<void()>& step) {
  try {
    step();
  } catch (const CheckpointError& e) {
    return std::string(e.what());
  } catch (const IoError& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

// Every rank's string, in rank order, on every rank.
std::vector<std::string> all_gather_strings(parallel::Comm& world, const std::string& mine) {
  const int n = world.size();
  std::vector<int64_t> lens(static_cast<size_t>(n));
  const int64_t my_len = static_cast<int64_t>(mine.size());
  world.all_gather(&my_len, lens.data(), 1);
  const int64_t chunk = *std::max_element(lens.begin(), lens.end());
  std::vector<uint8_t> in(static_cast<size_t>(chunk), 0);
  std::copy(mine.begin(), mine.end(), in.begin());
  std::vector<uint8_t> out(static_cast<size_t>(chunk * n));
  world.all_gather(in.data(), out.data(), chunk);
  std::vector<std::string> result;
  for (int r = 0; r < n; ++r) {
    const auto* p = out.data() + static_cast<size_t>(r * chunk);
    result.emplace_back(p, p + lens[static_cast<size_t>(r)]);
  }
  return result;
}

// Writes this rank's blocks; returns its manifest part:
// {"file": {"name", "size", "crc32"} or null, "blocks": [{name, key, offsets, shape, global_shape}]}.
json write_shard(FileSystem& fs, const std::string& dir, int rank, const std::vector<ShardedTensor>& tensors,
                 mode_t mode, ProgressSink* progress) {
  std::vector<TensorToWrite> out;
  SafetensorsMetadata meta{{"format", fmt::format("mtrain-sharded-v{}", kShardedFormatVersion)}};
  json blocks = json::array();
  std::map<std::string, int> seen;
  for (const ShardedTensor& t : tensors) {
    validate_tensor(t);
    if (!t.replicated_writer) continue;
    const int k = seen[t.name]++;
    const std::string key = k == 0 ? t.name : fmt::format("{}#{}", t.name, k);
    out.push_back(TensorToWrite::from_f32(key, t.shape, t.data));
    json b = {{"name", t.name}, {"key", key}, {"offsets", t.offsets}, {"shape", t.shape}};
    b["global_shape"] = t.global_shape;
    meta[key] = json{{"name", t.name}, {"global_shape", t.global_shape}, {"offsets", t.offsets}}.dump();
    blocks.push_back(std::move(b));
  }
  json part = {{"file", nullptr}, {"blocks", blocks}};
  if (out.empty()) return part;
  const std::string name = rank_file_name(rank);
  ProgressBar bar("Save checkpoint", static_cast<int64_t>(out.size()), progress);
  bar.set_unit("tensor");
  const WrittenFile w = write_safetensors(fs, dir + "/" + name, out, meta, mode,
                                          [&bar](size_t i) { bar.update(static_cast<int64_t>(i) + 1); });
  bar.close();
  part["file"] = {{"name", name}, {"size", w.digest.size}, {"crc32", crc32_hex(w.digest.crc32)}};
  for (json& b : part["blocks"]) b["file"] = name;
  return part;
}

// Rank 0: the manifest from every rank's part; checks that every tensor has
// one global shape on every rank.
json build_manifest(const std::vector<std::string>& parts, int64_t iteration, const std::string& state_json) {
  json state;
  try {
    state = json::parse(state_json.empty() ? std::string("{}") : state_json);
  } catch (const json::exception& e) {
    throw CheckpointError(fmt::format("the training state to save is not valid JSON: {}", e.what()));
  }
  json files = json::array();
  json tensors = json::object();
  for (const std::string& text : parts) {
    const json part = json::parse(text);
    if (!part["file"].is_null()) files.push_back(part["file"]);
    for (const json& b : part["blocks"]) {
      const std::string name = b["name"];
      json& t = tensors[name];
      if (t.is_null()) t = {{"global_shape", b["global_shape"]}, {"blocks", json::array()}};
      if (t["global_shape"] != b["global_shape"]) {
        throw CheckpointError(fmt::format("tensor {}: global shape {} on one rank, {} on another", name,
                                          t["global_shape"].dump(), b["global_shape"].dump()));
      }
      t["blocks"].push_back({{"file", b["file"]}, {"key", b["key"]}, {"offsets", b["offsets"]}, {"shape", b["shape"]}});
    }
  }
  return {{"format", "mtrain-sharded-checkpoint"},
          {"version", kShardedFormatVersion},
          {"iteration", iteration},
          {"files", files},
          {"tensors", tensors},
          {"state", state}};
}

// The committed iter_ directories of `save_dir` older than `iteration`
// (iteration, name), ascending; temporary ones (iter_N.tmp) are not.
std::vector<std::pair<int64_t, std::string>> committed_before(FileSystem& fs, const std::string& save_dir,
                                                              int64_t iteration) {
  std::vector<std::pair<int64_t, std::string>> older;
  for (const DirEntry& e : fs.list_dir(save_dir)) {
    long long it = 0;
    int consumed = 0;
    if (!e.is_dir || e.name.size() != 12 || std::sscanf(e.name.c_str(), "iter_%7lld%n", &it, &consumed) != 1 ||
        consumed != 12 || it >= iteration) {
      continue;
    }
    older.emplace_back(it, e.name);
  }
  std::sort(older.begin(), older.end());
  return older;
}

// Rank 0, after the commit: deletes committed iter_ directories older than
// `iteration` beyond the newest keep_last - 1 of them.
void apply_retention(FileSystem& fs, const std::string& save_dir, int64_t iteration, int keep_last,
                     SaveResult& result) {
  const std::vector<std::pair<int64_t, std::string>> older = committed_before(fs, save_dir, iteration);
  const int64_t keep_older = keep_last - 1;
  const int64_t excess = static_cast<int64_t>(older.size()) - keep_older;
  for (int64_t i = 0; i < excess; ++i) {
    const std::string path = save_dir + "/" + older[static_cast<size_t>(i)].second;
    if (auto err = attempt([&] { fs.remove_all(path); })) {
      result.warnings.push_back(fmt::format("retention: cannot remove {}: {}", path, *err));
    } else {
      result.removed.push_back(path);
    }
  }
}

// Without an atomic exchange (file systems that refuse RENAME_EXCHANGE):
// the tracker first falls back to the newest other committed iteration, then
// the old directory goes; when there is no other checkpoint the save is
// refused rather than leave a moment with none.
void replace_without_exchange(FileSystem& fs, const std::string& save_dir, const std::string& final_dir,
                              int64_t iteration, mode_t file_mode) {
  const std::string tracker = save_dir + "/" + kTrackerFileName;
  std::optional<int64_t> tracked;
  try {
    if (fs.exists(tracker)) tracked = read_tracker(fs, save_dir);
  } catch (const CheckpointError&) {
    // A damaged tracker names nothing; the commit replaces it.
  }
  if (tracked == iteration) {
    const auto older = committed_before(fs, save_dir, iteration);
    if (older.empty())
      throw CheckpointError(fmt::format("{} is the only checkpoint and this file system cannot swap directories "
                                        "atomically: refusing to replace it",
                                        final_dir),
                            "save to another --output_dir, or move the old checkpoint away first");
    replace_text_file_atomic(fs, tracker, std::to_string(older.back().first), file_mode);
    fs.sync_dir(save_dir);
  }
  fs.remove_all(final_dir);
  fs.sync_dir(save_dir);
}

// Rank 0: the complete temporary directory becomes <final_dir>, the parent is
// fsynced, the tracker replaced. An existing <final_dir> (a rerun into the
// same directory, a resume from an older iteration, the leftover of a save
// killed before its tracker update) is swapped with the new one atomically
// and removed only after the tracker names the new one, so at every moment
// the tracker names a complete checkpoint.
void commit(FileSystem& fs, const std::string& save_dir, const std::string& tmp, const std::string& final_dir,
            int64_t iteration, mode_t file_mode, SaveResult& result) {
  bool swapped = false;
  if (fs.exists(final_dir)) {
    result.replaced = final_dir;
    try {
      fs.exchange(tmp, final_dir);
      swapped = true;
    } catch (const IoError& e) {
      const int err = e.error_number();
      if (err != EINVAL && err != ENOTSUP && err != ENOSYS) throw;
      replace_without_exchange(fs, save_dir, final_dir, iteration, file_mode);
    }
  }
  if (!swapped) fs.rename(tmp, final_dir);
  fs.sync_dir(save_dir);
  replace_text_file_atomic(fs, save_dir + "/" + kTrackerFileName, std::to_string(iteration), file_mode);
  if (swapped) {
    fs.remove_all(tmp);  // the replaced checkpoint
    fs.sync_dir(save_dir);
  }
}

}  // namespace

SaveResult save_checkpoint(FileSystem& fs, parallel::Comm& world, const std::string& save_dir, int64_t iteration,
                           const std::vector<ShardedTensor>& tensors, const std::string& state_json,
                           const SaveOptions& opts) {
  const bool root = world.rank() == 0;
  const std::string final_dir = iteration_dir(save_dir, iteration);
  const std::string tmp = final_dir + ".tmp";
  SaveResult result;
  result.path = final_dir;
  const auto cleanup_and_agree = [&](const std::optional<std::string>& err) {
    try {
      agree(world, err);
    } catch (const CheckpointError&) {
      if (root) attempt([&] { fs.remove_all(tmp); });
      throw;
    }
  };
  // 1. Rank 0 prepares a fresh temporary directory.
  cleanup_and_agree(!root ? std::nullopt : attempt([&] {
    if (iteration < 0) throw CheckpointError(fmt::format("cannot save a negative iteration {}", iteration));
    check_mode(opts.dir_mode, save_dir);
    check_mode(opts.file_mode, save_dir);
    fs.create_dirs(save_dir, opts.dir_mode);
    fs.remove_all(tmp);  // a stale one from a killed save
    fs.create_dirs(tmp, opts.dir_mode);
  }));
  // 2. Every rank writes (and fsyncs) its shard.
  json part;
  cleanup_and_agree(attempt([&] {
    part = write_shard(fs, tmp, world.rank(), tensors, opts.file_mode, opts.progress);
    if (!part["file"].is_null()) result.bytes_this_rank = part["file"]["size"];
  }));
  // 3. Rank 0 gathers the parts and writes the manifest.
  const std::vector<std::string> parts = all_gather_strings(world, part.dump());
  cleanup_and_agree(!root ? std::nullopt : attempt([&] {
    const std::string text = build_manifest(parts, iteration, state_json).dump(1);
    write_file_atomic(fs, tmp + "/" + kManifestFileName, text, opts.file_mode);
  }));
  for (const std::string& p : parts) {
    const json f = json::parse(p)["file"];
    if (!f.is_null()) result.total_bytes += f["size"].get<int64_t>();
  }
  // 4. Everything is durable: rank 0 commits. A failure after the rename
  // leaves the new directory (complete) in place; the tracker is atomic.
  std::optional<std::string> err;
  if (root) {
    err = attempt([&] { commit(fs, save_dir, tmp, final_dir, iteration, opts.file_mode, result); });
    if (err) attempt([&] { fs.remove_all(tmp); });  // a no-op once renamed
  }
  agree(world, err);
  // 5. Retention, only after the commit; never the new checkpoint.
  if (root && opts.keep_last > 0) apply_retention(fs, save_dir, iteration, opts.keep_last, result);
  world.barrier();
  return result;
}

}  // namespace mtrain::checkpoint
