// Expert parallelism end to end (mpirun): `mtrain pt` with
// --expert_model_parallel_size and the alltoall dispatcher equals the single
// device for 20 iterations (loss, grad norm and the logged router losses
// within 1e-5, the bound and the lr of ParallelEquivalence in
// test_mtrain_parallel.cc), alone, with PP, with the distributed optimizer,
// with capacity dropping and under TP + SP (experts whole or split over TP),
// with either token dispatcher; checkpoints saved at EP 2 resume at TP 2,
// saved at (EP 2, ETP 2) on one device and back (experts are named tensors
// by global index, their ETP slices sharded tensors). The same harness
// proves aux-loss-free balancing (the expert bias, at EP 2, TP 2 + SP, DP 2,
// and across a resume) and MoE under context parallelism (ring, Ulysses,
// CP 2 x EP 2), and LoRA on the experts, whose adapters export to PEFT's
// per-expert names.
//
// EP ranks are data-parallel ranks of the dense model, each routing its own
// micro-batch (the router's token group is the micro-batch's tokens on the
// TP group), so the single-device reference runs the same micro-batch size.
#include <algorithm>
#include <cmath>

#include "checkpoint/sharded_checkpoint.h"
#include "common/file_system.h"
#include "mtrain_runner.h"
#include "raw_safetensors.h"

namespace mtrain::functional {
namespace {

const char* kMoe =
    "--lr 3e-4 --num_experts 4 --moe_ffn_hidden_size 128 --moe_layer_freq 2 --moe_aux_loss_coeff 1e-2 "
    "--moe_z_loss_coeff 1e-3";

double rel(double a, double b) { return std::abs(a - b) / std::max(std::abs(a), 1e-30); }

// pt rows are full length: SP adds no padding tokens for the router to count (test_mtrain_moe.cc).
std::vector<std::string> job(const fs::path& out, const std::string& extra) {
  return concat(demo_pt_args(20, out), words(std::string(kMoe) + " " + extra));
}

void expect_equal_runs(const fs::path& ref, const fs::path& par, const std::string& what) {
  const auto a = train_rows(ref), b = train_rows(par);
  ASSERT_EQ(a.size(), 20u);
  ASSERT_EQ(b.size(), 20u) << what;
  for (size_t i = 0; i < a.size(); ++i)
    for (const char* key : {"loss", "grad_norm", "load_balancing_loss", "z_loss"})
      EXPECT_LE(rel(a[i].at(key).get<double>(), b[i].at(key).get<double>()), 1e-5)
          << what << " iteration " << i + 1 << ": " << key << " " << a[i].at(key) << " vs " << b[i].at(key);
}

// resumed/ starts from straight/'s iteration-10 checkpoint.
void seed_resume_dir(const fs::path& straight, const fs::path& resumed) {
  fs::create_directories(resumed);
  fs::copy(straight / "iter_0000010", resumed / "iter_0000010", fs::copy_options::recursive);
  write_text(resumed / "latest_checkpointed_iteration.txt", "10");
}

// The resumed run (from iteration 10) logs iterations 11..20 of the straight one.
void expect_resumed_continues(const fs::path& straight, const fs::path& resumed) {
  const auto a = train_rows(straight), b = train_rows(resumed);
  ASSERT_EQ(a.size(), 20u);
  ASSERT_EQ(b.size(), 10u) << "the resumed run logs iterations 11..20 only";
  for (size_t i = 0; i < b.size(); ++i)
    for (const char* key : {"loss", "grad_norm"})
      EXPECT_LE(rel(a[i + 10].at(key).get<double>(), b[i].at(key).get<double>()), 1e-5)
          << "iteration " << i + 11 << ": " << key << " " << a[i + 10].at(key) << " vs " << b[i].at(key);
}

struct Layout {
  std::string name;
  int ranks;
  std::string flags;
};

class MoeExpertParallel : public MtrainTest {
 protected:
  // The single-device run of `flags` (into tmp_/ref, with `ref_flags` too),
  // then each layout's run of `flags` + its own, each equal to it.
  void expect_layouts_equal_single_device(const std::string& flags, std::initializer_list<Layout> layouts,
                                          const std::string& ref_flags = "") {
    const RunResult ref = run(job(tmp_ / "ref", flags + " " + ref_flags), "ref");
    ASSERT_EQ(ref.exit_code, 0) << ref.describe();
    for (const Layout& l : layouts) {
      const RunResult par = run(job(tmp_ / l.name, flags + " " + l.flags), l.name, launch_ranks(l.ranks));
      ASSERT_EQ(par.exit_code, 0) << par.describe();
      expect_equal_runs(tmp_ / "ref", tmp_ / l.name, l.name);
    }
  }
};

// Micro-batches of 2 rows: 4 per step on one device, 1 per rank at EP 4.
TEST_F(MoeExpertParallel, DispatcherLayoutsEqualTheSingleDevice) {
  const std::string mbs = "--micro_batch_size 2";
  const RunResult ref = run(job(tmp_ / "ref", mbs), "ref");
  ASSERT_EQ(ref.exit_code, 0) << ref.describe();
  // (Plain EP 2: CapacityDroppingEqualsTheSingleDevice and the distributed optimizer's run.)
  for (const Layout& l :
       {Layout{"ep4", 4, "--expert_model_parallel_size 4 --moe_grouped_gemm false"},
        Layout{"ep2_pp2", 4, "--expert_model_parallel_size 2 --pipeline_model_parallel_size 2"},
        Layout{"ep2_distopt", 2, "--expert_model_parallel_size 2 --use_distributed_optimizer"},
        Layout{"ep2_allgather", 2, "--expert_model_parallel_size 2 --moe_token_dispatcher_type allgather"}}) {
    const RunResult par = run(job(tmp_ / l.name, mbs + " " + l.flags), l.name, launch_ranks(l.ranks));
    ASSERT_EQ(par.exit_code, 0) << par.describe();
    expect_equal_runs(tmp_ / "ref", tmp_ / l.name, l.name);
  }
}

// Capacity 1.0 drops tokens: Megatron's router decides what each expert
// keeps over the tokens of the rank that routes them, before either
// dispatcher moves them (the allgather dispatcher gathers the routing map
// after dropping), so an EP rank keeps exactly what one device keeps on the
// same micro-batch (token for token: tests/model/test_model_expert_parallel.cc,
// test_model_expert_grid.cc); the runs agree.
TEST_F(MoeExpertParallel, CapacityDroppingEqualsTheSingleDevice) {
  const std::string cap = "--micro_batch_size 2 --moe_expert_capacity_factor 1.0";
  const RunResult ref = run(job(tmp_ / "ref", cap), "ref");
  ASSERT_EQ(ref.exit_code, 0) << ref.describe();
  for (const std::string dispatcher : {"alltoall", "allgather"}) {
    const fs::path out = tmp_ / dispatcher;
    const RunResult par =
        run(job(out, cap + " --expert_model_parallel_size 2 --moe_token_dispatcher_type " + dispatcher), dispatcher,
            launch_ranks(2));
    ASSERT_EQ(par.exit_code, 0) << par.describe();
    expect_equal_runs(tmp_ / "ref", out, "ep2 capacity 1.0 " + dispatcher);
  }
}

// EP 2 x TP 2 with SP: each TP rank routes its token shard; micro-batches
// of 4 rows, the router's token group the TP group as on one device's
// micro-batch of 4. ETP 1 with the alltoall dispatcher (whole experts, the
// shard dispatched over its EP group) and ETP 2 with the allgather one
// (each rank gathers the 4 ranks' tokens and runs its F/2 slice of its
// experts); alltoall at ETP 2: EtpCheckpointReloadsOnOneDeviceAndBack.
TEST_F(MoeExpertParallel, ExpertTimesTensorParallelEqualsTheSingleDevice) {
  const RunResult ref = run(job(tmp_ / "ref", ""), "ref");
  ASSERT_EQ(ref.exit_code, 0) << ref.describe();
  const std::string grid = "--expert_model_parallel_size 2 --tensor_model_parallel_size 2 --sequence_parallel ";
  for (const Layout& l :
       {Layout{"etp1_alltoall", 4, grid + "--expert_tensor_parallel_size 1"},
        Layout{"etp2_allgather", 4, grid + "--expert_tensor_parallel_size 2 --moe_token_dispatcher_type allgather"}}) {
    const RunResult par = run(job(tmp_ / l.name, l.flags), l.name, launch_ranks(l.ranks));
    ASSERT_EQ(par.exit_code, 0) << par.describe();
    expect_equal_runs(tmp_ / "ref", tmp_ / l.name, "ep2 tp2 sp " + l.name);
  }
}

// Aux-loss-free balancing: sigmoid scores, the bias moved by 0.05 per step
// (large: within a few iterations it changes which experts tokens pick, so
// a count summed over the wrong group, or a bias lost by a resume, shows in
// the loss). The update sums the routing counts over TP x DP x CP.
const char* kBias =
    "--moe_router_score_function sigmoid --moe_router_enable_expert_bias --moe_router_bias_update_rate 0.05";

// Each layout holds the step's tokens on other ranks: EP 2 and DP 2 one
// micro-batch per rank, TP 2 + SP half of each micro-batch per rank. The
// single device's checkpoint at iteration 10 resumes into iterations 11..20.
TEST_F(MoeExpertParallel, ExpertBiasLayoutsAndResumeEqualTheSingleDevice) {
  const std::string flags = std::string("--micro_batch_size 2 ") + kBias;
  expect_layouts_equal_single_device(
      flags,
      {Layout{"ep2", 2, "--expert_model_parallel_size 2"},
       Layout{"tp2_sp", 2, "--tensor_model_parallel_size 2 --sequence_parallel"}, Layout{"dp2", 2, ""}},
      "--save_interval 10");
  if (HasFatalFailure()) return;
  fs::create_directories(tmp_ / "resumed");
  fs::copy(tmp_ / "ref" / "iter_0000010", tmp_ / "resumed" / "iter_0000010", fs::copy_options::recursive);
  write_text(tmp_ / "resumed" / "latest_checkpointed_iteration.txt", "10");
  const RunResult resumed =
      run(concat(job(tmp_ / "resumed", flags), {"--load", (tmp_ / "resumed").string()}), "resumed");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.describe();
  const auto a = train_rows(tmp_ / "ref"), b = train_rows(tmp_ / "resumed");
  ASSERT_EQ(b.size(), 10u) << "the resumed run logs iterations 11..20 only";
  for (size_t i = 0; i < b.size(); ++i)
    for (const char* key : {"loss", "grad_norm", "load_balancing_loss", "z_loss"})
      EXPECT_LE(rel(a[i + 10].at(key).get<double>(), b[i].at(key).get<double>()), 1e-5)
          << "resumed iteration " << i + 11 << ": " << key << " " << a[i + 10].at(key) << " vs " << b[i].at(key);
}

// Context parallelism: each CP rank routes its two chunks of every sequence;
// the routers sum the load-balancing counts over TP x CP (Megatron's
// tp_cp_group), divide the z-loss coefficient by it, and the expert bias
// counts over TP x DP x CP. Ring attention, Ulysses, and CP 2 x EP 2 (the
// expert grid takes its EP ranks from DP x CP: here the CP pair).
TEST_F(MoeExpertParallel, ContextParallelEqualsTheSingleDevice) {
  expect_layouts_equal_single_device(
      std::string("--micro_batch_size 2 ") + kBias,
      {Layout{"cp2", 2, "--context_parallel_size 2"},
       Layout{"cp2_ulysses", 2, "--context_parallel_size 2 --context_parallel_algo ulysses_cp_algo"},
       Layout{"cp2_ep2", 2, "--context_parallel_size 2 --expert_model_parallel_size 2"}});
}

// Saved at (EP 2, TP 1), resumed at (EP 1, TP 2 + SP): iterations 11..20
// continue the uninterrupted EP 2 run.
TEST_F(MoeExpertParallel, CheckpointSavedAtEp2ResumesAtTp2) {
  const RunResult straight =
      run(job(tmp_ / "straight", "--save_interval 10 --expert_model_parallel_size 2"), "straight", launch_ranks(2));
  ASSERT_EQ(straight.exit_code, 0) << straight.describe();
  seed_resume_dir(tmp_ / "straight", tmp_ / "resumed");
  const RunResult resumed = run(concat(job(tmp_ / "resumed", "--tensor_model_parallel_size 2 --sequence_parallel"),
                                       {"--load", (tmp_ / "resumed").string()}),
                                "resumed", launch_ranks(2));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.describe();
  expect_resumed_continues(tmp_ / "straight", tmp_ / "resumed");
}

// EP 2 x TP 2 + SP with ETP 2 (alltoall: the all-to-all over EP, then the
// all-gather over the TP group) equals the single device; its checkpoint at
// iteration 10 (each expert's F/2 slices as sharded tensors) resumes on one
// device (EP 1, TP 1), and the single device's resumes at EP 2 x ETP 2:
// iterations 11..20 continue each.
TEST_F(MoeExpertParallel, EtpCheckpointReloadsOnOneDeviceAndBack) {
  const std::string grid =
      "--expert_model_parallel_size 2 --tensor_model_parallel_size 2 --sequence_parallel "
      "--expert_tensor_parallel_size 2";
  const RunResult ref = run(job(tmp_ / "ref", "--save_interval 10"), "ref");
  ASSERT_EQ(ref.exit_code, 0) << ref.describe();
  const RunResult straight = run(job(tmp_ / "straight", "--save_interval 10 " + grid), "straight", launch_ranks(4));
  ASSERT_EQ(straight.exit_code, 0) << straight.describe();
  expect_equal_runs(tmp_ / "ref", tmp_ / "straight", "ep2 tp2 sp etp2 alltoall");
  seed_resume_dir(tmp_ / "straight", tmp_ / "on_one");
  const RunResult on_one = run(concat(job(tmp_ / "on_one", ""), {"--load", (tmp_ / "on_one").string()}), "on_one");
  ASSERT_EQ(on_one.exit_code, 0) << on_one.describe();
  expect_resumed_continues(tmp_ / "straight", tmp_ / "on_one");
  seed_resume_dir(tmp_ / "ref", tmp_ / "on_grid");
  const RunResult on_grid =
      run(concat(job(tmp_ / "on_grid", grid), {"--load", (tmp_ / "on_grid").string()}), "on_grid", launch_ranks(4));
  ASSERT_EQ(on_grid.exit_code, 0) << on_grid.describe();
  expect_resumed_continues(tmp_ / "ref", tmp_ / "on_grid");
}

// `mtrain export --to_peft` of an MoE LoRA checkpoint: PEFT's per-expert
// names on the Hugging Face MoE layout (Qwen2-MoE: a gated shared expert),
// each expert's fused fc1 adapter split into gate_proj / up_proj (A shared, B
// by rows) exactly, and target_modules the projection names.
void expect_peft_export_of_experts(const fs::path& run, const fs::path& peft) {
  const RunResult r = run_mtrain({"export", "--to_peft", "--load", run.string(), "--output_dir", peft.string()},
                                 peft.parent_path(), "peft");
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const RawSafetensors st = read_raw(peft / "adapter_model.safetensors");
  PosixFileSystem pfs;
  const auto ckpt = checkpoint::CheckpointReader::open(pfs, run.string());
  auto whole = [&](const std::string& name) {
    const Shape g = ckpt.global_shape(name);
    std::vector<float> v(static_cast<size_t>(shape_numel(g)));
    ckpt.read_block(name, std::vector<int64_t>(g.size(), 0), g, v.data());
    return v;
  };
  const std::string hf = "base_model.model.model.layers.2.mlp.";
  const std::string mc = "decoder.layers.2.mlp.experts.local_experts.3.linear_fc1.";
  const std::vector<float> A = whole(mc + "lora_A.weight"), B = whole(mc + "lora_B.weight");  // (4, 256), (256, 4)
  EXPECT_EQ(st.header[hf + "experts.3.gate_proj.lora_A.weight"]["shape"], nlohmann::json({4, 256}));
  EXPECT_EQ(st.header[hf + "experts.3.up_proj.lora_B.weight"]["shape"], nlohmann::json({128, 4}));
  EXPECT_EQ(st.f32(hf + "experts.3.gate_proj.lora_A.weight"), A);
  EXPECT_EQ(st.f32(hf + "experts.3.up_proj.lora_A.weight"), A);
  EXPECT_EQ(st.f32(hf + "experts.3.gate_proj.lora_B.weight"), std::vector<float>(B.begin(), B.begin() + 128 * 4));
  EXPECT_EQ(st.f32(hf + "experts.3.up_proj.lora_B.weight"), std::vector<float>(B.begin() + 128 * 4, B.end()));
  EXPECT_TRUE(st.header.contains(hf + "experts.0.down_proj.lora_B.weight"));
  EXPECT_TRUE(st.header.contains(hf + "shared_expert.down_proj.lora_A.weight"));
  EXPECT_FALSE(st.header.contains(hf + "gate.lora_A.weight")) << "the router is no target";
  const auto cfg = nlohmann::json::parse(file_bytes(peft / "adapter_config.json"));
  EXPECT_EQ(cfg["target_modules"],
            nlohmann::json({"down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"}));
}

// LoRA on the MoE model (rank-4 adapters with dropout 0.1 on attention, on
// each routed expert's fc1/fc2 and on the shared expert's; base and router
// frozen):
// EP 2, and TP 2 + SP with ETP 1 and ETP 2, equal the single device for 20
// iterations; the EP 2 run's adapter checkpoint of iteration 10 (experts'
// adapters named by global index) resumes at TP 2 + SP with ETP 2 and
// continues it. Micro-batches of 2 rows everywhere (the router's token group).
TEST_F(MoeExpertParallel, LoraLayoutsAndAdapterCheckpointEqualTheSingleDevice) {
  const std::string lora =
      "--micro_batch_size 2 --lr 2e-3 --train_type lora --lora_rank 4 --lora_alpha 8 --lora_dropout 0.1 "
      "--moe_shared_expert_intermediate_size 64 --moe_shared_expert_gate";
  const RunResult ref = run(job(tmp_ / "ref", lora), "ref");
  ASSERT_EQ(ref.exit_code, 0) << ref.describe();
  // Trainable: r (in + out) per adapted linear (PEFT's count). The demo decoder: h 256, qkv 512,
  // dense FFN 688 (SwiGLU fc1 2 x 688); layers 0 and 2 MoE: 4 experts of 128, shared expert 64.
  const int64_t r = 4, attention = (256 + 512) + (256 + 256), dense = (256 + 2 * 688) + (688 + 256);
  const int64_t expert = (256 + 2 * 128) + (128 + 256), shared = (256 + 2 * 64) + (64 + 256);
  const int64_t trainable = r * (4 * attention + 2 * dense + 2 * (4 * expert + shared));
  const std::string line = " > of which trainable on (tensor, pipeline) model parallel rank (0, 0): ";
  EXPECT_NE(ref.out.find(line + std::to_string(trainable) + " ("), std::string::npos) << trainable << "\n" << ref.out;
  const std::string tp2 = " --tensor_model_parallel_size 2 --sequence_parallel --expert_tensor_parallel_size ";
  for (const Layout& l : {Layout{"ep2", 2, "--expert_model_parallel_size 2 --save_interval 10"},
                          Layout{"tp2_etp1", 2, tp2 + "1"}, Layout{"tp2_etp2", 2, tp2 + "2"}}) {
    const RunResult par = run(job(tmp_ / l.name, lora + " " + l.flags), l.name, launch_ranks(l.ranks));
    ASSERT_EQ(par.exit_code, 0) << par.describe();
    expect_equal_runs(tmp_ / "ref", tmp_ / l.name, l.name);
    if (l.name == "ep2") {  // EP rank 0 holds experts 0 and 1 of each MoE layer, and their adapters
      EXPECT_NE(par.out.find(line + std::to_string(trainable - r * 2 * 2 * expert) + " ("), std::string::npos)
          << par.out;
    }
  }
  seed_resume_dir(tmp_ / "ep2", tmp_ / "resumed");
  const RunResult resumed =
      run(concat(job(tmp_ / "resumed", lora + tp2 + "2"), {"--load", (tmp_ / "resumed").string()}), "resumed",
          launch_ranks(2));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.describe();
  expect_resumed_continues(tmp_ / "ep2", tmp_ / "resumed");
  expect_peft_export_of_experts(tmp_ / "ep2", tmp_ / "peft");
}

// --dry_run at EP 2 (world 2): the simulated rank holds its 4 of the 8
// experts (estimator formula as in test_mtrain_moe.cc with E/EP experts:
// per layer attn + router h E + (E/EP) 3 h f + norms 2 h), and the token
// dispatch's all-to-alls are priced in the micro-batch phases, on the
// report's EP line (TP 1: no other collective runs there).
TEST_F(MoeExpertParallel, DryRunDividesTheExpertsOverEp) {
  RunOptions two;
  two.env = {{"NPROC_PER_NODE", "2"}};
  const auto dry = [&](const std::string& ep) {
    return run(concat(words("sft configs/sft_demo.yaml --dry_run --num_experts 8 --moe_ffn_hidden_size 128 "
                            "--expert_model_parallel_size " +
                            ep),
                      {"--output_dir", (tmp_ / ("out" + ep)).string()}),
               "dry" + ep, two);
  };
  const RunResult r = dry("2"), one = dry("1");
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  ASSERT_EQ(one.exit_code, 0) << one.describe();
  const int64_t h = 256, attn = 2 * h * h * 3 / 2 + 512;
  const int64_t layer = attn + h * 8 + 4 * 3 * h * 128 + 2 * h;
  const int64_t total = 4 * layer + h + 2 * 1024 * h;
  EXPECT_NE(r.out.find("parameters on this device                     " + std::to_string(total)), std::string::npos)
      << "expected " << total << "\n"
      << r.out;
  // The all-to-alls on the EP line (their formula: tests/plan/test_comm_split.cc), none at EP 1.
  EXPECT_NE(r.out.find("TP communication 0.0 ms, EP communication (expert dispatch)"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("EP communication (expert dispatch) 0.0 ms"), std::string::npos) << "no all-to-all priced\n"
                                                                                        << r.out;
  EXPECT_NE(one.out.find("TP communication 0.0 ms, EP communication (expert dispatch) 0.0 ms"), std::string::npos)
      << one.out;
}

// --dry_run of EP 2 x TP 2 + SP with ETP 2 (world 4) under each dispatcher:
// the simulated rank holds its 4 experts' F/2 slices (per layer attn / 2 +
// router h E + (E/EP) 3 h f / ETP + norms 2 h; the vocabulary split over TP),
// and the plan prices its dispatch (ModelExpertParallelDryRun checks the
// buffers and the collectives' bytes).
TEST_F(MoeExpertParallel, DryRunSplitsTheExpertsOverEpAndEtp) {
  RunOptions four;
  four.env = {{"NPROC_PER_NODE", "4"}};
  const int64_t h = 256, attn = 2 * h * h * 3 / 2 + 512;
  const int64_t layer = attn / 2 + h * 8 + 4 * 3 * h * 128 / 2 + 2 * h;
  const int64_t total = 4 * layer + h + 1024 * h;
  // (The allgather dispatcher under EP needs equal micro-batch lengths: pt's fixed --seq_length.)
  for (const std::string dispatcher : {"alltoall", "allgather"}) {
    const std::string layout =
        "--dry_run --num_experts 8 --moe_ffn_hidden_size 128 --tensor_model_parallel_size 2 "
        "--sequence_parallel --expert_model_parallel_size 2 --expert_tensor_parallel_size 2 "
        "--moe_token_dispatcher_type " +
        dispatcher;
    const RunResult r =
        dispatcher == "alltoall"
            ? run(concat(words("sft configs/sft_demo.yaml " + layout), {"--output_dir", (tmp_ / dispatcher).string()}),
                  dispatcher, four)
            : run(concat(demo_pt_args(10, tmp_ / dispatcher), words(layout)), dispatcher, four);
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_NE(r.out.find("parameters on this device                     " + std::to_string(total)), std::string::npos)
        << dispatcher << ": expected " << total << "\n"
        << r.out;
    EXPECT_NE(r.out.find("The plan FITS on every device."), std::string::npos) << r.out;
  }
}

}  // namespace
}  // namespace mtrain::functional
