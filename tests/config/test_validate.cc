// Validation messages (exact text, Megatron's wording where it has one),
// derived defaults and the not-yet-implemented list.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "config/json.h"
#include "config/validate.h"
#include "config_test_util.h"

namespace mtrain::config {
namespace {

using testing::error_of;
using testing::parse_sft;
using testing::sft_with;
using testing::usage_error;

// The demo shape, set by hand (no files involved).
Args demo() {
  Args a;
  a.num_layers = 4;
  a.hidden_size = 256;
  a.num_attention_heads = 4;
  a.num_query_groups = 2;
  a.seq_length = 128;
  a.train_iters = 10;
  return a;
}

std::string fails(Args a, int world_size = 1) {
  return error_of([&] { validate(a, world_size); }, ExitCode::kConfig);
}

TEST(Validate, ParallelLayoutMessages) {
  Args tp2 = demo();
  tp2.tensor_model_parallel_size = 2;
  EXPECT_EQ(fails(tp2), "world size (1) is not divisible by total_model_size (2)");

  Args heads = demo();
  heads.num_attention_heads = 6, heads.hidden_size = 384, heads.num_query_groups = 1;
  heads.tensor_model_parallel_size = 4;
  EXPECT_EQ(fails(heads, 4), "num_attention_heads (6) must be a multiple of tensor_model_parallel_size (4).");

  Args groups = demo();
  groups.num_attention_heads = 12, groups.hidden_size = 768, groups.num_query_groups = 6;
  groups.tensor_model_parallel_size = 4;
  EXPECT_EQ(fails(groups, 4), "num_query_groups (6) must be a multiple of tensor_model_parallel_size (4).");

  Args divisor = demo();  // 2 KV groups over TP=4 would need replicated KV heads: refused
  divisor.num_attention_heads = 8, divisor.hidden_size = 512, divisor.tensor_model_parallel_size = 4;
  EXPECT_EQ(fails(divisor, 4), "num_query_groups (2) must be a multiple of tensor_model_parallel_size (4).");

  Args even = demo();
  even.num_attention_heads = 8, even.hidden_size = 512, even.num_query_groups = 4, even.ffn_hidden_size = 1376;
  even.tensor_model_parallel_size = 4;
  validate(even, 4);
  EXPECT_EQ(even.data_parallel_size, 1);

  Args layers = demo();
  layers.num_layers = 5, layers.pipeline_model_parallel_size = 2;
  EXPECT_EQ(fails(layers, 2), "Number of layers should be divisible by the pipeline-model-parallel size");
  layers.decoder_first_pipeline_num_layers = 3;  // uneven: 3 + 2
  validate(layers, 2);
  layers.decoder_first_pipeline_num_layers = 4;  // 4 + 1 on one remaining stage: fine too
  validate(layers, 2);
  layers.decoder_last_pipeline_num_layers = 2;  // 4 + 2 > 5
  EXPECT_EQ(fails(layers, 2),
            "num_layers (5) minus decoder_first_pipeline_num_layers (4) and decoder_last_pipeline_num_layers (2) "
            "must split evenly over the other 0 pipeline stages");

  Args uneven_pp1 = demo();
  uneven_pp1.decoder_last_pipeline_num_layers = 1;
  EXPECT_EQ(fails(uneven_pp1),
            "--decoder_first_pipeline_num_layers / --decoder_last_pipeline_num_layers require "
            "--pipeline_model_parallel_size > 1");

  Args cp = demo();
  cp.context_parallel_size = 2, cp.seq_length = 126;
  EXPECT_EQ(fails(cp, 2), "seq-length should be a multiple of 2 * context-parallel-size if context-parallel-size > 1.");
}

// Context parallelism: Megatron's and MindSpeed's checks and messages, and
// what mtrain's CP refuses by name.
TEST(Validate, ContextParallelMessages) {
  auto cp_args = [](int cp, const std::string& algo) {
    Args a = demo();
    a.context_parallel_size = cp, a.context_parallel_algo = algo;
    return a;
  };
  Args ring = cp_args(4, "megatron_cp_algo");
  validate(ring, 4);
  Args world = cp_args(4, "megatron_cp_algo");
  EXPECT_EQ(fails(world, 6), "world size (6) is not divisible by total_model_size (4)");
  Args seq = cp_args(4, "megatron_cp_algo");
  seq.seq_length = 36;  // a multiple of 4 but not of 8
  EXPECT_EQ(fails(seq, 4),
            "seq-length should be a multiple of 2 * context-parallel-size if context-parallel-size > 1.");
  Args uly = cp_args(2, "ulysses_cp_algo");  // demo: 4 heads, 2 query groups
  validate(uly, 2);
  Args uly_heads = cp_args(4, "ulysses_cp_algo");
  uly_heads.tensor_model_parallel_size = 2;  // 4 heads over CP x TP = 8
  EXPECT_EQ(fails(uly_heads, 8),
            "num_attention_heads must be divisible by context_parallel_size * tensor_model_parallel_size");
  Args uly_groups = cp_args(4, "ulysses_cp_algo");  // 4 heads, 2 groups
  EXPECT_EQ(fails(uly_groups, 4), "num_query_groups must be divisible by ulysses_size * tensor_model_parallel_size");
  Args uly_seq = cp_args(2, "ulysses_cp_algo");
  uly_seq.seq_length = 127;
  EXPECT_EQ(fails(uly_seq, 2), "sequence length must be divisible by context_parallel_size");
  for (const char* algo : {"hybrid_cp_algo", "adaptive_cp_algo", "kvallgather_cp_algo"}) {
    Args a = cp_args(2, algo);
    EXPECT_EQ(fails(a, 2), "--context_parallel_algo " + std::string(algo) + " is not implemented");
  }
  // MindSpeed's general mask is the ring's.
  Args general = cp_args(2, "megatron_cp_algo");
  general.cp_attention_mask_type = "general";
  validate(general, 2);
  Args uly_general = cp_args(2, "ulysses_cp_algo");
  uly_general.cp_attention_mask_type = "general";
  EXPECT_EQ(fails(uly_general, 2),
            "--cp_attention_mask_type general needs ring attention (--context_parallel_size 2, "
            "--context_parallel_algo ulysses_cp_algo)");
  Args no_cp = demo();
  no_cp.cp_attention_mask_type = "general";
  EXPECT_EQ(fails(no_cp, 1),
            "--cp_attention_mask_type general needs ring attention (--context_parallel_size 1, "
            "--context_parallel_algo megatron_cp_algo)");
  Args unfused = cp_args(2, "megatron_cp_algo");
  unfused.attention_backend = "unfused";
  EXPECT_EQ(fails(unfused, 2),
            "--attention_backend unfused with --context_parallel_size 2: context parallelism needs flash attention");
  Args dropout = cp_args(2, "megatron_cp_algo");  // hidden and LoRA dropout follow the whole-sequence position
  dropout.hidden_dropout = 0.1, dropout.train_type = "lora", dropout.lora_dropout = 0.05;
  validate(dropout, 2);
  dropout.attention_dropout = 0.1;
  validate(dropout, 2);
  Args uly_dropout = cp_args(2, "ulysses_cp_algo");
  uly_dropout.attention_dropout = 0.1, uly_dropout.seq_length = 126;  // a multiple of 2, not of 4
  EXPECT_EQ(fails(uly_dropout, 2),
            "--attention_dropout 0.1 with --context_parallel_algo ulysses_cp_algo needs --seq_length a multiple of 2 x "
            "context_parallel_size (4)");
  uly_dropout.attention_dropout = 0;
  validate(uly_dropout, 2);
  Args sp = cp_args(2, "megatron_cp_algo");
  sp.tensor_model_parallel_size = 2, sp.sequence_parallel = true, sp.seq_length = 36;
  EXPECT_EQ(fails(sp, 4),
            "--seq_length 36 must be a multiple of 2 x context_parallel_size x tensor_model_parallel_size (8) with "
            "sequence parallelism");
}

TEST(Validate, VirtualPipelineMessages) {
  Args a = demo();
  a.num_layers_per_virtual_pipeline_stage = 1;
  EXPECT_EQ(fails(a), "pipeline-model-parallel size should be greater than 1 with interleaved schedule");
  a.num_layers = 6, a.pipeline_model_parallel_size = 2, a.num_layers_per_virtual_pipeline_stage = 2;
  EXPECT_EQ(fails(a, 2),
            "number of layers per pipeline stage must be divisible number of layers per virtual pipeline stage");
  a.num_layers = 8;
  validate(a, 2);
  EXPECT_EQ(*a.virtual_pipeline_model_parallel_size, 2);
  validate(a, 2);  // idempotent
  EXPECT_EQ(*a.num_layers_per_virtual_pipeline_stage, 2);
  Args b = demo();
  b.num_layers = 7, b.pipeline_model_parallel_size = 2, b.virtual_pipeline_model_parallel_size = 2;
  EXPECT_EQ(fails(b, 2), "number of layers of the model must be divisible pipeline model parallel size");
}

TEST(Validate, BatchMessages) {
  Args a = demo();
  a.global_batch_size = 10, a.micro_batch_size = 4;
  EXPECT_EQ(fails(a), "global batch size (10) is not divisible by micro batch size (4) times data parallel size (1)");
  Args b = demo();
  b.global_batch_size = 6, b.micro_batch_size = 2;
  EXPECT_EQ(fails(b, 2), "global batch size (6) is not divisible by micro batch size (2) times data parallel size (2)");
  b.global_batch_size = 8;
  validate(b, 2);
  EXPECT_EQ(b.data_parallel_size, 2);
  EXPECT_EQ(b.num_micro_batches, 2);
  Args c = demo();
  c.micro_batch_size = 0;
  EXPECT_EQ(fails(c), "--micro_batch_size must be >= 1, got 0");
}

TEST(Validate, ModelShapeMessages) {
  Args a = demo();
  a.hidden_size = 100, a.num_attention_heads = 3, a.num_query_groups = 1;
  EXPECT_EQ(fails(a), "hidden_size (100) must be divisible by num_attention_heads (3) when kv_channels is not set");
  a.kv_channels = 32;  // explicit head dim: allowed
  validate(a, 1);
  Args g = demo();
  g.num_query_groups = 3;
  EXPECT_EQ(fails(g), "num_attention_heads (4) must be divisible by num_query_groups (3)");
  Args pos = demo();
  pos.position_embedding_type = "learned_absolute", pos.max_position_embeddings = 64;
  EXPECT_EQ(fails(pos), "max_position_embeddings (64) must be greater than or equal to seq_length (128).");
  pos.position_embedding_type = "rope";
  validate(pos, 1);
  Args missing;
  missing.train_iters = 1;
  EXPECT_EQ(fails(missing), "--num_layers is required");
  Args noseq = demo();
  noseq.seq_length.reset();
  EXPECT_EQ(fails(noseq), "--seq_length is required");
  Args longer = demo();
  longer.max_length = 256;
  EXPECT_EQ(fails(longer), "--max_length (256) must not exceed --seq_length (128)");
  Args drop = demo();
  drop.hidden_dropout = 1.0;
  EXPECT_EQ(fails(drop), "--hidden_dropout must be in [0, 1), got 1");
  drop.hidden_dropout = 0.1, drop.attention_dropout = -0.1;
  EXPECT_EQ(fails(drop), "--attention_dropout must be in [0, 1), got -0.1");
  Args odd = demo();
  odd.kv_channels = 63;
  EXPECT_EQ(fails(odd), "--kv_channels (63) must be even with rope position embeddings");
}

TEST(Validate, TrainingMessages) {
  Args both = demo();
  both.fp16 = both.bf16 = true;
  EXPECT_EQ(fails(both), "fp16 and bf16 cannot both be set");
  Args bf16_grads = demo();
  bf16_grads.grad_reduce_in_bf16 = true;  // Megatron reads it under --bf16 only
  EXPECT_EQ(fails(bf16_grads),
            "--grad_reduce_in_bf16 needs --bf16: it keeps and reduces the bf16 model's main gradients in bf16");
  bf16_grads.bf16 = true;
  EXPECT_NO_THROW(validate(bf16_grads, 1));
  Args warm = demo();
  warm.lr_warmup_iters = 2, warm.lr_warmup_fraction = 0.1;
  EXPECT_EQ(fails(warm), "can only specify one of lr-warmup-fraction and lr-warmup-iters");
  Args long_warm = demo();
  long_warm.lr_warmup_iters = 10;
  EXPECT_EQ(fails(long_warm), "--lr_warmup_iters (10) must be smaller than --lr_decay_iters (10)");
  Args lr = demo();
  lr.lr = 0.0;
  EXPECT_EQ(fails(lr), "--lr must be > 0, got 0");
  lr.lr = 1e-5, lr.min_lr = 1e-4;
  EXPECT_EQ(fails(lr), "--min_lr (0.0001) must not exceed --lr (1e-05)");
  Args iters = demo();
  iters.train_iters.reset();
  EXPECT_EQ(fails(iters), "one of --train_iters and --num_train_epochs is required");
  Args wsd = demo();
  wsd.lr_decay_style = "WSD";
  EXPECT_EQ(fails(wsd), "--lr_wsd_decay_iters is required with --lr_decay_style WSD");
  Args beta = demo();
  beta.adam_beta2 = 1.0;
  EXPECT_EQ(fails(beta), "--adam_beta2 must be in [0, 1), got 1");
}

TEST(Validate, SftDataMessages) {
  Args cap = demo();
  cap.max_malformed = -1;
  EXPECT_EQ(fails(cap), "--max_malformed must be >= 0, got -1");
  Args packed_pt = demo();
  packed_pt.command = "pt";
  packed_pt.packing = true;
  EXPECT_EQ(fails(packed_pt), "--packing applies to `mtrain sft`");
  EXPECT_EQ(usage_error(sft_with({"--template", "vicuna"})),
            "invalid value for --template: invalid choice: 'vicuna' (choose from 'chatml', 'qwen', 'llama3', "
            "'default')");
  const Args flags =
      parse_sft({"--template", "llama3", "--packing", "true", "--strict", "false", "--max_malformed", "7"});
  EXPECT_EQ(flags.template_name, "llama3");
  EXPECT_TRUE(flags.packing);
  EXPECT_FALSE(flags.strict);
  EXPECT_EQ(flags.max_malformed, 7);
}

TEST(Validate, RecomputeMessages) {
  Args a = demo();
  a.recompute_method = "uniform";
  EXPECT_EQ(fails(a), "recompute method is not yet supported for selective recomputing granularity");
  a.recompute_granularity = "full";
  a.recompute_method.reset();
  EXPECT_EQ(fails(a), "Using recompute_granularity: full so recompute_method must be \"block\" or \"uniform\"");
  a.recompute_method = "uniform";
  EXPECT_EQ(fails(a),
            "When using recompute_granularity: full recompute_num_layers must be between 1 and "
            "num_layers_per_pipeline_rank: 4");
  a.recompute_num_layers = 3;
  EXPECT_EQ(fails(a),
            "num_layers_per_pipeline_rank (4) must be divisible by recompute_num_layers (3) with recompute_method "
            "uniform");
  a.recompute_num_layers = 2;
  validate(a, 1);
  Args s = demo();
  s.recompute_num_layers = 1;
  EXPECT_EQ(fails(s), "When using recompute_granularity: selective recompute_num_layers must be None.");
  Args none = demo();
  none.recompute_granularity = "none";
  validate(none, 1);
  EXPECT_FALSE(none.recompute_granularity.has_value());
}

TEST(Validate, SequenceParallelIsDisabledWithAWarningAtTp1) {
  Args a = demo();
  a.sequence_parallel = true;
  auto warnings = validate(a, 1);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0], "Disabling sequence parallelism because tensor model parallelism is disabled");
  EXPECT_FALSE(a.sequence_parallel);
}

TEST(Validate, DerivedDefaults) {
  Args a = demo();
  a.ffn_hidden_size.reset();
  validate(a, 1);
  EXPECT_EQ(*a.ffn_hidden_size, 640);  // swiglu: int((4*256*2/3)/64)*64
  EXPECT_EQ(*a.kv_channels, 64);
  EXPECT_TRUE(a.group_query_attention);
  EXPECT_EQ(a.num_query_groups, 2);
  EXPECT_EQ(*a.max_length, 128);
  EXPECT_EQ(*a.max_position_embeddings, 128);
  EXPECT_DOUBLE_EQ(*a.lr, 1e-5);
  EXPECT_EQ(*a.loss_scale, "default");
  EXPECT_EQ(*a.lr_decay_iters, 10);
  EXPECT_EQ(a.num_micro_batches, 16);

  Args big = demo();
  big.hidden_size = 4096, big.num_attention_heads = 32, big.num_query_groups = 1;
  validate(big, 1);
  EXPECT_EQ(*big.ffn_hidden_size, 10880);
  EXPECT_FALSE(big.group_query_attention);  // MHA
  EXPECT_EQ(big.num_query_groups, 32);

  Args gelu = demo();
  gelu.swiglu = false;
  validate(gelu, 1);
  EXPECT_EQ(*gelu.ffn_hidden_size, 1024);

  Args mqa = demo();
  mqa.num_query_groups = 1, mqa.group_query_attention = true;
  validate(mqa, 1);
  EXPECT_EQ(mqa.num_query_groups, 1);

  Args from_max = demo();
  from_max.seq_length.reset(), from_max.max_length = 96;
  validate(from_max, 1);
  EXPECT_EQ(*from_max.seq_length, 96);

  Args pt = demo();
  pt.command = "pt";
  validate(pt, 1);
  EXPECT_EQ(*pt.loss_scale, "all");
}

TEST(Validate, IsIdempotent) {
  Args a = parse_sft({"--sequence_parallel", "--recompute_granularity", "none", "--attention_backend", "auto",
                      "--max_epochs", "2", "--use_flash_attn"});
  const std::string once = args_to_json(a);
  validate(a, 1);
  EXPECT_EQ(args_to_json(a), once);
}

TEST(Validate, SetTrainItersDerivesTheSchedule) {
  Args a = demo();
  a.train_iters.reset();
  a.num_train_epochs = 2;
  a.lr_warmup_iters = 30;
  validate(a, 1);
  EXPECT_FALSE(a.lr_decay_iters.has_value());
  set_train_iters(a, 100);
  EXPECT_EQ(*a.train_iters, 100);
  EXPECT_EQ(*a.lr_decay_iters, 100);
  Args b = demo();
  b.train_iters.reset(), b.num_train_epochs = 1, b.lr_warmup_iters = 30;
  validate(b, 1);
  EXPECT_EQ(error_of([&] { set_train_iters(b, 20); }, ExitCode::kConfig),
            "--lr_warmup_iters (30) must be smaller than --lr_decay_iters (20)");
}

std::string hint_of(const std::function<void()>& fn) { return testing::error_thrown(fn, ExitCode::kConfig).hint(); }

TEST(Validate, WarmupLongerThanTheScheduleNamesTheFlagAndTheFix) {
  Args from_train_iters = demo();  // train_iters 10, lr_decay_iters unset
  from_train_iters.lr_warmup_iters = 20;
  EXPECT_EQ(hint_of([&] { validate(from_train_iters, 1); }),
            "the warmup is --lr_warmup_iters (YAML key lr_warmup_iters: 20) and --lr_decay_iters defaults to "
            "--train_iters (10): pass --lr_warmup_iters N with N < 10 (--lr_warmup_iters 0: no warmup), or raise "
            "--train_iters above 20");
  Args explicit_decay = demo();
  explicit_decay.lr_warmup_iters = 8, explicit_decay.lr_decay_iters = 6;
  EXPECT_EQ(fails(explicit_decay), "--lr_warmup_iters (8) must be smaller than --lr_decay_iters (6)");
  EXPECT_EQ(hint_of([&] { validate(explicit_decay, 1); }),
            "the warmup is --lr_warmup_iters (YAML key lr_warmup_iters: 8) and --lr_decay_iters is 6: pass "
            "--lr_warmup_iters N with N < 6 (--lr_warmup_iters 0: no warmup), or raise --lr_decay_iters above 8");
}

// A job written for a long run (the demo's lr_warmup_iters: 20) shortened on the
// command line is refused as Megatron refuses it, and the fix works as the hint says.
TEST(Validate, ShortenedYamlJobWithItsWarmup) {
  testing::TempDir dir;
  const std::string job = dir.write("job.yaml", "model_preset: demo\ntrain_iters: 2400\nlr_warmup_iters: 20\n");
  const std::string hint = hint_of([&] { testing::parse({"sft", job, "--train_iters", "5"}); });
  EXPECT_NE(hint.find("--lr_warmup_iters (YAML key lr_warmup_iters: 20)"), std::string::npos) << hint;
  EXPECT_NE(hint.find("--lr_warmup_iters 0"), std::string::npos) << hint;
  const Args fixed = testing::parse({"sft", job, "--train_iters", "5", "--lr_warmup_iters", "0"}).args;
  EXPECT_EQ(fixed.lr_warmup_iters, 0);
  EXPECT_EQ(*fixed.lr_decay_iters, 5);
}

TEST(Validate, DistributedTimeoutIsAPositiveNumberOfMinutes) {
  Args a = demo();
  a.distributed_timeout_minutes = 0.05;  // 3 s: fractions are what the fault tests use
  validate(a, 1);
  for (double bad : {0.0, -1.0, std::nan(""), HUGE_VAL}) {
    Args b = demo();
    b.distributed_timeout_minutes = bad;
    EXPECT_EQ(fails(b).rfind("--distributed_timeout_minutes must be a number > 0, got ", 0), 0u) << bad;
  }
}

TEST(Validate, PaddedVocabSize) {
  EXPECT_EQ(padded_vocab_size(50257, 128, 1), 50304);
  EXPECT_EQ(padded_vocab_size(50257, 128, 2), 50432);
  EXPECT_EQ(padded_vocab_size(32000, 128, 1), 32000);
  EXPECT_EQ(padded_vocab_size(151936, 128, 4), 152064);
  EXPECT_EQ(padded_vocab_size(1, 1, 1), 1);
  EXPECT_EQ(padded_vocab_size(300, 128, 1), 384);
}

TEST(Validate, CheckpointSettings) {
  const std::vector<std::pair<std::function<void(Args&)>, std::string>> cases = {
      {[](Args& a) { a.save_interval = 0; }, "--save_interval must be >= 1, got 0"},
      {[](Args& a) { a.save_total_limit = 0; }, "--save_total_limit must be >= 1, got 0"},
      {[](Args& a) { a.ckpt_step = 10; }, "--ckpt_step needs --load"},
      {[](Args& a) { a.finetune = true; }, "--finetune needs --load (or --model)"},
      {[](Args& a) { a.save_timeout_minutes = 0; }, "--save_timeout_minutes must be > 0, got 0"},
      {[](Args& a) { a.checkpoint_dir_mode = "0777"; },
       "--checkpoint_dir_mode 0777: checkpoints must never be world-writable"},
      {[](Args& a) { a.checkpoint_file_mode = "0666"; },
       "--checkpoint_file_mode 0666: checkpoints must never be world-writable"},
      {[](Args& a) { a.checkpoint_file_mode = "rw-r-----"; },
       "--checkpoint_file_mode rw-r-----: not an octal permission mode"},
      {[](Args& a) { a.checkpoint_dir_mode = "0640"; },
       "--checkpoint_dir_mode 0640: the owner needs rwx on directories to save and load checkpoints"},
      {[](Args& a) { a.checkpoint_file_mode = "0440"; },
       "--checkpoint_file_mode 0440: the owner needs rw on files to save and load checkpoints"},
  };
  for (const auto& [set, message] : cases) {
    Args a = demo();
    set(a);
    EXPECT_EQ(fails(a), message);
  }
  Args ok = demo();
  ok.load = "ckpt";
  ok.ckpt_step = 10;
  ok.finetune = true;
  ok.checkpoint_dir_mode = "700";
  ok.checkpoint_file_mode = "0600";
  EXPECT_NO_THROW(validate(ok, 1));
}

TEST(Validate, EveryNotYetImplementedSettingIsRejected) {
  const std::vector<std::pair<std::function<void(Args&)>, std::string>> cases = {
      {[](Args& a) { a.train_type = "lora", a.merge_lora = true; },
       "--merge_lora true: merging LoRA into the base weights (--merge_lora) is not supported yet"},
      {[](Args& a) { a.position_embedding_type = "mrope"; },
       "--position_embedding_type mrope: this position embedding is not supported"},
      {[](Args& a) { a.position_embedding_type = "relative"; },
       "--position_embedding_type relative: this position embedding is not supported"},
      {[](Args& a) { a.position_embedding_type = "none"; },
       "--position_embedding_type none: this position embedding is not supported"},
      {[](Args& a) { a.attention_backend = "fused"; },
       "--attention_backend fused: the fused (cuDNN) attention backend does not exist on the simulated NPU"},
      {[](Args& a) { a.overlap_moe_expert_parallel_comm = true; },
       "--overlap_moe_expert_parallel_comm true: overlapping the expert-parallel all-to-all with compute is not "
       "modelled: the dry run's step time would not show it"},
      {[](Args& a) { a.moe_enable_deepep = true; },
       "--moe_enable_deepep true: DeepEP's dispatch kernels (the flex dispatcher) are not supported"},
  };
  for (const auto& [set, message] : cases) {
    Args a = demo();
    set(a);
    EXPECT_EQ(fails(a), message);
  }
  Args bucket = demo();
  bucket.ddp_bucket_size = 0;
  EXPECT_EQ(fails(bucket), "--ddp_bucket_size must be >= 1, got 0");
  Args cp = demo();  // a valid context-parallel layout (world 2)
  cp.context_parallel_size = 2;
  validate(cp, 2);
  Args overlap = demo();  // Megatron-LM's message
  overlap.tp_comm_overlap = true;
  EXPECT_EQ(fails(overlap),
            "--tp_comm_overlap: Tensor parallel communication/GEMM overlap can happen only when sequence "
            "parallelism is enabled");
  overlap.tp_comm_overlap = false;
  overlap.use_ascend_mc2 = true;
  EXPECT_NE(fails(overlap).find("--use_ascend_mc2: MC2"), std::string::npos);
  Args gather = demo();  // Megatron-LM's checks, in its order
  gather.overlap_param_gather = true;
  gather.use_distributed_optimizer = false;
  EXPECT_EQ(fails(gather), "--overlap-param-gather only supported with distributed optimizer");
  gather.use_distributed_optimizer = true;
  EXPECT_EQ(fails(gather), "Must use --overlap-param-gather with --overlap-grad-reduce");
  Args ok = demo();
  ok.overlap_grad_reduce = true;  // implemented
  ok.overlap_param_gather = true;
  ok.train_type = "full", ok.position_embedding_type = "learned_absolute", ok.loss_scale = "all";
  ok.attention_backend = "unfused";
  validate(ok, 1);
}

}  // namespace
}  // namespace mtrain::config
