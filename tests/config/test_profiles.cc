// Device profiles and model presets in configs/.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "config/profiles.h"
#include "config/validate.h"
#include "config_test_util.h"

namespace mtrain::config {
namespace {

using testing::error_of;
using testing::parse;
using testing::TempDir;

TEST(DeviceProfiles, AscendProfilesCarryTheReferenceNumbers) {
  DeviceProfileSpec b3 = load_device_profile("Ascend910B3");
  EXPECT_EQ(b3.name, "Ascend910B3");
  EXPECT_EQ(b3.hbm_bytes, 64LL << 30);
  EXPECT_DOUBLE_EQ(b3.peak_tflops_16bit, 294.9);
  EXPECT_DOUBLE_EQ(b3.peak_tflops_fp32, 73.7);
  EXPECT_DOUBLE_EQ(b3.hbm_gbps, 1600);
  // 56 GB/s per NPU pair, bidirectional: 28 per link and direction, a link to each other NPU.
  EXPECT_DOUBLE_EQ(b3.intra_node_link_gbps, 28);
  EXPECT_EQ(b3.intra_node_topology, device::IntraNodeTopology::kFullMesh);
  EXPECT_DOUBLE_EQ(b3.inter_node_link_gbps, 25);
  EXPECT_EQ(b3.devices_per_node, 8);
  EXPECT_EQ(b3.allocator_block_bytes, 2LL << 20);
  DeviceProfileSpec b2 = load_device_profile("Ascend910B2");
  EXPECT_DOUBLE_EQ(b2.peak_tflops_16bit, 353.8);
  EXPECT_EQ(b2.hbm_bytes, 64LL << 30);
  DeviceProfileSpec b4 = load_device_profile("Ascend910B4");
  EXPECT_EQ(b4.hbm_bytes, 32LL << 30);
  EXPECT_DOUBLE_EQ(b4.peak_tflops_16bit, 245.7);
  EXPECT_DOUBLE_EQ(b4.hbm_gbps, 800);
  EXPECT_EQ(load_device_profile("tiny_test").hbm_bytes, 64LL << 20);
  // Names are case-insensitive; the profile keeps its file's spelling.
  for (const auto& [spelled, name] : std::vector<std::pair<std::string, std::string>>{
           {"ascend910b3", "Ascend910B3"}, {"ASCEND910B3", "Ascend910B3"}, {"a100-sxm-80gb", "A100-SXM-80GB"}})
    EXPECT_EQ(load_device_profile(spelled).name, name) << spelled;
  EXPECT_EQ(load_device_profile("ascend910b3").hbm_bytes, b3.hbm_bytes);
}

TEST(DeviceProfiles, ErrorsNameTheProblem) {
  EXPECT_EQ(error_of([] { load_device_profile("Ascend910B5"); }, ExitCode::kConfig),
            "unknown device profile 'Ascend910B5'; did you mean 'Ascend910B2'?");
  // The suggestion ignores case as the names do, and keeps the file's spelling.
  EXPECT_EQ(error_of([] { load_device_profile("ascend910b"); }, ExitCode::kConfig),
            "unknown device profile 'ascend910b'; did you mean 'Ascend910B2'?");
  EXPECT_EQ(error_of([] { load_device_profile("h100-sxm"); }, ExitCode::kConfig),
            "unknown device profile 'h100-sxm'; did you mean 'H100-SXM-80GB'?");
  TempDir dir;
  std::string p = dir.write("dev.yaml", "hbm_gib: 1\npeak_tflops_16bit: 1\npeak_tflops_fp32: 1\nhbm_gbs: 1\n");
  EXPECT_EQ(error_of([&] { load_device_profile(p); }, ExitCode::kConfig),
            p + ":4:1: unknown device profile key 'hbm_gbs'; did you mean 'hbm_gbps'?");
  std::string q = dir.write("dev2.yaml", "hbm_gib: lots\n");
  EXPECT_EQ(error_of([&] { load_device_profile(q); }, ExitCode::kConfig),
            q + ":1:10: key 'hbm_gib': got 'lots' but expected an integer");
  std::string r = dir.write("dev3.yaml", "hbm_mib: 64\npeak_tflops_16bit: 1\npeak_tflops_fp32: 1\nhbm_gbps: 2\n");
  EXPECT_EQ(load_device_profile(r).hbm_bytes, 64LL << 20);
  EXPECT_EQ(load_device_profile(r).name, "dev3");
  // No topology key: the conservative ring over one link.
  EXPECT_EQ(load_device_profile(r).intra_node_topology, device::IntraNodeTopology::kRing);
  std::string t = dir.write("dev4.yaml", "hbm_gib: 1\nintra_node_topology: torus\n");
  EXPECT_EQ(error_of([&] { load_device_profile(t); }, ExitCode::kConfig),
            t + ":2:22: key 'intra_node_topology': got 'torus' but expected ring, full_mesh or switch");
  EXPECT_EQ(testing::config_error(testing::sft_with({"--device_profile", "Ascend910"})),
            "--device_profile Ascend910: unknown device profile 'Ascend910'; did you mean 'Ascend910B2'?");
}

TEST(DeviceProfiles, AscendHostCpuAndCostConstants) {
  const DeviceProfileSpec b3 = load_device_profile("Ascend910B3");
  EXPECT_EQ(b3.chip_name, "910B3");
  EXPECT_EQ(b3.intra_node_link, "HCCS");
  EXPECT_EQ(b3.cpu_cores_per_node, 192);
  // `npu-smi info -t topo` of an 8 x 910B node (ms-swift's NPU docs).
  const std::vector<device::CoreRange> topo = {{144, 167}, {144, 167}, {96, 119}, {96, 119},
                                               {0, 23},    {0, 23},    {48, 71},  {48, 71}};
  EXPECT_EQ(b3.cpu_affinity, topo);
  // The cost constants as the profile cites them (limulidae's 910B measurements, read as its scripts measure).
  EXPECT_DOUBLE_EQ(b3.cost.compute_efficiency, 0.927);
  EXPECT_DOUBLE_EQ(b3.cost.memory_efficiency, 0.8);
  EXPECT_DOUBLE_EQ(b3.cost.intra_link_efficiency, 0.66);
  EXPECT_EQ(b3.compute_units, 20);
  EXPECT_EQ(load_device_profile("Ascend910B2").compute_units, 24);
  EXPECT_DOUBLE_EQ(b3.cost.inter_link_efficiency, 0.9);
  EXPECT_DOUBLE_EQ(b3.cost.launch_overhead_s, 5e-6);
  EXPECT_DOUBLE_EQ(b3.cost.comm_latency_s, 10e-6);
  // A profile without a cost: key gets the documented defaults.
  const DeviceProfileSpec tiny = load_device_profile("tiny_test");
  EXPECT_DOUBLE_EQ(tiny.cost.memory_efficiency, 0.4);
  EXPECT_DOUBLE_EQ(tiny.cost.launch_overhead_s, 5e-6);
  EXPECT_TRUE(tiny.cpu_affinity.empty());
}

// The host's time per op follows the run's TASK_QUEUE_ENABLE (torch_npu's
// task queue levels; unset: level 1, its default).
TEST(DeviceProfiles, AscendHostDispatchFollowsTaskQueueEnable) {
  DeviceProfileSpec b3 = load_device_profile("Ascend910B3");
  const std::vector<double> levels = b3.cost.host_dispatch_by_task_queue_s;
  ASSERT_EQ(levels.size(), 3u);
  apply_task_queue(b3, nullptr);
  EXPECT_EQ(b3.task_queue_enable, 1);
  EXPECT_DOUBLE_EQ(b3.cost.host_dispatch_s, levels[1]);
  apply_task_queue(b3, "0");
  EXPECT_EQ(b3.task_queue_enable, 0);
  EXPECT_DOUBLE_EQ(b3.cost.host_dispatch_s, levels[0]);
  apply_task_queue(b3, "2");
  EXPECT_DOUBLE_EQ(b3.cost.host_dispatch_s, levels[2]);
  EXPECT_GT(levels[0], levels[1]);  // level 1 pipelines the two dispatch stages level 0 runs in turn
  try {
    apply_task_queue(b3, "3");
    FAIL() << "TASK_QUEUE_ENABLE=3 accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("TASK_QUEUE_ENABLE=3"), std::string::npos) << e.what();
  }
  // A GPU profile has no such knob: its host time per op is fixed, the variable ignored.
  DeviceProfileSpec h100 = load_device_profile("H100-SXM-80GB");
  apply_task_queue(h100, "0");
  EXPECT_EQ(h100.task_queue_enable, -1);
  EXPECT_DOUBLE_EQ(h100.cost.host_dispatch_s, 9.4e-6);
}

TEST(DeviceProfiles, GpuProfilesCarryTheDatasheetNumbers) {
  const DeviceProfileSpec a100 = load_device_profile("A100-SXM-80GB");
  EXPECT_EQ(a100.hbm_bytes, 80LL << 30);
  EXPECT_DOUBLE_EQ(a100.peak_tflops_16bit, 312);
  EXPECT_DOUBLE_EQ(a100.hbm_gbps, 2039);
  EXPECT_DOUBLE_EQ(a100.intra_node_link_gbps, 300);
  EXPECT_DOUBLE_EQ(a100.inter_node_link_gbps, 25);
  EXPECT_EQ(a100.intra_node_link, "NV12");
  EXPECT_EQ(a100.intra_node_topology, device::IntraNodeTopology::kSwitch);
  EXPECT_EQ(a100.devices_per_node, 8);
  EXPECT_DOUBLE_EQ(a100.cost.memory_efficiency, 0.88);
  // The shape model: 108 SMs, cuBLAS's 256 x 128 tile, FlashAttention-2's rates, the MAMF GEMM ceiling.
  EXPECT_EQ(a100.compute_units, 108);
  EXPECT_EQ(a100.gemm_tile_m, 256);
  EXPECT_EQ(a100.gemm_tile_n, 128);
  EXPECT_DOUBLE_EQ(a100.cost.compute_efficiency, 0.869);
  EXPECT_DOUBLE_EQ(a100.cost.flash_forward_efficiency, 0.73);
  EXPECT_DOUBLE_EQ(a100.cost.flash_backward_efficiency, 0.63);
  EXPECT_EQ(a100.tp_overlap_units, 24);
  const DeviceProfileSpec h100 = load_device_profile("H100-SXM-80GB");
  EXPECT_EQ(h100.hbm_bytes, 80LL << 30);
  EXPECT_DOUBLE_EQ(h100.peak_tflops_16bit, 989);
  EXPECT_DOUBLE_EQ(h100.hbm_gbps, 3350);
  EXPECT_DOUBLE_EQ(h100.intra_node_link_gbps, 450);
  EXPECT_EQ(h100.intra_node_topology, device::IntraNodeTopology::kSwitch);
  EXPECT_DOUBLE_EQ(h100.inter_node_link_gbps, 50);
  EXPECT_EQ(h100.chip_name, "H100-SXM5-80GB");
}

TEST(DeviceProfiles, CostAndAffinityKeysAreChecked) {
  TempDir dir;
  const std::string base = "hbm_gib: 1\npeak_tflops_16bit: 1\npeak_tflops_fp32: 1\nhbm_gbps: 1\n";
  const std::string ok =
      dir.write("ok.yaml", base +
                               "cost:\n  compute_efficiency: 0.5\n  launch_overhead_us: 7\ncpu_cores_per_node: 4\n"
                               "devices_per_node: 2\ncpu_affinity: [0-1, 2-3]\n");
  const DeviceProfileSpec p = load_device_profile(ok);
  EXPECT_DOUBLE_EQ(p.cost.compute_efficiency, 0.5);
  EXPECT_DOUBLE_EQ(p.cost.launch_overhead_s, 7e-6);
  EXPECT_DOUBLE_EQ(p.cost.memory_efficiency, 0.4);  // not given: the default
  EXPECT_EQ(p.cpu_affinity, (std::vector<device::CoreRange>{{0, 1}, {2, 3}}));
  const std::string typo = dir.write("typo.yaml", base + "cost:\n  memory_eficiency: 0.5\n");
  EXPECT_EQ(error_of([&] { load_device_profile(typo); }, ExitCode::kConfig),
            typo + ":6:3: unknown device profile key 'cost.memory_eficiency'; did you mean 'cost.memory_efficiency'?");
  const std::string range = dir.write("range.yaml", base + "devices_per_node: 1\ncpu_affinity: [5-2]\n");
  EXPECT_EQ(error_of([&] { load_device_profile(range); }, ExitCode::kConfig),
            range + ":6:16: cpu_affinity: '5-2' is not a core range first-last");
  const std::string count = dir.write("count.yaml", base + "cpu_affinity: [0-1]\n");
  EXPECT_EQ(error_of([&] { load_device_profile(count); }, ExitCode::kConfig),
            count + ": cpu_affinity lists 1 ranges for 8 devices_per_node");
}

TEST(DeviceProfiles, ShapeModelKeysAreChecked) {
  TempDir dir;
  const std::string base = "hbm_gib: 1\npeak_tflops_16bit: 1\npeak_tflops_fp32: 1\nhbm_gbps: 1\n";
  const std::string ok = dir.write("ok.yaml", base +
                                                  "compute_units: 4\ngemm_tile_m: 64\ngemm_tile_n: 32\n"
                                                  "all_gather_bus_gbps: [[2, 19], [8, 130]]\n"
                                                  "cost:\n  flash_forward_efficiency: 0.5\n");
  const DeviceProfileSpec p = load_device_profile(ok);
  EXPECT_EQ(p.compute_units, 4);
  EXPECT_EQ(p.gemm_tile_m, 64);
  EXPECT_EQ(p.gemm_tile_n, 32);
  EXPECT_EQ(p.all_gather_bus_gbps, (std::vector<device::BusBandwidth>{{2, 19}, {8, 130}}));
  EXPECT_TRUE(p.all_reduce_bus_gbps.empty());
  EXPECT_DOUBLE_EQ(p.cost.flash_forward_efficiency, 0.5);
  EXPECT_DOUBLE_EQ(p.cost.flash_backward_efficiency, 0.0);  // not given: as compute_efficiency
  const std::string falling = dir.write("falling.yaml", base + "all_reduce_bus_gbps: [[8, 72], [2, 18]]\n");
  EXPECT_EQ(error_of([&] { load_device_profile(falling); }, ExitCode::kConfig),
            falling + ":5:32: all_reduce_bus_gbps: group sizes must rise");
  const std::string pair = dir.write("pair.yaml", base + "all_gather_bus_gbps: [38]\n");
  EXPECT_EQ(error_of([&] { load_device_profile(pair); }, ExitCode::kConfig),
            pair + ":5:23: all_gather_bus_gbps: expected a [group size, GB/s] pair");
}

// What the device holds beside the tensors, each part from the profile's
// cited source (configs/devices/*.yaml runtime:).
TEST(DeviceProfiles, RuntimeMemoryOfTheShippedProfiles) {
  const DeviceProfileSpec b3 = load_device_profile("Ascend910B3");
  EXPECT_EQ(b3.runtime.library, device::CollectiveLibrary::kHccl);
  // CANN: each communicator takes 2 x HCCL_BUFFSIZE, 200 MB by default; a group of one rank has none.
  EXPECT_EQ(b3.runtime.communicator_bytes(8), 2 * (200LL << 20));
  EXPECT_EQ(b3.runtime.communicator_bytes(2), 2 * (200LL << 20));
  EXPECT_EQ(b3.runtime.communicator_bytes(1), 0);
  EXPECT_EQ(b3.runtime.device_reserved_bytes, 3380LL << 20);
  EXPECT_EQ(b3.runtime.context_bytes, 199LL << 20);
  const DeviceProfileSpec a100 = load_device_profile("A100-SXM-80GB");
  EXPECT_EQ(a100.runtime.library, device::CollectiveLibrary::kNccl);
  EXPECT_EQ(a100.runtime.context_bytes, 287047680);            // PyTorch PR #86509, lazy module loading
  EXPECT_EQ(a100.runtime.communicator_bytes(2), 544LL << 20);  // NVIDIA/nccl #964
  EXPECT_EQ(a100.runtime.communicator_bytes(4), 688LL << 20);
  EXPECT_EQ(a100.runtime.workspace_bytes, 8519680 + (1 << 20));  // cuBLAS 4096*1024*2 + 16*1024*8, cuBLASLt 1 MiB
  const DeviceProfileSpec h100 = load_device_profile("H100-SXM-80GB");
  EXPECT_EQ(h100.runtime.workspace_bytes, (32 << 20) + (1 << 20));  // Hopper: 4096*8*1024
  for (const auto* p : {&b3, &a100, &h100}) {
    EXPECT_DOUBLE_EQ(p->runtime.fragmentation, 0.025) << p->name;
    EXPECT_DOUBLE_EQ(p->runtime.memory_margin, 0.05) << p->name;
  }
  // The test device holds nothing beside its tensors.
  const DeviceProfileSpec tiny = load_device_profile("tiny_test");
  EXPECT_EQ(tiny.runtime.library, device::CollectiveLibrary::kNone);
  EXPECT_EQ(tiny.runtime.communicator_bytes(8), 0);
}

TEST(DeviceProfiles, HcclBuffsizeComesFromTheEnvironment) {
  DeviceProfileSpec b3 = load_device_profile("Ascend910B3");
  apply_hccl_buffsize(b3, "400");  // MindSpeed-LLM's DeepSeek-V3 scripts export HCCL_BUFFSIZE=400
  EXPECT_EQ(b3.runtime.communicator_bytes(4), 2 * (400LL << 20));
  apply_hccl_buffsize(b3, "");
  EXPECT_EQ(b3.runtime.hccl_buffsize_bytes, 400LL << 20);  // unset: unchanged
  for (const char* bad : {"0", "-5", "2e3", "200MB", "99999999"}) {
    try {
      apply_hccl_buffsize(b3, bad);
      ADD_FAILURE() << "HCCL_BUFFSIZE=" << bad << " accepted";
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()),
                std::string("HCCL_BUFFSIZE=") + bad + ": expected a whole number of MB, at least 1");
    }
  }
  // A GPU's NCCL has no such variable: ignored.
  DeviceProfileSpec h100 = load_device_profile("H100-SXM-80GB");
  apply_hccl_buffsize(h100, "abc");
  EXPECT_EQ(h100.runtime.communicator_bytes(8), 976LL << 20);
}

TEST(DeviceProfiles, RuntimeKeysAreChecked) {
  TempDir dir;
  const std::string base = "hbm_gib: 1\npeak_tflops_16bit: 1\npeak_tflops_fp32: 1\nhbm_gbps: 1\n";
  const std::string ok = dir.write("ok.yaml", base +
                                                  "runtime:\n  context_mib: 1.5\n  collective_library: nccl\n"
                                                  "  nccl_pair_mib: 3\n  nccl_group_mib: 4\n  fragmentation: 0.1\n");
  const DeviceProfileSpec p = load_device_profile(ok);
  EXPECT_EQ(p.runtime.context_bytes, 3 << 19);
  EXPECT_EQ(p.runtime.communicator_bytes(2), 3 << 20);
  EXPECT_EQ(p.runtime.communicator_bytes(3), 4 << 20);
  EXPECT_DOUBLE_EQ(p.runtime.fragmentation, 0.1);
  const std::string lib = dir.write("lib.yaml", base + "runtime:\n  collective_library: mpi\n");
  EXPECT_EQ(error_of([&] { load_device_profile(lib); }, ExitCode::kConfig),
            lib + ":6:23: key 'runtime.collective_library': got 'mpi' but expected none, hccl or nccl");
  const std::string share = dir.write("share.yaml", base + "runtime:\n  fragmentation: 1.5\n");
  EXPECT_EQ(error_of([&] { load_device_profile(share); }, ExitCode::kConfig),
            share + ":6:18: runtime.fragmentation must be a share in [0, 1)");
  const std::string typo = dir.write("typo.yaml", base + "runtime:\n  context_mb: 1\n");
  EXPECT_EQ(error_of([&] { load_device_profile(typo); }, ExitCode::kConfig),
            typo + ":6:3: unknown device profile key 'runtime.context_mb'; did you mean 'runtime.context_mib'?");
}

Args preset(const std::string& name) { return parse({"sft", "--model_preset", name, "--train_iters", "1"}).args; }

TEST(ModelPresets, DemoIsATinyQwenStyleModel) {
  Args a = preset("demo");
  EXPECT_EQ(a.num_layers, 4);
  EXPECT_EQ(a.hidden_size, 256);
  EXPECT_EQ(a.num_attention_heads, 4);
  EXPECT_EQ(a.num_query_groups, 2);
  EXPECT_TRUE(a.group_query_attention);
  EXPECT_EQ(*a.ffn_hidden_size, 688);
  EXPECT_EQ(*a.seq_length, 128);
  EXPECT_EQ(*a.max_position_embeddings, 128);
  EXPECT_EQ(a.normalization, "RMSNorm");
  EXPECT_TRUE(a.swiglu);
  EXPECT_EQ(a.position_embedding_type, "rope");
  EXPECT_TRUE(a.add_qkv_bias);
  EXPECT_FALSE(a.add_bias_linear);
  EXPECT_TRUE(a.untie_embeddings_and_output_weights);
}

TEST(ModelPresets, Gpt2SmallShape) {
  Args a = preset("gpt2-124m");
  EXPECT_EQ(a.num_layers, 12);
  EXPECT_EQ(a.hidden_size, 768);
  EXPECT_EQ(a.num_attention_heads, 12);
  EXPECT_EQ(a.num_query_groups, 12);
  EXPECT_FALSE(a.group_query_attention);
  EXPECT_EQ(*a.ffn_hidden_size, 3072);
  EXPECT_EQ(a.normalization, "LayerNorm");
  EXPECT_FALSE(a.swiglu);
  EXPECT_EQ(a.position_embedding_type, "learned_absolute");
  EXPECT_FALSE(a.untie_embeddings_and_output_weights);
  EXPECT_TRUE(a.add_bias_linear);
  EXPECT_EQ(*a.seq_length, 1024);
  EXPECT_EQ(padded_vocab_size(*a.vocab_size, a.make_vocab_size_divisible_by, a.tensor_model_parallel_size), 50304);
}

TEST(ModelPresets, PublishedLlamaAndQwenShapes) {
  Args llama = preset("llama2-7b");
  EXPECT_EQ(llama.num_layers, 32);
  EXPECT_EQ(llama.hidden_size, 4096);
  EXPECT_EQ(*llama.ffn_hidden_size, 11008);
  EXPECT_EQ(llama.num_query_groups, 32);
  EXPECT_EQ(*llama.kv_channels, 128);
  EXPECT_EQ(*llama.vocab_size, 32000);
  EXPECT_EQ(*llama.seq_length, 4096);
  EXPECT_FALSE(llama.add_qkv_bias);
  EXPECT_DOUBLE_EQ(llama.norm_epsilon, 1e-5);

  Args q05 = preset("qwen2.5-0.5b");
  EXPECT_EQ(q05.num_layers, 24);
  EXPECT_EQ(q05.hidden_size, 896);
  EXPECT_EQ(q05.num_attention_heads, 14);
  EXPECT_EQ(q05.num_query_groups, 2);
  EXPECT_EQ(*q05.kv_channels, 64);
  EXPECT_EQ(*q05.ffn_hidden_size, 4864);
  EXPECT_FALSE(q05.untie_embeddings_and_output_weights);
  EXPECT_DOUBLE_EQ(q05.rotary_base, 1e6);
  EXPECT_DOUBLE_EQ(q05.norm_epsilon, 1e-6);
  EXPECT_EQ(*q05.vocab_size, 151936);

  Args q7 = preset("qwen2.5-7b");
  EXPECT_EQ(q7.num_layers, 28);
  EXPECT_EQ(q7.hidden_size, 3584);
  EXPECT_EQ(q7.num_query_groups, 4);
  EXPECT_EQ(*q7.kv_channels, 128);
  EXPECT_EQ(*q7.ffn_hidden_size, 18944);
  EXPECT_TRUE(q7.untie_embeddings_and_output_weights);
  EXPECT_TRUE(q7.add_qkv_bias);
  EXPECT_EQ(*q7.max_position_embeddings, 32768);
  EXPECT_EQ(
      *parse({"sft", "--model_preset", "qwen2.5-7b", "--train_iters", "1", "--max_length", "2048"}).args.seq_length,
      2048);

  // Qwen/Qwen3-8B's config.json: head_dim 128 with 32 heads (= hidden 4096 here), q/k RMSNorm, no biases.
  Args q3 = preset("qwen3-8b");
  EXPECT_EQ(q3.num_layers, 36);
  EXPECT_EQ(q3.hidden_size, 4096);
  EXPECT_EQ(q3.num_attention_heads, 32);
  EXPECT_EQ(q3.num_query_groups, 8);
  EXPECT_EQ(*q3.kv_channels, 128);
  EXPECT_EQ(*q3.ffn_hidden_size, 12288);
  EXPECT_TRUE(q3.qk_layernorm);
  EXPECT_FALSE(q3.add_qkv_bias);
  EXPECT_TRUE(q3.untie_embeddings_and_output_weights);
  EXPECT_EQ(*q3.max_position_embeddings, 40960);
  EXPECT_DOUBLE_EQ(q3.rotary_base, 1e6);
  EXPECT_DOUBLE_EQ(q3.norm_epsilon, 1e-6);
  EXPECT_EQ(*q3.vocab_size, 151936);
}

TEST(ConfigDir, EnvironmentOverridesTheCompiledInDirectory) {
  TempDir dir;
  dir.write("models/mine.yaml", "num_layers: 1\nhidden_size: 64\nnum_attention_heads: 2\nseq_length: 16\n");
  dir.write("devices/Ascend910B3.yaml", "hbm_gib: 1\npeak_tflops_16bit: 1\npeak_tflops_fp32: 1\nhbm_gbps: 1\n");
  ::setenv("MTRAIN_CONFIG_DIR", dir.path().c_str(), 1);
  EXPECT_EQ(find_config_dir(), dir.path());
  EXPECT_EQ(preset("mine").hidden_size, 64);
  EXPECT_EQ(load_device_profile("Ascend910B3").hbm_bytes, 1LL << 30);
  ::unsetenv("MTRAIN_CONFIG_DIR");
  EXPECT_EQ(find_config_dir(), std::string(MTRAIN_SOURCE_DIR) + "/configs");
}

}  // namespace
}  // namespace mtrain::config
