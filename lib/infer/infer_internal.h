// Internal to `mtrain infer` (infer.h): the loaded model and its tokenizer,
// shared by the chat loop (infer_chat.cc) and batch inference (infer_dataset.cc).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/args.h"
#include "data/chat_template.h"
#include "data/tokenizer.h"
#include "device/device.h"
#include "infer/infer.h"
#include "infer/inference_session.h"
#include "model/gpt.h"
#include "parallel/parallel_state.h"
#include "train/adapters.h"

namespace mtrain::infer {

// --adapters / --merge_lora (infer_adapters.cc): one adapter and where it came from.
struct InferAdapters {
  std::string dir;
  train::ExportAdapters adapters;
};

struct InferModel {
  config::Args args;  // as a training run of this model would have them
  std::unique_ptr<parallel::ParallelState> own_state;
  parallel::ParallelState* state = nullptr;
  std::unique_ptr<device::Device> dev;
  std::unique_ptr<model::GptModel> model;
  std::optional<data::Tokenizer> tokenizer;
  data::ChatTemplate chat_template = data::ChatTemplate::kChatml;
  std::vector<int32_t> stop_ids;
  std::optional<InferAdapters> adapters;
  std::string system;  // --system, else the template's default ("" = none)
  bool print = false;  // rank 0: reads input, prints, writes results
};

// The adapter to apply (--adapters, or with --merge_lora a LoRA checkpoint's
// own), read against the model of `args` (vocab_size set), and `args` changed
// to the model it runs on: LoRA layers of the adapter's rank and scale
// (dropout off), or the plain model for merged weights. nullopt: none to
// apply. Throws UsageError for --merge_lora without adapters, CheckpointError
// (exit 5) naming the file and tensor for an adapter that does not fit.
std::optional<InferAdapters> prepare_adapters(const InferOptions& o, config::Args& args);
// Loads `model` from `base` with the adapter over it (merged when `merge`).
void load_adapted_weights(const checkpoint::WeightSource& base, const InferAdapters& a, bool merge,
                          model::GptModel& model);

// Arguments, device, model with its weights, tokenizer and template. Every
// problem is found here, before the first prompt.
InferModel load_infer_model(const InferOptions& o, const InferContext& ctx);
// swift's request config: flags, else the model's generation_config.json, else HF's defaults.
GenerationConfig infer_generation_config(const InferOptions& o, const InferModel& m);
// Rank 0's text on every rank (the world; a no-op for one process).
std::string share_text(parallel::ParallelState& state, const std::string& text);
// The bytes of `text` that end on a whole UTF-8 character: without a
// trailing incomplete multi-byte sequence or a trailing U+FFFD (what a lossy
// decoder makes of one).
size_t utf8_complete_prefix(std::string_view text);
// Text decoded as tokens arrive, never splitting a UTF-8 character.
class TextStreamer {
 public:
  explicit TextStreamer(const data::Tokenizer& t) : tok_(t) {}
  // What to print after one more token ("" while a character is incomplete).
  std::string push(int32_t token);
  // Whatever is still held back, once the answer is complete.
  std::string finish();
  const std::vector<int32_t>& tokens() const { return tokens_; }

 private:
  const data::Tokenizer& tok_;
  std::vector<int32_t> tokens_;
  size_t printed_ = 0;  // bytes of the decoded text already returned
};
// The answer text of generated tokens (special tokens dropped, trailing space trimmed).
std::string answer_text(const InferModel& m, const std::vector<int32_t>& tokens);

// One JSONL line. A sampled answer may end inside a multi-byte character (or
// be no valid UTF-8 at all): invalid bytes become U+FFFD, as HF's lossy decode does.
inline std::string jsonl_line(const nlohmann::json& record) {
  return record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}
// The chat messages of a JSONL record: the system prompt (when not empty), then `msgs`.
nlohmann::json messages_json(const std::string& system, const std::vector<data::Message>& msgs);

int run_infer_chat(const InferOptions& o, InferModel& m, std::istream& in, std::ostream& out);
int run_infer_dataset(const InferOptions& o, InferModel& m, bool tty, std::ostream& out);

}  // namespace mtrain::infer
