// `mtrain infer --val_dataset FILE... | --load_data_args true`: batch
// inference. Each record's last assistant message is the reference (swift's
// "labels"); the messages before it are the request, rendered with the chat
// template exactly as for training. Rank 0 appends one JSONL line per record
// to --result_path as it is answered (nothing is lost on an interrupt).
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <ostream>

#include "common/errors.h"
#include "data/loader.h"
#include "data/sft.h"
#include "data/sft_files.h"
#include "infer/infer_internal.h"

namespace mtrain::infer {

namespace {

struct InferRow {
  std::string system;                  // the record's, else the template's default
  std::vector<data::Message> history;  // complete rounds before the last query
  std::string query, reference;
  std::vector<int32_t> prompt;  // the request as the model sees it
};

// The request and reference of a conversation ending with an assistant answer.
InferRow row_of(const data::Conversation& c, const std::string& default_system) {
  InferRow r;
  r.system = default_system;
  std::vector<data::Message> msgs;
  for (const data::Message& msg : c.messages) {
    if (msg.role == "system") {
      r.system = msg.content;
    } else {
      msgs.push_back(msg);
    }
  }
  if (msgs.size() < 2 || msgs.back().role != "assistant" || msgs[msgs.size() - 2].role != "user")
    throw DataError(fmt::format("{}: the record does not end with a user query and its answer", c.origin),
                    "batch inference answers each record's last query and compares with its last answer");
  r.reference = msgs.back().content;
  r.query = msgs[msgs.size() - 2].content;
  r.history.assign(msgs.begin(), msgs.end() - 2);
  return r;
}

// The training run's validation conversations (--load_data_args): its
// --val_dataset, or the records its --split_dataset_ratio held out (the same
// records: samples dropped as too long are left out before the split, as in training).
std::vector<data::Conversation> training_val_conversations(const InferModel& m) {
  const config::Args& a = m.args;
  const data::SftReadOptions ro{a.strict, a.max_malformed};
  data::SftRecords stats;
  if (!a.val_dataset.empty())
    return data::read_sft_datasets(a.val_dataset, ro, static_cast<uint64_t>(a.data_seed), 1000, stats);
  if (!(a.split_dataset_ratio > 0) || a.dataset.empty())
    throw ConfigError(fmt::format("--load_data_args: the training run in {} had no validation data", *a.load),
                      "pass --val_dataset FILE instead");
  std::vector<data::Conversation> all =
      data::read_sft_datasets(a.dataset, ro, static_cast<uint64_t>(a.data_seed), 0, stats);
  data::SftOptions so;
  so.chat_template = m.chat_template;
  so.loss_scale = data::loss_scale_from_name(a.loss_scale.value_or("default")).value();
  so.max_length = a.max_length.value_or(a.seq_length.value());
  so.truncation = data::truncation_strategy_from_name(a.truncation_strategy).value();
  std::vector<data::Sample> kept;  // one per conversation training kept; tokens[0] = its index
  for (size_t i = 0; i < all.size(); ++i)
    if (!data::build_sft_dataset({all[i]}, *m.tokenizer, so, all[i].origin).samples.empty())
      kept.push_back(data::Sample{{static_cast<int32_t>(i)}, {0}});
  std::vector<data::Conversation> val;
  for (const data::Sample& s : data::split_train_val(std::move(kept), a.split_dataset_ratio, a.data_seed).val)
    val.push_back(all[static_cast<size_t>(s.tokens[0])]);
  return val;
}

// swift's default: <checkpoint dir or "result">/infer_result/<YYYYmmdd-HHMMSS>.jsonl.
std::string default_result_path(const InferOptions& o) {
  const std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&now));
  return fmt::format("{}/infer_result/{}.jsonl", o.load.value_or("result"), stamp);
}

std::ofstream open_results(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  std::ofstream f(path, std::ios::app);
  if (ec || !f)
    throw ConfigError(fmt::format("--result_path {}: cannot open for writing", path), "choose a writable file");
  return f;
}

}  // namespace

int run_infer_dataset(const InferOptions& o, InferModel& m, bool tty, std::ostream& out) {
  std::vector<data::Conversation> conv;
  if (o.load_data_args) {
    conv = training_val_conversations(m);
  } else {
    data::SftRecords stats;
    conv = data::read_sft_datasets(o.val_dataset, {true, 0}, static_cast<uint64_t>(m.args.data_seed), 1000, stats);
  }
  std::vector<InferRow> rows;
  for (const data::Conversation& c : conv) {
    InferRow& r = rows.emplace_back(row_of(c, m.system));
    r.prompt = data::encode_prompt(*m.tokenizer, r.query, r.system, r.history, m.chat_template);
    const size_t n = r.prompt.size();
    if (static_cast<int64_t>(n) >= m.model->config().seq_length)  // found before the first answer
      throw DataError(fmt::format("{}: the request has {} tokens, the model's seq_length is {}", c.origin, n,
                                  m.model->config().seq_length),
                      "leave the record out (path#N samples records) or use a model with a longer context");
  }
  const std::string path = o.result_path.value_or(default_result_path(o));
  std::ofstream results;
  if (m.print) results = open_results(path);
  const GenerationConfig g = infer_generation_config(o, m);
  InferenceSession session(*m.model, *m.dev, m.state);
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < rows.size(); ++i) {
    const InferRow& r = rows[i];
    // --stream: each answer is printed as it is decoded (swift's infer_single).
    TextStreamer streamer(*m.tokenizer);
    const auto on_token = [&](int32_t t) {
      if (m.print && o.stream) out << streamer.push(t) << std::flush;
    };
    const std::string response = answer_text(m, session.generate(r.prompt, g, on_token));
    if (m.print && o.stream) out << streamer.finish() << "\n";
    if (!m.print) continue;
    std::vector<data::Message> request = r.history;
    request.push_back({"user", r.query});
    results << jsonl_line(
        {{"messages", messages_json(r.system, request)}, {"labels", r.reference}, {"response", response}});
    results.flush();
    if (tty) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      out << fmt::format("\rinfer: {}/{} records, {:.1f} s", i + 1, rows.size(), s) << std::flush;
    }
  }
  if (m.print) {
    if (tty) out << "\n";
    out << fmt::format(" > {} responses written to {}\n", rows.size(), path) << std::flush;
  }
  return 0;
}

}  // namespace mtrain::infer
