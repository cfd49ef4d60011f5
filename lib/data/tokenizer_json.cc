// Reading and writing the Hugging Face tokenizer.json format (byte-level BPE
// only), choosing between tokenizer.json and a SentencePiece model for a path,
// and the eos/pad/bos/chat_template fields of tokenizer_config.json.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/errors.h"
#include "data/tokenizer_internal.h"

namespace mtrain::data {
namespace {

using Json = nlohmann::json;  // std::map-backed: fast for 150k-entry vocabularies

std::string read_file(const std::string& path, const char* what, const std::string& hint) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(std::string("cannot open ") + what + " '" + path + "'", hint);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

Json parse_json(std::string_view text, const std::string& source) {
  try {
    return Json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw DataError(source + ": invalid JSON: " + e.what());
  }
}

std::string type_of(const Json& node) { return node.is_object() ? node.value("type", std::string()) : ""; }

void check_normalizer(const Json& n, const std::string& source) {
  if (n.is_null()) return;
  const std::string type = type_of(n);
  if (type == "NFC") return;  // assumed: input text is already NFC (true of almost all corpora)
  if (type == "Sequence" && n.value("normalizers", Json::array()).empty()) return;
  throw DataError(source + ": normalizer type '" + type + "' is not supported", "supported: null, NFC");
}

// Collects regex splits and the ByteLevel step of a (possibly nested) pre_tokenizer.
void parse_pre_tokenizer(const Json& p, const std::string& source, BpeModelSpec& spec, bool& saw_byte_level) {
  const std::string type = type_of(p);
  if (type == "Sequence") {
    for (const auto& step : p.at("pretokenizers")) parse_pre_tokenizer(step, source, spec, saw_byte_level);
  } else if (type == "ByteLevel") {
    saw_byte_level = true;
    spec.add_prefix_space = p.value("add_prefix_space", false);
    if (p.value("use_regex", true)) spec.split_patterns.push_back(kGpt2SplitPattern);
  } else if (type == "Split") {
    const Json& pattern = p.at("pattern");
    if (p.value("behavior", std::string("Isolated")) != "Isolated" || p.value("invert", false)) {
      throw DataError(source + ": pre_tokenizer Split: only behavior 'Isolated' without invert is supported");
    }
    if (pattern.contains("Regex")) {
      spec.split_patterns.push_back(pattern.at("Regex").get<std::string>());
    } else {
      spec.split_patterns.push_back(regex_escape(pattern.at("String").get<std::string>()));
    }
  } else if (type == "Digits") {
    spec.split_patterns.push_back(p.value("individual_digits", false) ? R"(\p{Nd})" : R"(\p{Nd}+)");
  } else {
    throw DataError(source + ": pre_tokenizer type '" + type + "' is not supported",
                    "supported: ByteLevel, Split (Isolated), Digits, Sequence of these");
  }
}

void parse_merges(const Json& merges, const std::string& source, BpeModelSpec& spec) {
  spec.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const Json& m = merges[i];
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        throw DataError(source + ": model.merges[" + std::to_string(i) + "] '" + s +
                        "' is not of the form 'left right'");
      }
      spec.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2) {
      spec.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      throw DataError(source + ": model.merges[" + std::to_string(i) + "] must be \"left right\" or [left, right]");
    }
  }
}

BpeModelSpec parse_spec(const Json& j, const std::string& source) {
  if (!j.is_object() || !j.contains("model")) throw DataError(source + ": not a tokenizer.json: no 'model' object");
  const Json& model = j.at("model");
  const std::string type = model.value("type", std::string("BPE"));
  if (type != "BPE") {
    throw DataError(source + ": model.type '" + type + "' is not supported", "only byte-level BPE tokenizers load");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && !model[key].is_null() && !model[key].get<std::string>().empty()) {
      throw DataError(source + ": model." + key + " is not supported by byte-level BPE");
    }
  }
  if (model.value("byte_fallback", false)) throw DataError(source + ": model.byte_fallback is not supported");
  BpeModelSpec spec;
  const Json& vocab = model.at("vocab");
  if (!vocab.is_object()) throw DataError(source + ": model.vocab must be an object {token: id}");
  spec.vocab.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items()) spec.vocab.emplace_back(token, id.get<int32_t>());
  parse_merges(model.at("merges"), source, spec);
  if (model.contains("unk_token") && model["unk_token"].is_string()) spec.unk_token = model["unk_token"];
  spec.ignore_merges = model.value("ignore_merges", false);
  for (const auto& t : j.value("added_tokens", Json::array())) {
    spec.added_tokens.push_back({.id = t.at("id").get<int32_t>(),
                                 .content = t.at("content").get<std::string>(),
                                 .special = t.value("special", false),
                                 .lstrip = t.value("lstrip", false),
                                 .rstrip = t.value("rstrip", false),
                                 .single_word = t.value("single_word", false),
                                 .normalized = t.value("normalized", false)});
  }
  check_normalizer(j.value("normalizer", Json()), source);
  bool saw_byte_level = false;
  if (j.contains("pre_tokenizer") && !j["pre_tokenizer"].is_null()) {
    parse_pre_tokenizer(j["pre_tokenizer"], source, spec, saw_byte_level);
  }
  if (!saw_byte_level) {
    throw DataError(source + ": pre_tokenizer has no ByteLevel step", "only byte-level BPE tokenizers are supported");
  }
  return spec;
}

// tokenizer_config.json names tokens as a string, as {"content": ...}, or null.
std::string config_token(const Json& config, const char* key) {
  if (!config.contains(key) || config[key].is_null()) return "";
  const Json& v = config[key];
  return v.is_string() ? v.get<std::string>() : v.at("content").get<std::string>();
}

// chat_template is a string, or a list of {"name", "template"} of which "default" is used.
std::string config_chat_template(const Json& config) {
  const Json& t = config.value("chat_template", Json());
  if (t.is_string()) return t.get<std::string>();
  if (!t.is_array()) return "";
  for (const auto& named : t) {
    if (named.value("name", std::string()) == "default") return named.at("template").get<std::string>();
  }
  return "";
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

using OrderedJson = nlohmann::ordered_json;

// Hugging Face writes the "type" tag first; do the same for readability.
OrderedJson type_first(const Json& value) {
  if (value.is_array()) {
    OrderedJson array = OrderedJson::array();
    for (const auto& v : value) array.push_back(type_first(v));
    return array;
  }
  if (!value.is_object()) return OrderedJson(value);
  OrderedJson object = OrderedJson::object();
  if (value.contains("type")) object["type"] = type_first(value["type"]);
  for (const auto& [key, v] : value.items()) {
    if (key != "type") object[key] = type_first(v);
  }
  return object;
}

Json byte_level_step(bool add_prefix_space, bool use_regex, bool trim_offsets) {
  return Json{{"type", "ByteLevel"},
              {"add_prefix_space", add_prefix_space},
              {"trim_offsets", trim_offsets},
              {"use_regex", use_regex}};
}

}  // namespace

Tokenizer Tokenizer::from_json_text(std::string_view json_text, std::string source) {
  const Json j = parse_json(json_text, source);
  BpeModelSpec spec;
  try {
    spec = parse_spec(j, source);
  } catch (const nlohmann::json::exception& e) {
    throw DataError(source + ": unexpected tokenizer.json structure: " + e.what());
  }
  auto impl = Impl::build(std::move(spec), std::move(source));
  for (const char* key : {"normalizer", "pre_tokenizer", "post_processor", "decoder"}) {
    impl->loaded_sections[key] = j.value(key, Json());
  }
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::load(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (const char* name : {"tokenizer.json", "tokenizer.model"}) {
      const std::string file = (fs::path(path) / name).string();
      if (fs::is_regular_file(file, ec)) return load(file);
    }
    throw DataError("tokenizer directory '" + path + "' has neither tokenizer.json nor tokenizer.model",
                    "pass a Hugging Face model directory, a tokenizer.json or a SentencePiece .model file");
  }
  if (ends_with(path, ".model")) return load_sentencepiece(path);
  const std::string text = read_file(
      path, "tokenizer file", "pass the path of a Hugging Face tokenizer.json, e.g. configs/demo/tokenizer.json");
  Tokenizer tokenizer = from_json_text(text, path);
  tokenizer.apply_config_file((fs::path(path).parent_path() / "tokenizer_config.json").string());
  return tokenizer;
}

void Tokenizer::apply_config_file(const std::string& config_path) {
  if (!std::filesystem::exists(config_path)) return;
  const Json config = parse_json(read_file(config_path, "tokenizer config", ""), config_path);
  try {
    for (const char* key : {"eos_token", "pad_token", "bos_token"}) {
      const std::string name = config_token(config, key);
      if (!name.empty() && !find_token(name)) {
        throw DataError(config_path + ": " + key + " '" + name + "' is not a token of " + source());
      }
    }
    set_special_tokens(config_token(config, "eos_token"), config_token(config, "pad_token"),
                       config_token(config, "bos_token"));
    chat_template_ = config_chat_template(config);
  } catch (const nlohmann::json::exception& e) {
    throw DataError(config_path + ": unexpected structure: " + e.what());
  }
}

// Written by hand around nlohmann dumps of the small sections: the vocab must
// be in id order, and a 150k-entry ordered_json object would be quadratic.
std::string Tokenizer::to_json_text() const {
  if (is_sentencepiece()) {
    throw DataError("tokenizer " + source() + " is a SentencePiece model and cannot be written as tokenizer.json");
  }
  const BpeModelSpec& spec = impl_->spec;
  OrderedJson added = OrderedJson::array();
  for (const auto& t : spec.added_tokens) {
    OrderedJson token = OrderedJson::object();  // field order as Hugging Face writes it
    token["id"] = t.id;
    token["content"] = t.content;
    token["single_word"] = t.single_word;
    token["lstrip"] = t.lstrip;
    token["rstrip"] = t.rstrip;
    token["normalized"] = t.normalized;
    token["special"] = t.special;
    added.push_back(std::move(token));
  }
  Json sections = impl_->loaded_sections;
  if (sections.is_null()) {
    sections["normalizer"] = nullptr;
    if (spec.split_patterns == std::vector<std::string>{kGpt2SplitPattern}) {
      sections["pre_tokenizer"] = byte_level_step(spec.add_prefix_space, true, true);
    } else {
      Json steps = Json::array();
      for (const auto& p : spec.split_patterns) {
        steps.push_back({{"type", "Split"}, {"pattern", {{"Regex", p}}}, {"behavior", "Isolated"}, {"invert", false}});
      }
      steps.push_back(byte_level_step(spec.add_prefix_space, false, false));
      sections["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", steps}};
    }
    sections["post_processor"] = byte_level_step(false, false, false);
    sections["decoder"] = byte_level_step(false, false, false);
  }
  const auto nested = [](const OrderedJson& value) {  // a dump(2) re-indented to sit at depth 1
    std::string text = value.dump(2);
    for (size_t pos = text.find('\n'); pos != std::string::npos; pos = text.find('\n', pos + 3)) {
      text.insert(pos + 1, "  ");
    }
    return text;
  };
  std::ostringstream out;
  out << "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n";
  out << "  \"added_tokens\": " << nested(added) << ",\n";
  for (const char* key : {"normalizer", "pre_tokenizer", "post_processor", "decoder"}) {
    out << "  \"" << key << "\": " << nested(type_first(sections.value(key, Json()))) << ",\n";
  }
  out << "  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n";
  out << "    \"unk_token\": " << (spec.unk_token.empty() ? Json() : Json(spec.unk_token)).dump() << ",\n";
  out << "    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n";
  out << "    \"fuse_unk\": false,\n    \"byte_fallback\": false,\n";
  out << "    \"ignore_merges\": " << (spec.ignore_merges ? "true" : "false") << ",\n";
  auto vocab = spec.vocab;
  std::sort(vocab.begin(), vocab.end(), [](const auto& x, const auto& y) { return x.second < y.second; });
  out << "    \"vocab\": {";
  for (size_t i = 0; i < vocab.size(); ++i) {
    out << (i == 0 ? "\n      " : ",\n      ") << Json(vocab[i].first).dump() << ": " << vocab[i].second;
  }
  out << (vocab.empty() ? "},\n" : "\n    },\n");
  bool has_space = false;  // "a b" strings are ambiguous if a token holds a space
  for (const auto& [a, b] : spec.merges)
    has_space |= a.find(' ') != std::string::npos || b.find(' ') != std::string::npos;
  out << "    \"merges\": [";
  for (size_t i = 0; i < spec.merges.size(); ++i) {
    const auto& [a, b] = spec.merges[i];
    out << (i == 0 ? "\n      " : ",\n      ") << (has_space ? Json::array({a, b}).dump() : Json(a + " " + b).dump());
  }
  out << (spec.merges.empty() ? "]\n" : "\n    ]\n");
  out << "  }\n}\n";
  return out.str();
}

void Tokenizer::save(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << to_json_text();
    if (!out.flush()) throw DataError("cannot write tokenizer file '" + tmp + "'");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw DataError("cannot write tokenizer file '" + path + "': " + ec.message());
}

}  // namespace mtrain::data
