// Reading and writing the Hugging Face tokenizer.json format (byte-level BPE
// only), choosing between tokenizer.json and a SentencePiece model for a path,
// and the eos/pad/bos/chat_template fields of tokenizer_config.json.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
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
  // BPE-dropout samples merges at random: fine for augmentation, but training
  // data must tokenize the same way every epoch and on every rank.
  if (model.contains("dropout") && model["dropout"].is_number() && model["dropout"].get<double>() > 0) {
    throw DataError(source + ": model.dropout " + model["dropout"].dump() + " is not supported",
                    "BPE-dropout makes tokenization random; set \"dropout\": null for training");
  }
  BpeModelSpec spec;
  const auto optional_string = [&](const char* key) {
    return model.contains(key) && model[key].is_string() ? model[key].get<std::string>() : std::string();
  };
  spec.continuing_subword_prefix = optional_string("continuing_subword_prefix");
  spec.end_of_word_suffix = optional_string("end_of_word_suffix");
  spec.byte_fallback = model.value("byte_fallback", false);
  spec.fuse_unk = model.value("fuse_unk", false);
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

// transformers' Llama and Gemma fast tokenizers rebuild their post-processor
// from add_bos_token / add_eos_token (update_post_processor), so for those
// classes the config decides what add_special_tokens=true adds (returns
// true and fills prefix/suffix); for other classes the keys have no effect
// there and none here.
bool config_special_ids(const Json& config, const SpecialTokenIds& special, const std::string& config_path,
                        std::vector<int32_t>& prefix, std::vector<int32_t>& suffix) {
  static const std::regex kRebuildingClasses("(Llama|Gemma|CodeLlama)Tokenizer(Fast)?");
  if (!std::regex_match(config.value("tokenizer_class", std::string()), kRebuildingClasses)) return false;
  if (!config.contains("add_bos_token") && !config.contains("add_eos_token")) return false;
  prefix.clear();
  suffix.clear();
  if (config.value("add_bos_token", false)) {
    if (special.bos < 0) throw DataError(config_path + ": add_bos_token is true but there is no bos_token");
    prefix.push_back(special.bos);
  }
  if (config.value("add_eos_token", false)) {
    if (special.eos < 0) throw DataError(config_path + ": add_eos_token is true but there is no eos_token");
    suffix.push_back(special.eos);
  }
  return true;
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
  try {
    auto impl = Impl::build(parse_spec(j, source), source);
    impl->normalizer = Normalizer::from_json(j.value("normalizer", Json()), source);
    impl->pre_tokenizer = PreTokenizer::from_json(j.value("pre_tokenizer", Json()), source);
    impl->post_processor = PostProcessor::from_json(j.value("post_processor", Json()), source);
    impl->decoder = Decoder::from_json(j.value("decoder", Json()), source);
    impl->index_added_tokens();
    for (const char* key : {"normalizer", "pre_tokenizer", "post_processor", "decoder"}) {
      impl->loaded_sections[key] = j.value(key, Json());
    }
    return Tokenizer(std::move(impl));
  } catch (const nlohmann::json::exception& e) {
    throw DataError(source + ": unexpected tokenizer.json structure: " + e.what());
  }
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
    config_special_ids(config, special_, config_path, special_prefix_, special_suffix_);
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
  const auto optional = [](const std::string& v) { return (v.empty() ? Json() : Json(v)).dump(); };
  out << "    \"continuing_subword_prefix\": " << optional(spec.continuing_subword_prefix) << ",\n";
  out << "    \"end_of_word_suffix\": " << optional(spec.end_of_word_suffix) << ",\n";
  out << "    \"fuse_unk\": " << (spec.fuse_unk ? "true" : "false") << ",\n";
  out << "    \"byte_fallback\": " << (spec.byte_fallback ? "true" : "false") << ",\n";
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
