#include "data/tokenizer_command.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/errors.h"
#include "data/tokenizer.h"

namespace mtrain::data {
namespace {

const char* kUsage =
    "mtrain tokenizer (--tokenizer PATH | --model DIR) [--encode TEXT | --input FILE|- [--whole_file]] "
    "[--show_tokens] [--add_special_tokens true|false] [--decode IDS [--skip_special_tokens]] [--info]";

std::string flag_value(const std::vector<std::string>& args, size_t& i, const std::string& name) {
  const std::string& a = args[i];
  if (const size_t eq = a.find('='); eq != std::string::npos) return a.substr(eq + 1);
  if (i + 1 >= args.size()) throw UsageError(name + " needs a value", kUsage);
  return args[++i];
}

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos < text.size()) {
    if (text[pos] == ',' || text[pos] == ' ') {
      ++pos;
      continue;
    }
    const char* begin = text.c_str() + pos;
    char* end = nullptr;
    errno = 0;
    const long id = std::strtol(begin, &end, 10);
    if (end == begin || errno != 0 || id < INT32_MIN || id > INT32_MAX ||
        (*end != '\0' && *end != ',' && *end != ' ')) {
      throw UsageError("--decode " + text + ": not a list of token ids", "e.g. --decode 15496,995");
    }
    ids.push_back(static_cast<int32_t>(id));
    pos = static_cast<size_t>(end - text.c_str());
  }
  return ids;
}

// Text as a JSON string: shows whitespace and control characters unambiguously.
std::string quoted(const std::string& text) {
  return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string join_ids(const std::vector<int32_t>& ids) {
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) line += ',';
    line += std::to_string(ids[i]);
  }
  return line;
}

void print_info(const Tokenizer& t, std::ostream& out) {
  const SpecialTokenIds& s = t.special();
  const auto name = [&](int32_t id) {
    return id < 0 ? std::string("none") : std::to_string(id) + " " + t.token_text(id);
  };
  out << "tokenizer: " << t.source() << " (" << t.kind() << ", vocab_size " << t.vocab_size() << ", "
      << t.added_tokens().size() << " added tokens)\n";
  out << "bos: " << name(s.bos) << "\neos: " << name(s.eos) << "\npad: " << name(s.pad) << "\n";
  const std::string& chat = t.chat_template();
  out << "chat_template: "
      << (chat.empty()        ? "none"
          : chat.size() <= 40 ? chat
                              : "(Jinja, " + std::to_string(chat.size()) + " chars)")
      << "\n";
}

std::string pieces_json(const Tokenizer& t, const std::vector<int32_t>& ids) {
  nlohmann::json pieces = nlohmann::json::array();
  for (int32_t id : ids) pieces.push_back(t.token_text(id));
  return pieces.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// --input: one text per line (or the whole input), one output line per text;
// the throughput line counts encoding only, not reading or printing.
void encode_input(const Tokenizer& t, const TokenizerCommandOptions& o, std::istream& stdin_stream, std::ostream& out,
                  std::ostream& report) {
  std::ifstream file;
  if (*o.input != "-") {
    file.open(*o.input, std::ios::binary);
    if (!file) throw DataError("cannot open --input file '" + *o.input + "'", "give a text file, or - for stdin");
  }
  std::istream& in = *o.input == "-" ? stdin_stream : file;
  std::vector<std::string> texts;
  if (o.whole_file) {
    texts.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  } else {
    for (std::string line; std::getline(in, line);) texts.push_back(std::move(line));
  }
  if (in.bad()) throw DataError("cannot read --input '" + *o.input + "'");
  size_t bytes = 0, tokens = 0;
  double seconds = 0;
  for (const std::string& text : texts) {
    const auto start = std::chrono::steady_clock::now();
    const std::vector<int32_t> ids = t.encode(text, o.add_special_tokens);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    bytes += text.size();
    tokens += ids.size();
    out << join_ids(ids);
    if (o.show_tokens) out << '\t' << pieces_json(t, ids);
    out << '\n';
  }
  const double s = std::max(seconds, 1e-9);
  report << fmt::format("tokenizer: {} texts, {:.2f} MB, {} tokens in {:.3f} s: {:.0f} tokens/s, {:.2f} MB/s\n",
                        texts.size(), bytes / 1e6, tokens, seconds, tokens / s, bytes / 1e6 / s);
}

}  // namespace

TokenizerCommandOptions parse_tokenizer_args(const std::vector<std::string>& args) {
  TokenizerCommandOptions o;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const std::string name = a.substr(0, a.find('='));
    if (a == "-h" || a == "--help") {
      o.help = true;
    } else if (name == "--tokenizer" || name == "--model") {
      o.tokenizer = flag_value(args, i, name);
    } else if (name == "--encode") {
      o.encode = flag_value(args, i, name);
    } else if (name == "--decode") {
      o.decode = flag_value(args, i, name);
    } else if (name == "--input") {
      o.input = flag_value(args, i, name);
    } else if (a == "--whole_file" || a == "--whole-file") {
      o.whole_file = true;
    } else if (name == "--add_special_tokens" || name == "--add-special-tokens") {
      const std::string v = flag_value(args, i, name);
      if (v != "true" && v != "false") throw UsageError(name + " takes true or false, not '" + v + "'", kUsage);
      o.add_special_tokens = v == "true";
    } else if (a == "--show_tokens" || a == "--show-tokens") {
      o.show_tokens = true;
    } else if (a == "--skip_special_tokens" || a == "--skip-special-tokens") {
      o.skip_special_tokens = true;
    } else if (a == "--info") {
      o.info = true;
    } else {
      throw UsageError("unknown argument '" + a + "' for mtrain tokenizer", kUsage);
    }
  }
  if (o.help) return o;
  if (o.tokenizer.empty()) throw UsageError("mtrain tokenizer needs --tokenizer PATH or --model DIR", kUsage);
  if (!o.encode && !o.decode && !o.info && !o.input) throw UsageError("mtrain tokenizer: nothing to do", kUsage);
  if (o.encode && o.input) throw UsageError("mtrain tokenizer: give --encode TEXT or --input FILE, not both", kUsage);
  if (o.whole_file && !o.input) throw UsageError("--whole_file needs --input FILE|-", kUsage);
  return o;
}

std::string tokenizer_help() {
  return std::string("usage: ") + kUsage +
         "\n\n"
         "Loads a tokenizer as training does and encodes or decodes from the shell.\n\n"
         "  --tokenizer PATH       tokenizer.json, SentencePiece tokenizer.model, or a directory holding one\n"
         "  --model DIR            a Hugging Face model directory (same as --tokenizer DIR)\n"
         "  --encode TEXT          print the ids of TEXT, comma-separated\n"
         "  --input FILE|-         encode each line of FILE (- = standard input): one line of ids per\n"
         "                         text; throughput (tokens/s, MB/s) goes to standard error\n"
         "  --whole_file           with --input: the whole input is one text\n"
         "  --add_special_tokens B true (default, as Hugging Face's encode) adds what the tokenizer's\n"
         "                         post-processor adds, e.g. Llama's BOS; false gives the text's ids alone,\n"
         "                         as the sft data pipeline encodes (its template writes special tokens)\n"
         "  --show_tokens          with --encode: then one line per token: id, piece, its text as JSON;\n"
         "                         with --input: the pieces as a JSON list after a tab\n"
         "  --decode IDS           print the text of comma- or space-separated ids\n"
         "  --skip_special_tokens  with --decode: drop special tokens\n"
         "  --info                 vocabulary size, bos/eos/pad ids, chat template\n\n"
         "Special tokens in TEXT (e.g. <|im_end|>) are matched verbatim. Exit code 4 when the\n"
         "tokenizer cannot be loaded or an id is outside the vocabulary.\n";
}

int run_tokenizer_command(const TokenizerCommandOptions& options, std::ostream& out, std::istream& in,
                          std::ostream& report) {
  const Tokenizer tokenizer = Tokenizer::load(options.tokenizer);
  if (options.info) print_info(tokenizer, out);
  if (options.input) encode_input(tokenizer, options, in, out, report);
  if (options.encode) {
    const std::vector<int32_t> ids = tokenizer.encode(*options.encode, options.add_special_tokens);
    out << join_ids(ids) << "\n";
    if (options.show_tokens) {
      for (int32_t id : ids) {
        const int32_t one[] = {id};
        out << id << "\t" << tokenizer.token_text(id) << "\t" << quoted(tokenizer.decode(one)) << "\n";
      }
    }
  }
  if (options.decode) {
    out << tokenizer.decode(parse_ids(*options.decode), options.skip_special_tokens) << "\n";
  }
  return 0;
}

}  // namespace mtrain::data
