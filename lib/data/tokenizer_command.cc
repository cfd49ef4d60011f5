#include "data/tokenizer_command.h"

#include <cerrno>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "common/errors.h"
#include "data/tokenizer.h"

namespace mtrain::data {
namespace {

const char* kUsage =
    "mtrain tokenizer (--tokenizer PATH | --model DIR) [--encode TEXT [--show_tokens]] "
    "[--decode IDS [--skip_special_tokens]] [--info]";

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
  out << "tokenizer: " << t.source() << " (" << (t.is_sentencepiece() ? "SentencePiece" : "byte-level BPE")
      << ", vocab_size " << t.vocab_size() << ", " << t.added_tokens().size() << " added tokens)\n";
  out << "bos: " << name(s.bos) << "\neos: " << name(s.eos) << "\npad: " << name(s.pad) << "\n";
  const std::string& chat = t.chat_template();
  out << "chat_template: "
      << (chat.empty()        ? "none"
          : chat.size() <= 40 ? chat
                              : "(Jinja, " + std::to_string(chat.size()) + " chars)")
      << "\n";
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
  if (!o.encode && !o.decode && !o.info) throw UsageError("mtrain tokenizer: nothing to do", kUsage);
  return o;
}

std::string tokenizer_help() {
  return std::string("usage: ") + kUsage +
         "\n\n"
         "Loads a tokenizer as training does and encodes or decodes from the shell.\n\n"
         "  --tokenizer PATH       tokenizer.json, SentencePiece tokenizer.model, or a directory holding one\n"
         "  --model DIR            a Hugging Face model directory (same as --tokenizer DIR)\n"
         "  --encode TEXT          print the ids of TEXT, comma-separated (no BOS/EOS is added)\n"
         "  --show_tokens          with --encode: then one line per token: id, piece, its text as JSON\n"
         "  --decode IDS           print the text of comma- or space-separated ids\n"
         "  --skip_special_tokens  with --decode: drop special tokens\n"
         "  --info                 vocabulary size, bos/eos/pad ids, chat template\n\n"
         "Special tokens in TEXT (e.g. <|im_end|>) are matched verbatim. Exit code 4 when the\n"
         "tokenizer cannot be loaded or an id is outside the vocabulary.\n";
}

int run_tokenizer_command(const TokenizerCommandOptions& options, std::ostream& out) {
  const Tokenizer tokenizer = Tokenizer::load(options.tokenizer);
  if (options.info) print_info(tokenizer, out);
  if (options.encode) {
    const std::vector<int32_t> ids = tokenizer.encode(*options.encode);
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
