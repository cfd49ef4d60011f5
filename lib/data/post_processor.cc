#include "data/post_processor.h"

#include "common/errors.h"

namespace mtrain::data {
namespace {

using Json = nlohmann::json;

// Wraps `p` in one processor step: the new prefix goes outside the old one.
void wrap(PostProcessor& p, const std::vector<int32_t>& before, const std::vector<int32_t>& after) {
  p.prefix.insert(p.prefix.begin(), before.begin(), before.end());
  p.suffix.insert(p.suffix.end(), after.begin(), after.end());
}

void add_template(PostProcessor& p, const Json& node, const std::string& where) {
  const Json& specials = node.value("special_tokens", Json::object());
  std::vector<int32_t> before, after;
  int sequences = 0;
  for (const Json& piece : node.at("single")) {
    if (piece.contains("Sequence")) {
      if (piece["Sequence"].value("id", std::string("A")) != "A") {
        throw DataError(where + ": TemplateProcessing single template uses sequence '" +
                        piece["Sequence"].value("id", std::string()) + "'; only $A exists for one text");
      }
      ++sequences;
      continue;
    }
    const std::string name = piece.at("SpecialToken").at("id").get<std::string>();
    if (!specials.contains(name)) {
      throw DataError(where + ": TemplateProcessing special token '" + name + "' is missing from special_tokens");
    }
    for (const Json& id : specials[name].at("ids")) (sequences == 0 ? before : after).push_back(id.get<int32_t>());
  }
  if (sequences != 1) {
    throw DataError(where + ": TemplateProcessing single template must hold $A exactly once, not " +
                    std::to_string(sequences) + " times");
  }
  wrap(p, before, after);
}

void add_step(PostProcessor& p, const Json& node, const std::string& where) {
  const std::string type = node.is_object() ? node.value("type", std::string()) : "";
  if (type == "Sequence") {
    for (const Json& step : node.at("processors")) add_step(p, step, where);
  } else if (type == "ByteLevel") {
    // Only trims offsets; adds no ids.
  } else if (type == "TemplateProcessing") {
    add_template(p, node, where);
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    wrap(p, {node.at("cls").at(1).get<int32_t>()}, {node.at("sep").at(1).get<int32_t>()});
  } else {
    throw DataError(where + " '" + type + "' is not supported",
                    "supported: TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing, Sequence");
  }
}

}  // namespace

PostProcessor PostProcessor::from_json(const Json& node, const std::string& where) {
  PostProcessor p;
  if (!node.is_null()) add_step(p, node, where + ": post_processor");
  return p;
}

}  // namespace mtrain::data
