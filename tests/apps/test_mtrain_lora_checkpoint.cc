// A LoRA run's checkpoint holds the trainable tensors (the adapters) and
// their optimizer state, not the frozen base, which it names by reference
// (lib/train/base_reference.h). Exact resume (10 + resume 10 == 20 bit for
// bit) at (1,1,1) and TP2; any-layout reload (saved at TP2, resumed at TP1
// and PP2: the loss equals the single-device run's within the 1e-5 bound of
// test_mtrain_lora.cc); the size is the adapters' arithmetic; a base that
// changed is refused with exit 5 naming the file, by resume, export and infer;
// export and infer rebuild a random base from its seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "checkpoint/sharded_checkpoint.h"
#include "common/file_system.h"
#include "mtrain_runner.h"

namespace mtrain::functional {
namespace {

std::vector<std::string> lora_args(const fs::path& out, int iters) {
  return concat(words("sft configs/sft_demo.yaml --train_type lora --lora_rank 8 --lora_alpha 16 --lr 3e-4 "
                      "--min_lr 3e-5 --lr_decay_iters 2400 --micro_batch_size 2 --global_batch_size 8 "
                      "--eval_interval 100 --eval_iters 1 --log_interval 1 --num_threads 1 --num_generate_samples 0 "
                      "--save_interval 10 --train_iters " +
                      std::to_string(iters)),
                {"--output_dir", out.string()});
}

class LoraAdapterCheckpoint : public MtrainTest {
 protected:
  RunResult lora(const std::string& out, int iters, const std::string& extra = "", int ranks = 1) {
    auto a = concat(lora_args(tmp_ / out, iters), words(extra));
    return ranks == 1 ? run(a, out) : run(a, out, launch_ranks(ranks));
  }
  // One iteration of full training under <tmp>/base: a base for LoRA.
  RunResult full_base() {
    return run(concat(words("sft configs/sft_demo.yaml --train_iters 1 --lr_warmup_iters 0 --micro_batch_size 2 "
                            "--global_batch_size 8 --eval_interval 100 --eval_iters 1 --num_threads 1 "
                            "--num_generate_samples 0"),
                      {"--output_dir", (tmp_ / "base").string()}),
               "base");
  }
  // `mtrain export --to_hf --merge_lora true` of the LoRA checkpoint in <tmp>/<dir>.
  RunResult merge(const std::string& dir, const std::string& out) {
    return run({"export", "--to_hf", "--merge_lora", "true", "--load", (tmp_ / dir).string(), "--output_dir",
                (tmp_ / out).string()},
               out);
  }
  // The greedy answers of `mtrain infer <weights>` to three demo questions.
  std::vector<std::string> answers(const std::string& tag, const std::vector<std::string>& weights, int* code) {
    const fs::path val = tmp_ / "val.jsonl", result = tmp_ / (tag + ".jsonl");
    write_text(val,
               "{\"instruction\": \"What colour is a leaf?\", \"input\": \"\", \"output\": \"green\"}\n"
               "{\"instruction\": \"Which day follows Friday?\", \"input\": \"\", \"output\": \"Saturday\"}\n");
    const RunResult r =
        run(concat(concat({"infer"}, weights), {"--val_dataset", val.string(), "--max_new_tokens", "6", "--result_path",
                                                result.string(), "--num_threads", "1"}),
            tag);
    *code = r.exit_code;
    if (r.exit_code != 0) std::fprintf(stderr, "%s\n", r.describe().c_str());
    std::vector<std::string> out;
    if (r.exit_code == 0)
      for (const nlohmann::json& row : read_jsonl(result)) out.push_back(row["response"].get<std::string>());
    return out;
  }
  std::string resume_from(const std::string& dir) { return "--load " + (tmp_ / dir).string() + " --ckpt_step 10"; }
  void expect_same(const std::string& full, const std::string& resumed, double bound) {
    const auto a = train_rows(tmp_ / full), b = train_rows(tmp_ / resumed);
    ASSERT_EQ(a.size(), 20u);
    ASSERT_EQ(b.size(), 10u);
    for (size_t i = 0; i < 10; ++i) {
      const double la = a[i + 10].at("loss").get<double>(), lb = b[i].at("loss").get<double>();
      const double ga = a[i + 10].at("grad_norm").get<double>(), gb = b[i].at("grad_norm").get<double>();
      if (bound == 0) {
        EXPECT_EQ(la, lb) << "iteration " << i + 11;
        EXPECT_EQ(ga, gb) << "iteration " << i + 11;
      } else {
        EXPECT_LE(std::abs(la - lb) / std::abs(la), bound) << "iteration " << i + 11 << ": " << la << " vs " << lb;
        EXPECT_LE(std::abs(ga - gb) / std::abs(ga), bound) << "iteration " << i + 11 << ": " << ga << " vs " << gb;
      }
    }
  }
};

// The trainable parameter count mtrain prints (Megatron's line plus mtrain's LoRA line).
int64_t trainable_count(const std::string& out) {
  const std::regex row(R"(of which trainable on \(tensor, pipeline\) model parallel rank \(0, 0\): ([0-9]+))");
  std::smatch m;
  if (!std::regex_search(out, m, row)) return -1;
  return std::stoll(m[1]);
}

TEST_F(LoraAdapterCheckpoint, HoldsOnlyAdaptersAndResumesExactly) {
  const RunResult full = lora("full", 20);
  ASSERT_EQ(full.exit_code, 0) << full.describe();
  const RunResult res = lora("res", 20, resume_from("full"));
  ASSERT_EQ(res.exit_code, 0) << res.describe();
  expect_same("full", "res", 0);

  // Only adapters: weights, and Adam's exp_avg and exp_avg_sq of them (fp32 run: no master copy).
  PosixFileSystem pfs;
  const auto r = checkpoint::CheckpointReader::open(pfs, (tmp_ / "full").string(), 10);
  int64_t numel = 0;
  for (const std::string& name : r.names()) {
    EXPECT_NE(name.find(".lora_"), std::string::npos) << name << ": a frozen tensor in a LoRA checkpoint";
    numel += shape_numel(r.global_shape(name));
  }
  const int64_t n = trainable_count(full.out);
  ASSERT_GT(n, 0) << full.out;
  EXPECT_EQ(numel, 3 * n);
  // On disk: 4 bytes per element plus each shard file's safetensors header
  // (a JSON entry of well under 1 KiB per block) and the manifest.
  int64_t bytes = 0;
  for (const auto& e : fs::directory_iterator(tmp_ / "full" / "iter_0000010"))
    if (e.path().extension() == ".safetensors") bytes += static_cast<int64_t>(fs::file_size(e.path()));
  EXPECT_GE(bytes, 4 * 3 * n);
  EXPECT_LE(bytes, 4 * 3 * n + 1024 * static_cast<int64_t>(r.names().size()));
  const std::string manifest = read_text(tmp_ / "full" / "iter_0000010" / "manifest.json");
  EXPECT_TRUE(std::regex_search(manifest, std::regex(R"("kind": *"random")"))) << "a random base is named by its seed";
}

TEST_F(LoraAdapterCheckpoint, ReloadsUnderAnyLayout) {
  const RunResult one = lora("one", 20);
  ASSERT_EQ(one.exit_code, 0) << one.describe();
  const RunResult tp2 = lora("tp2", 20, "--tensor_model_parallel_size 2", 2);
  ASSERT_EQ(tp2.exit_code, 0) << tp2.describe();
  const RunResult tp2r = lora("tp2r", 20, "--tensor_model_parallel_size 2 " + resume_from("tp2"), 2);
  ASSERT_EQ(tp2r.exit_code, 0) << tp2r.describe();
  expect_same("tp2", "tp2r", 0);  // exact resume under a parallel layout
  const RunResult tp1 = lora("tp1", 20, resume_from("tp2"));
  ASSERT_EQ(tp1.exit_code, 0) << tp1.describe();
  expect_same("one", "tp1", 1e-5);
  const RunResult pp2 = lora("pp2", 20, "--pipeline_model_parallel_size 2 " + resume_from("tp2"), 2);
  ASSERT_EQ(pp2.exit_code, 0) << pp2.describe();
  expect_same("one", "pp2", 1e-5);
}

TEST_F(LoraAdapterCheckpoint, RefusesAChangedBase) {
  // A random base is its seed: another --seed is another base.
  ASSERT_EQ(lora("rand", 20).exit_code, 0);
  const RunResult seed = lora("seed", 20, resume_from("rand") + " --seed 7");
  EXPECT_EQ(seed.exit_code, 5) << seed.describe();
  EXPECT_NE(seed.err.find("--seed"), std::string::npos) << seed.err;

  // A full checkpoint as the base (--load ... --finetune), then changed.
  const RunResult base = full_base();
  ASSERT_EQ(base.exit_code, 0) << base.describe();
  ASSERT_EQ(lora("ada", 20, "--finetune --load " + (tmp_ / "base").string()).exit_code, 0);
  ASSERT_EQ(lora("ok", 20, resume_from("ada")).exit_code, 0) << "the unchanged base is accepted";
  const fs::path manifest = tmp_ / "base" / "iter_0000001" / "manifest.json";
  std::ofstream(manifest, std::ios::app) << " ";
  const RunResult changed = lora("changed", 20, resume_from("ada"));
  EXPECT_EQ(changed.exit_code, 5) << changed.describe();
  EXPECT_NE(changed.err.find(manifest.string()), std::string::npos) << changed.err;
  EXPECT_NE(changed.err.find("changed"), std::string::npos) << changed.err;
}

// A Hugging Face directory as the base (--model): each weight file is checksummed.
TEST_F(LoraAdapterCheckpoint, RefusesAChangedHuggingFaceBase) {
  const RunResult base = full_base();
  ASSERT_EQ(base.exit_code, 0) << base.describe();
  const fs::path hf = tmp_ / "hf";
  const RunResult e =
      run({"export", "--to_hf", "--load", (tmp_ / "base").string(), "--output_dir", hf.string()}, "export");
  ASSERT_EQ(e.exit_code, 0) << e.describe();
  ASSERT_EQ(lora("ada", 20, "--model " + hf.string()).exit_code, 0);
  ASSERT_EQ(lora("ok", 20, "--model " + hf.string() + " " + resume_from("ada")).exit_code, 0);
  // Export and infer open the adapter-only checkpoint over the HF base it names.
  const RunResult merged = merge("ada", "merged");
  ASSERT_EQ(merged.exit_code, 0) << merged.describe();
  int code = -1;
  ASSERT_FALSE(answers("infer_ok", {"--load", (tmp_ / "ada").string()}, &code).empty());
  ASSERT_EQ(code, 0);
  const fs::path weights = hf / "model.safetensors";
  ASSERT_TRUE(fs::exists(weights));
  {  // one weight changes (the last byte of the data); the file stays valid
    std::fstream f(weights, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1, std::ios::end);
    const char last = static_cast<char>(f.get());
    f.seekp(-1, std::ios::end);
    f.put(static_cast<char>(last ^ 1));
  }
  const RunResult changed = lora("changed", 20, "--model " + hf.string() + " " + resume_from("ada"));
  EXPECT_EQ(changed.exit_code, 5) << changed.describe();
  EXPECT_NE(changed.err.find(weights.string()), std::string::npos) << changed.err;
  // ... and export and infer refuse it alike.
  const RunResult exported = merge("ada", "merged_changed");
  EXPECT_EQ(exported.exit_code, 5) << exported.describe();
  EXPECT_NE(exported.err.find(weights.string()), std::string::npos) << exported.err;
  EXPECT_FALSE(fs::exists(tmp_ / "merged_changed" / "model.safetensors"));
  const RunResult inferred =
      run({"infer", "--load", (tmp_ / "ada").string(), "--max_new_tokens", "2"}, "infer_changed");
  EXPECT_EQ(inferred.exit_code, 5) << inferred.describe();
  EXPECT_NE(inferred.err.find(weights.string()), std::string::npos) << inferred.err;
}

// A randomly initialised base is rebuilt from the seed the checkpoint records:
// the merged export, the adapter as LoRA layers and merged at load answer
// alike, and the merged model's first training loss is that of --finetune
// from the checkpoint (training's own init of the base), within the fp32
// bound of the merge (test_mtrain_peft.cc: 16 * 688 * 2^-24 relative).
TEST_F(LoraAdapterCheckpoint, ExportAndInferRebuildARandomBaseFromItsSeed) {
  ASSERT_EQ(lora("rand", 10).exit_code, 0);
  const RunResult merged = merge("rand", "merged");
  ASSERT_EQ(merged.exit_code, 0) << merged.describe();
  int code = -1;
  const std::vector<std::string> lora_layers = answers("unmerged", {"--load", (tmp_ / "rand").string()}, &code);
  ASSERT_EQ(code, 0);
  ASSERT_EQ(lora_layers.size(), 2u);
  EXPECT_EQ(answers("at_load", {"--load", (tmp_ / "rand").string(), "--merge_lora", "true"}, &code), lora_layers);
  const std::string tokenizer = (fs::path(MTRAIN_SOURCE_DIR) / "configs/demo/tokenizer.json").string();
  EXPECT_EQ(answers("exported", {"--model", (tmp_ / "merged").string(), "--tokenizer", tokenizer}, &code), lora_layers);

  // One step each on the same first batch: the LoRA model over training's own init of the base
  // (--finetune from the checkpoint), and the merged export as a plain model.
  const RunResult a = lora("ft", 1, "--lora_dropout 0 --finetune --load " + (tmp_ / "rand").string());
  ASSERT_EQ(a.exit_code, 0) << a.describe();
  const RunResult b = run(concat(words("sft configs/sft_demo.yaml --lr 3e-4 --min_lr 3e-5 --lr_decay_iters 2400 "
                                       "--micro_batch_size 2 --global_batch_size 8 --eval_interval 100 --eval_iters 1 "
                                       "--log_interval 1 --num_threads 1 --num_generate_samples 0 --train_iters 1 "
                                       "--tokenizer " +
                                       tokenizer + " --model " + (tmp_ / "merged").string()),
                                 {"--output_dir", (tmp_ / "plain").string()}),
                          "plain");
  ASSERT_EQ(b.exit_code, 0) << b.describe();
  const double la = train_rows(tmp_ / "ft").front().at("loss").get<double>();
  const double lb = train_rows(tmp_ / "plain").front().at("loss").get<double>();
  EXPECT_LE(std::abs(la - lb) / la, 16.0 * 688 * std::ldexp(1.0, -24)) << la << " vs " << lb;
}

}  // namespace
}  // namespace mtrain::functional
