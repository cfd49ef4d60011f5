// `mtrain infer` without a dataset: swift infer's command-line chat. Rank 0
// reads the input after the `<<< ` prompt and shares it with the other ranks
// of the model, which then take the same steps. Commands (swift's):
//   exit, quit      end (so does the end of input)
//   clear           forget the history
//   reset-system    the next input is the new system prompt (`default-system`:
//                   the template's); the history is cleared
//   multi-line      inputs end with a line ending in `#` (prompt `<<<[M] `);
//   single-line     back to one line per input
// Each answer joins the history of the next prompt.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <istream>
#include <nlohmann/json.hpp>
#include <ostream>

#include "common/errors.h"
#include "infer/infer_internal.h"

namespace mtrain::infer {

namespace {

std::string lower_trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
  std::string t = b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
  return t;
}

struct ChatState {
  std::string system;
  std::vector<data::Message> history;  // complete rounds
  bool multiline = false;
  bool input_system = false;  // the next input is the system prompt
};

// One input as rank 0 reads it: a line, or in multi-line mode the lines up
// to one ending with `#` (dropped). nullopt at the end of input.
std::optional<std::string> read_input(const ChatState& st, std::istream& in, std::ostream& out) {
  const std::string tag = std::string(st.multiline ? "M" : "") + (st.input_system ? "S" : "");
  out << (st.multiline ? fmt::format("<<<[{}] ", tag) : tag.empty() ? "<<< " : "<<<[S] ") << std::flush;
  std::string line, text;
  if (!st.multiline) return std::getline(in, line) ? std::optional<std::string>(line) : std::nullopt;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '#') return text + line.substr(0, line.size() - 1);
    text += line + "\n";
  }
  return std::nullopt;
}

// Rank 0's next input, on every rank; nullopt at the end of input.
std::optional<std::string> next_input(InferModel& m, const ChatState& st, std::istream& in, std::ostream& out) {
  std::string shared;
  if (m.print) {
    const std::optional<std::string> text = read_input(st, in, out);
    shared = text ? "q" + *text : "e";
  }
  shared = share_text(*m.state, shared);
  if (shared == "e") return std::nullopt;
  return shared.substr(1);
}

// Applies a command (or the awaited system prompt); true when `input` was one.
bool apply_command(const std::string& input, ChatState& st, const InferModel& m) {
  if (st.input_system) {
    st.system = input == "default-system" ? data::default_system_prompt(m.chat_template) : input;
    st.input_system = false;
    st.history.clear();
    return true;
  }
  const std::string cmd = lower_trimmed(input);
  if (cmd == "clear") st.history.clear();
  if (cmd == "reset-system") st.input_system = true;
  if (cmd == "multi-line") st.multiline = true;
  if (cmd == "single-line") st.multiline = false;
  return cmd.empty() || cmd == "clear" || cmd == "reset-system" || cmd == "multi-line" || cmd == "single-line";
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
    out << "Input `exit` or `quit` to exit the conversation.\n"
           "Input `multi-line` to switch to multi-line input mode (end an input with `#`).\n"
           "Input `reset-system` to reset the system and clear the history.\n"
           "Input `clear` to clear the history.\n";
    if (o.result_path) results.open(*o.result_path, std::ios::app);
    if (o.result_path && !results)
      throw ConfigError(fmt::format("--result_path {}: cannot open for writing", *o.result_path),
                        "choose a writable file");
  }
  ChatState st;
  st.system = m.system;
  while (const std::optional<std::string> query = next_input(m, st, in, out)) {
    const std::string cmd = lower_trimmed(*query);
    if (!st.input_system && (cmd == "exit" || cmd == "quit")) break;
    if (apply_command(*query, st, m)) continue;
    const std::vector<int32_t> prompt =
        data::encode_prompt(*m.tokenizer, *query, st.system, st.history, m.chat_template);
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
    st.history.push_back({"user", *query});
    if (results.is_open()) {  // swift's record: the request's messages and the response
      results << jsonl_line({{"messages", messages_json(st.system, st.history)}, {"response", response}});
      results.flush();
    }
    st.history.push_back({"assistant", response});
  }
  return 0;
}

}  // namespace mtrain::infer
