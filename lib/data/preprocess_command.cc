// `mtrain preprocess_data` parsing, help and run (preprocess_command.h).
#include "data/preprocess_command.h"

#include <fmt/format.h>

#include <charconv>

#include "common/errors.h"
#include "common/progress.h"
#include "config/flags.h"
#include "data/indexed_dataset.h"
#include "data/tokenizer.h"

namespace mtrain::data {

namespace {

const char* kUsage =
    "mtrain preprocess_data --input FILE.jsonl --output_prefix PREFIX --tokenizer tokenizer.json "
    "[--json_keys text ...] [--append_eod] [--log_interval N]";

std::string value_of(const std::vector<std::string>& args, size_t& i, const std::string& name) {
  if (const size_t eq = args[i].find('='); eq != std::string::npos) return args[i].substr(eq + 1);
  if (i + 1 >= args.size() || args[i + 1].rfind("--", 0) == 0) throw UsageError("--" + name + " needs a value", kUsage);
  return args[++i];
}

}  // namespace

PreprocessCommandOptions parse_preprocess_args(const std::vector<std::string>& args) {
  PreprocessCommandOptions o;
  bool keys_given = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h") {
      o.help = true;
      continue;
    }
    if (a.size() < 3 || a.compare(0, 2, "--") != 0)
      throw UsageError(fmt::format("unexpected argument '{}' for mtrain preprocess_data", a), kUsage);
    const std::string name = config::normalize_flag_name(a.substr(2, a.find('=') - 2));
    if (name == "help") {
      o.help = true;
    } else if (name == "input") {
      o.preprocess.input = value_of(args, i, name);
    } else if (name == "output_prefix") {
      o.preprocess.output_prefix = value_of(args, i, name);
    } else if (name == "tokenizer" || name == "tokenizer_model") {
      o.tokenizer = value_of(args, i, name);
    } else if (name == "append_eod") {
      o.preprocess.append_eod = true;
    } else if (name == "json_keys") {  // one or more keys (Megatron: nargs="+")
      if (!keys_given) o.preprocess.json_keys.clear();
      keys_given = true;
      if (a.find('=') != std::string::npos) o.preprocess.json_keys.push_back(a.substr(a.find('=') + 1));
      while (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) o.preprocess.json_keys.push_back(args[++i]);
      if (o.preprocess.json_keys.empty()) throw UsageError("--json_keys needs at least one key", kUsage);
    } else if (name == "log_interval") {
      const std::string v = value_of(args, i, name);
      int64_t n = 0;
      const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
      if (ec != std::errc() || end != v.data() + v.size() || n < 1)
        throw UsageError(fmt::format("--log_interval {}: expected a positive number of documents", v), kUsage);
      o.preprocess.log_interval = n;
    } else {
      throw UsageError(fmt::format("unknown option --{} for mtrain preprocess_data", name), kUsage);
    }
  }
  if (o.help) return o;
  if (o.preprocess.input.empty()) throw UsageError("mtrain preprocess_data needs --input FILE.jsonl", kUsage);
  if (o.preprocess.output_prefix.empty()) throw UsageError("mtrain preprocess_data needs --output_prefix", kUsage);
  if (o.tokenizer.empty()) throw UsageError("mtrain preprocess_data needs --tokenizer", kUsage);
  return o;
}

std::string preprocess_help() {
  return std::string("usage: ") + kUsage +
         "\n\n"
         "Tokenizes a JSONL file into Megatron's indexed format (.bin + .idx), like Megatron-LM's\n"
         "tools/preprocess_data.py: one document per line and key, written to\n"
         "<output_prefix>_<key>_document.bin/.idx (uint16 ids below a vocabulary of 65500, else int32).\n\n"
         "  --input FILE            JSONL, one JSON object per line\n"
         "  --output_prefix PREFIX  where to write (its directory must exist)\n"
         "  --tokenizer PATH        tokenizer.json (or a directory / tokenizer.model), as for training\n"
         "  --json_keys KEY ...     string fields to tokenize (default: text)\n"
         "  --append_eod            end every document with the end-of-document token\n"
         "  --log_interval N        progress line every N documents (default 1000)\n\n"
         "Then: mtrain pt --data_path PREFIX_text_document --split 969,30,1 ...\n";
}

int run_preprocess_command(const PreprocessCommandOptions& o, std::ostream& out) {
  const Tokenizer tok = Tokenizer::load(o.tokenizer);
  // On a terminal: a progress line over the input's documents (common/progress.h).
  ProgressSink* sink = stdout_progress_sink();
  ProgressBar bar("Preprocess", sink ? count_nonblank_lines(o.preprocess.input) : 0, sink);
  bar.set_unit("doc");
  const PreprocessResult r = preprocess_data(
      o.preprocess, tok, [&](const std::string& line) { out << line << std::endl; },
      [&](int64_t documents) { bar.update(documents); });
  bar.close();
  out << fmt::format("Processed {} documents, {} tokens ({}, vocab_size {}).\n", r.documents, r.tokens,
                     indexed_dtype_name(optimal_indexed_dtype(tok.vocab_size())), tok.vocab_size());
  for (const std::string& p : r.prefixes)
    out << fmt::format("Wrote {} and {}\n", indexed_bin_path(p), indexed_idx_path(p));
  return 0;
}

}  // namespace mtrain::data
