// `mtrain infer` without a dataset: swift infer's command-line chat. Rank 0
// reads a query per line after the `<<< ` prompt and shares it with the other
// ranks of the model; `clear` forgets the history, `exit` / `quit` (or the
// end of input) ends. Each answer joins the history of the next prompt.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <istream>
#include <nlohmann/json.hpp>
#include <ostream>

#include "common/errors.h"
#include "train/infer_internal.h"

namespace mtrain::train {

namespace {

std::string lower_trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
  std::string t = b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
  return t;
}

// Rank 0's next line, on every rank; nullopt at the end of input.
std::optional<std::string> next_query(InferModel& m, std::istream& in, std::ostream& out) {
  std::string line, shared;
  if (m.print) {
    out << "<<< " << std::flush;
    shared = std::getline(in, line) ? "q" + line : "e";
  }
  shared = share_text(*m.state, shared);
  if (shared == "e") return std::nullopt;
  return shared.substr(1);
}

}  // namespace

nlohmann::json messages_json(const std::string& system, const std::vector<data::Message>& msgs) {
  nlohmann::json j = nlohmann::json::array();
  if (!system.empty()) j.push_back({{"role", "system"}, {"content", system}});
  for (const data::Message& msg : msgs) j.push_back({{"role", msg.role}, {"content", msg.content}});
  return j;
}

int run_infer_chat(const InferOptions& o, InferModel& m, std::istream& in, std::ostream& out) {
  const GenerationConfig g = infer_generation_config(o, m);
  InferenceSession session(*m.model, *m.dev, m.state);
  std::ofstream results;
  if (m.print) {
    out << "Input `exit` or `quit` to exit the conversation.\nInput `clear` to clear the history.\n";
    if (o.result_path) results.open(*o.result_path, std::ios::app);
    if (o.result_path && !results)
      throw ConfigError(fmt::format("--result_path {}: cannot open for writing", *o.result_path),
                        "choose a writable file");
  }
  std::vector<data::Message> history;  // complete rounds
  while (const std::optional<std::string> query = next_query(m, in, out)) {
    const std::string cmd = lower_trimmed(*query);
    if (cmd == "exit" || cmd == "quit") break;
    if (cmd == "clear") {
      history.clear();
      continue;
    }
    if (cmd.empty()) continue;
    const std::vector<int32_t> prompt = data::encode_prompt(*m.tokenizer, *query, m.system, history, m.chat_template);
    // Every rank sees the same prompt: all skip it alike.
    if (static_cast<int64_t>(prompt.size()) >= m.model->config().seq_length) {
      if (m.print)
        out << fmt::format(
                   "mtrain: the conversation has {} tokens, the model's seq_length is {}; `clear` forgets "
                   "the history\n",
                   prompt.size(), m.model->config().seq_length)
            << std::flush;
      continue;
    }
    TextStreamer streamer(*m.tokenizer);
    const auto on_token = [&](int32_t t) {
      if (m.print && o.stream) out << streamer.push(t) << std::flush;
    };
    const std::string response = answer_text(m, session.generate(prompt, g, on_token));
    if (m.print) out << (o.stream ? streamer.finish() : response) << "\n" << std::flush;
    history.push_back({"user", *query});
    if (results.is_open()) {  // swift's record: the request's messages and the response
      results << jsonl_line({{"messages", messages_json(m.system, history)}, {"response", response}});
      results.flush();
    }
    history.push_back({"assistant", response});
  }
  return 0;
}

}  // namespace mtrain::train
