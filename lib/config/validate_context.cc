// Context parallelism (--context_parallel_size > 1): Megatron's and
// MindSpeed's checks with their messages, and what mtrain's CP does not do
// (refused by name, before any data is read).
#include <fmt/format.h>

#include "common/errors.h"
#include "config/validate_parts.h"

namespace mtrain::config::detail {

namespace {

// MindSpeed's other algorithms: known names, not implemented here.
bool mindspeed_algo(const std::string& algo) {
  return algo == "hybrid_cp_algo" || algo == "adaptive_cp_algo" || algo == "hybrid_adaptive_cp_algo" ||
         algo == "kvallgather_cp_algo";
}

void check_algo(const Args& a) {
  const int cp = a.context_parallel_size, tp = a.tensor_model_parallel_size;
  const std::string& algo = a.context_parallel_algo;
  if (mindspeed_algo(algo))
    throw ConfigError(fmt::format("--context_parallel_algo {} is not implemented", algo),
                      "use megatron_cp_algo (ring attention) or ulysses_cp_algo (all-to-all over heads)");
  if (algo == "megatron_cp_algo" && *a.seq_length % (2 * cp) != 0)
    throw ConfigError("seq-length should be a multiple of 2 * context-parallel-size if context-parallel-size > 1.",
                      fmt::format("--seq_length {} with --context_parallel_size {}", *a.seq_length, cp));
  if (algo == "ulysses_cp_algo") {
    if (*a.seq_length % cp != 0)
      throw ConfigError("sequence length must be divisible by context_parallel_size",
                        fmt::format("--seq_length {} with --context_parallel_size {}", *a.seq_length, cp));
    if (a.num_attention_heads % (cp * tp) != 0)
      throw ConfigError("num_attention_heads must be divisible by context_parallel_size * tensor_model_parallel_size",
                        fmt::format("--num_attention_heads {} with --context_parallel_size {} and "
                                    "--tensor_model_parallel_size {}: Ulysses gives each CP rank whole heads",
                                    a.num_attention_heads, cp, tp));
    const int groups = a.group_query_attention ? a.num_query_groups : a.num_attention_heads;
    if (groups % (cp * tp) != 0)
      throw ConfigError("num_query_groups must be divisible by ulysses_size * tensor_model_parallel_size",
                        fmt::format("--num_query_groups {} with --context_parallel_size {} and "
                                    "--tensor_model_parallel_size {}: each CP rank holds whole key/value heads",
                                    groups, cp, tp));
  }
  // Each CP rank's rows must split into whole sequence-parallel shards.
  if (a.sequence_parallel && *a.seq_length % (2 * cp * tp) != 0)
    throw ConfigError(
        fmt::format("--seq_length {} must be a multiple of 2 x context_parallel_size x tensor_model_parallel_size "
                    "({}) with sequence parallelism",
                    *a.seq_length, 2 * cp * tp),
        "each CP rank's share of a sequence is split again over the TP ranks");
}

}  // namespace

void check_context_parallel(const Args& a) {
  const int cp = a.context_parallel_size;
  if (a.cp_attention_mask_type == "general" && (cp == 1 || a.context_parallel_algo != "megatron_cp_algo"))
    throw ConfigError(
        fmt::format("--cp_attention_mask_type general needs ring attention (--context_parallel_size {}, "
                    "--context_parallel_algo {})",
                    cp, a.context_parallel_algo),
        "the general mask is the ring's (megatron_cp_algo at --context_parallel_size > 1); drop the flag or "
        "use the ring");
  if (cp == 1) return;
  check_algo(a);
  if (a.attention_backend != "flash")
    throw ConfigError(fmt::format("--attention_backend {} with --context_parallel_size {}: context parallelism needs "
                                  "flash attention",
                                  a.attention_backend, cp),
                      "use --attention_backend flash (MindSpeed turns flash attention on under context parallelism); "
                      "the unfused path would materialise whole-sequence scores on every rank");
  // Dropout masks follow a token's position in the whole sequence (and an
  // attention score's query and key positions and global head), so a CP rank
  // draws its slice of the single device's masks. Ulysses numbers the scores
  // of the whole rows it gathers, padded to a multiple of 2 x CP: a row padded
  // past --seq_length would move every mask of its batch.
  if (a.attention_dropout > 0 && a.context_parallel_algo == "ulysses_cp_algo" && *a.seq_length % (2 * cp) != 0)
    throw ConfigError(
        fmt::format("--attention_dropout {} with --context_parallel_algo ulysses_cp_algo needs "
                    "--seq_length a multiple of 2 x context_parallel_size ({})",
                    a.attention_dropout, 2 * cp),
        fmt::format("--seq_length {}: rows are padded to a multiple of {}, which can run past --seq_length "
                    "and move the attention-dropout masks; or set --attention_dropout 0",
                    *a.seq_length, 2 * cp));
}

}  // namespace mtrain::config::detail
