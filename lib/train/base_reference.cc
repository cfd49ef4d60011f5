// base_reference.h: how a LoRA checkpoint names its frozen base.
#include "train/base_reference.h"

#include <fmt/format.h>

#include "checkpoint/checksum.h"
#include "checkpoint/sharded_checkpoint.h"
#include "common/errors.h"

namespace mtrain::train {

using json = nlohmann::json;

namespace {

json digest_json(FileSystem& fs, const std::string& path) {
  const checkpoint::FileDigest d = checkpoint::digest_file(fs, path);
  return {{"size", d.size}, {"crc32", checkpoint::crc32_hex(d.crc32)}};
}

// The files of a HF directory that define its weights and shape.
bool hf_weight_file(const std::string& name) {
  return name == "config.json" || name.ends_with(".safetensors") || name.ends_with(".safetensors.index.json");
}

const json& field(const json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key))
    throw CheckpointError(fmt::format("{}: the base model reference has no \"{}\"", where, key),
                          "the checkpoint is damaged or was not written by mtrain");
  return j.at(key);
}

std::string string_field(const json& j, const char* key, const std::string& where) {
  const json& v = field(j, key, where);
  if (!v.is_string())
    throw CheckpointError(fmt::format("{}: \"{}\" of the base model reference is not a string", where, key),
                          "the checkpoint is damaged or was not written by mtrain");
  return v.get<std::string>();
}

// Every recorded file must still be there with the recorded size and crc32.
void verify_files(FileSystem& fs, const std::string& dir, const json& files, const std::string& where) {
  if (!files.is_object() || files.empty())
    throw CheckpointError(fmt::format("{}: the base model reference lists no files", where),
                          "the checkpoint is damaged or was not written by mtrain");
  const std::string hint = fmt::format(
      "this LoRA checkpoint was trained on the base model in {} as it was then; restore that base (or train "
      "the adapters again on the new one)",
      dir);
  for (const auto& [name, want] : files.items()) {
    const std::string path = dir + "/" + name;
    if (!fs.exists(path))
      throw CheckpointError(fmt::format("{}: the base model file {} is missing", where, path), hint);
    if (digest_json(fs, path) != want)
      throw CheckpointError(
          fmt::format("{}: the base model file {} changed since the checkpoint was saved (size {}, crc32 {} "
                      "recorded; now {})",
                      where, path, want.value("size", int64_t{-1}), want.value("crc32", std::string("?")),
                      digest_json(fs, path).dump()),
          hint);
  }
}

}  // namespace

json hf_base_reference(FileSystem& fs, const std::string& dir) {
  json files = json::object();
  for (const DirEntry& e : fs.list_dir(dir))
    if (!e.is_dir && hf_weight_file(e.name)) files[e.name] = digest_json(fs, dir + "/" + e.name);
  return {{"kind", "hf"}, {"path", dir}, {"files", files}};
}

json checkpoint_base_reference(FileSystem& fs, const std::string& load_dir, int64_t iteration) {
  const std::string dir = checkpoint::iteration_dir(load_dir, iteration);
  json files = {{checkpoint::kManifestFileName, digest_json(fs, dir + "/" + checkpoint::kManifestFileName)}};
  return {{"kind", "checkpoint"}, {"path", load_dir}, {"iteration", iteration}, {"files", files}};
}

json random_base_reference(uint64_t seed) { return {{"kind", "random"}, {"seed", seed}}; }

void verify_base_reference(FileSystem& fs, const json& ref, uint64_t seed, const std::string& where) {
  const std::string kind = string_field(ref, "kind", where);
  if (kind == "random") {
    const json& s = field(ref, "seed", where);
    if (!s.is_number_unsigned() || s.get<uint64_t>() != seed)
      throw CheckpointError(fmt::format("{}: the base model was randomly initialised with --seed {}, this run has "
                                        "--seed {}",
                                        where, s.dump(), seed),
                            fmt::format("pass --seed {} to rebuild the same base", s.dump()));
    return;
  }
  if (kind != "hf" && kind != "checkpoint")
    throw CheckpointError(fmt::format("{}: unknown base model reference kind \"{}\"", where, kind),
                          "the checkpoint is damaged or was not written by mtrain");
  std::string dir = string_field(ref, "path", where);
  if (kind == "checkpoint") {
    const json& it = field(ref, "iteration", where);
    if (!it.is_number_unsigned())
      throw CheckpointError(fmt::format("{}: \"iteration\" of the base model reference is not an integer", where),
                            "the checkpoint is damaged or was not written by mtrain");
    dir = checkpoint::iteration_dir(dir, it.get<int64_t>());
  }
  verify_files(fs, dir, field(ref, "files", where), where);
}

void load_base_reference(FileSystem& fs, const json& ref, TrainingState& t) {
  const std::string kind = ref.at("kind").get<std::string>();
  if (kind == "random") return;  // the model was initialised from the same seed
  const std::string dir = ref.at("path").get<std::string>();
  if (kind == "hf") {
    load_hf_model(fs, dir, t);
    return;
  }
  const checkpoint::CheckpointReader r =
      checkpoint::CheckpointReader::open(fs, dir, ref.at("iteration").get<int64_t>());
  if (t.parallel.rank() == 0) fmt::print(" > the frozen LoRA base: checkpoint {} (checksum verified)\n", r.path());
  load_model_weights(r, t);
}

}  // namespace mtrain::train
