// The LoRA adapters of a checkpoint or a PEFT directory, and the merge of
// them into base weights (adapters.h). Used by training (--adapter_load),
// `mtrain infer` (--adapters) and `mtrain export` (--to_peft, --merge_lora).
#include "train/adapters.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "common/errors.h"
#include "config/json.h"
#include "lora/lora_config.h"
#include "lora/lora_merge.h"

namespace mtrain::train {

namespace {

// --modules_to_save module -> the tensors the adapter file carries (the router: every MoE layer's).
std::vector<std::string> saved_tensors(const std::string& module, const checkpoint::CheckpointReader& r,
                                       const std::string& source) {
  if (module == "word_embeddings") return {"embedding.word_embeddings.weight"};
  if (module == "output_layer") return {"output_layer.weight"};
  if (module == "router") {
    std::vector<std::string> out;
    for (const std::string& n : r.names())
      if (n.rfind("decoder.layers.", 0) == 0 && n.ends_with(".mlp.router.weight")) out.push_back(n);
    return out;
  }
  throw CheckpointError(fmt::format("{}: --modules_to_save {} has no Hugging Face equivalent", source, module),
                        "PEFT export supports word_embeddings, output_layer and an MoE model's router");
}

std::vector<float> read_whole(const checkpoint::CheckpointReader& r, const std::string& name) {
  const Shape global = r.global_shape(name);
  std::vector<float> full(static_cast<size_t>(shape_numel(global)));
  r.read_block(name, std::vector<int64_t>(global.size(), 0), global, full.data());
  return full;
}

}  // namespace

float ExportAdapters::scale() const {
  lora::LoraConfig c;
  c.rank = config.r;
  c.alpha = config.lora_alpha;
  c.rslora = config.use_rslora;
  return c.scaling();
}

bool is_adapter_tensor(const std::string& name) {
  return name.find(".lora_A.weight") != std::string::npos || name.find(".lora_B.weight") != std::string::npos;
}

std::optional<ExportAdapters> checkpoint_adapters(const checkpoint::CheckpointReader& r,
                                                  const checkpoint::HfModelShape& s) {
  const std::string source = r.path() + "/" + checkpoint::kManifestFileName;
  const nlohmann::json state = nlohmann::json::parse(r.state_json());
  if (!state.contains("args") || !state.at("args").is_object()) {
    for (const std::string& n : r.names())
      if (is_adapter_tensor(n))
        throw CheckpointError(fmt::format("{}: LoRA tensors but no run arguments (state key \"args\")", source),
                              "the checkpoint was not written by a LoRA training run of this mtrain version");
    return std::nullopt;
  }
  const config::Args args = config::args_from_json(state.at("args").dump());
  if (args.train_type != "lora") return std::nullopt;
  ExportAdapters a;
  a.config.r = args.lora_rank;
  a.config.lora_alpha = args.lora_alpha;
  a.config.lora_dropout = args.lora_dropout;
  a.config.use_rslora = args.use_rslora;
  a.config.bias = args.lora_bias;
  a.config.base_model_name_or_path = args.model.value_or(args.load.value_or(""));
  for (const std::string& n : r.names()) {
    if (n.rfind("optimizer.", 0) == 0) continue;
    const bool bias = args.lora_bias == "all" && n.size() > 5 && n.compare(n.size() - 5, 5, ".bias") == 0;
    if (is_adapter_tensor(n) || bias) a.tensors[n] = read_whole(r, n);
  }
  for (const std::string& m : lora::resolve_modules_to_save(args.modules_to_save))
    for (const std::string& t : saved_tensors(m, r, source))
      if (r.has(t)) a.tensors[t] = read_whole(r, t);
  for (const auto& [name, data] : a.tensors) {  // the rank the args say is the rank the tensors have
    const checkpoint::PeftTensorMap m = checkpoint::peft_map_for_mcore(name, s, a.config.r);
    if (r.global_shape(name) != m.hf.mcore_shape)
      throw CheckpointError(fmt::format("{}: tensor {} has shape {}, but the run's --lora_rank {} implies {}", source,
                                        name, shape_str(r.global_shape(name)), a.config.r, shape_str(m.hf.mcore_shape)),
                            "the checkpoint is damaged or its args do not describe its adapters");
  }
  return a;
}

ExportAdapters read_adapters(FileSystem& fs, const std::string& dir, const checkpoint::HfModelShape& s,
                             const std::string& what) {
  if (fs.exists(dir + "/" + checkpoint::kPeftConfigFile)) {
    checkpoint::PeftAdapter p = checkpoint::read_peft_adapter(fs, dir, s);
    return {std::move(p.config), std::move(p.tensors)};
  }
  std::optional<ExportAdapters> a = checkpoint_adapters(checkpoint::CheckpointReader::open(fs, dir), s);
  if (!a)
    throw CheckpointError(fmt::format("{} {}: neither a PEFT adapter directory nor a LoRA checkpoint", what, dir),
                          "give the directory `mtrain export --to_peft` or a --train_type lora run wrote");
  return std::move(*a);
}

checkpoint::HfTensorFetch merging_fetch(checkpoint::HfTensorFetch fetch, const ExportAdapters& adapters) {
  return [fetch = std::move(fetch), &adapters](const std::string& name) {
    if (const auto it = adapters.tensors.find(name); it != adapters.tensors.end()) return it->second;
    std::vector<float> w = fetch(name);
    const std::string stem = name.size() > 7 ? name.substr(0, name.size() - 7) : "";  // without ".weight"
    const auto a = adapters.tensors.find(stem + ".lora_A.weight"), b = adapters.tensors.find(stem + ".lora_B.weight");
    if (a == adapters.tensors.end() || b == adapters.tensors.end()) return w;
    const int64_t r = adapters.config.r, in = static_cast<int64_t>(a->second.size()) / r;
    const int64_t out = static_cast<int64_t>(b->second.size()) / r;
    if (out * in != static_cast<int64_t>(w.size()))
      throw CheckpointError(
          fmt::format("the adapter of {} ({} x {}) does not fit its base weight ({} values)", name, out, in, w.size()),
          "the adapter was trained on another base model");
    lora::merge_lora(w.data(), a->second.data(), b->second.data(), adapters.scale(), out, in, r);
    return w;
  };
}

}  // namespace mtrain::train
