// The calibrated profile's YAML, edited line by line from the base file (profile_writer.h).
#include "calibrate/profile_writer.h"

#include <fmt/format.h>

#include <sstream>

namespace mtrain::calibrate {

namespace {

// A top-level "key: value  # comment" line's key, or "".
std::string top_level_key(const std::string& l) {
  if (l.empty() || l[0] == ' ' || l[0] == '#' || l[0] == '\t') return "";
  const size_t colon = l.find(':');
  return colon == std::string::npos ? "" : l.substr(0, colon);
}

// "  key: value  # comment": (indent, key, comment with its '#', or "").
bool nested_entry(const std::string& l, std::string& indent, std::string& key, std::string& comment) {
  const size_t b = l.find_first_not_of(' ');
  if (b == 0 || b == std::string::npos || l[b] == '#') return false;
  const size_t colon = l.find(':', b);
  if (colon == std::string::npos) return false;
  indent = l.substr(0, b);
  key = l.substr(b, colon - b);
  const size_t hash = l.find('#', colon);
  comment = hash == std::string::npos ? "" : l.substr(hash + 1);
  while (!comment.empty() && comment.front() == ' ') comment.erase(0, 1);
  return true;
}

std::string cost_line(const std::string& indent, const CostValue& v, const std::string& comment) {
  std::string c = v.note;
  if (!comment.empty()) c += (c.empty() ? "" : "; the base profile's: ") + comment;
  return fmt::format("{}{}: {}{}", indent, v.key, v.value, c.empty() ? "" : "  # " + c);
}

}  // namespace

std::string calibrated_profile_yaml(const std::string& base_text, const std::string& new_name,
                                    const std::vector<CostValue>& values, const std::vector<std::string>& header) {
  std::vector<std::string> lines;
  std::istringstream in(base_text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::vector<bool> written(values.size(), false);
  std::vector<std::string> out;
  for (const std::string& h : header) out.push_back(h.empty() ? "#" : "# " + h);
  bool in_cost = false, named = false;
  std::string cost_indent = "  ";
  size_t cost_end = std::string::npos;  // out index after the cost section's last entry
  for (const std::string& l : lines) {
    const std::string key = top_level_key(l);
    if (!key.empty()) {
      in_cost = key == "cost";
      if (in_cost) cost_end = out.size() + 1;
    }
    if (key == "name") {
      const size_t hash = l.find('#');
      out.push_back(fmt::format("name: {}{}", new_name, hash == std::string::npos ? "" : "  " + l.substr(hash)));
      named = true;
      continue;
    }
    std::string indent, entry, comment;
    if (in_cost && key.empty() && nested_entry(l, indent, entry, comment)) {
      cost_indent = indent;
      bool replaced = false;
      for (size_t i = 0; i < values.size(); ++i) {
        if (values[i].key != entry) continue;
        out.push_back(cost_line(indent, values[i], comment));
        written[i] = replaced = true;
      }
      if (!replaced) out.push_back(l);
      cost_end = out.size();
      continue;
    }
    out.push_back(l);
  }
  std::vector<std::string> missing;
  for (size_t i = 0; i < values.size(); ++i)
    if (!written[i]) missing.push_back(cost_line(cost_indent, values[i], ""));
  if (cost_end == std::string::npos) {
    if (!missing.empty()) out.push_back("cost:");
    out.insert(out.end(), missing.begin(), missing.end());
  } else {
    out.insert(out.begin() + static_cast<std::ptrdiff_t>(cost_end), missing.begin(), missing.end());
  }
  if (!named) out.insert(out.begin() + static_cast<std::ptrdiff_t>(header.size()), "name: " + new_name);
  std::string text;
  for (const std::string& l : out) text += l + "\n";
  return text;
}

}  // namespace mtrain::calibrate
