#include "plan/activation_buffers.h"

#include <fmt/format.h>

#include <algorithm>

namespace mtrain::plan {

namespace {

constexpr const char* kStageOutput = "stage output (last row of the residual stream)";

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// "chunk 0 slot 1 logits" -> "logits"; "" for a name of another kind.
std::string slot_buffer_name(const std::string& name) {
  if (!starts_with(name, "chunk ")) return "";
  const size_t slot = name.find(" slot ");
  if (slot == std::string::npos) return "";
  const size_t end = name.find(' ', slot + 6);
  return end == std::string::npos ? "" : name.substr(end + 1);
}

void add(std::vector<NamedBuffer>& list, const std::string& name, int64_t bytes) {
  auto it = std::find_if(list.begin(), list.end(), [&](const NamedBuffer& b) { return b.name == name; });
  if (it == list.end()) {
    list.push_back({name, 0, 0});
    it = list.end() - 1;
  }
  it->bytes += bytes;
  ++it->count;
}

double mib(int64_t b) { return static_cast<double>(b) / (1 << 20); }

// MiB, or KiB below a tenth of one (a loss buffer would read 0.0 MiB).
std::string size_text(int64_t b) {
  return b >= (1 << 20) / 10 ? fmt::format("{:.1f} MiB", mib(b)) : fmt::format("{:.1f} KiB", b / 1024.0);
}

}  // namespace

int64_t ActivationBreakdown::rest() const {
  int64_t n = 0;
  for (const NamedBuffer& b : per_microbatch) n += b.bytes;
  for (const NamedBuffer& b : shared) n += b.bytes;
  return n;
}

ActivationBreakdown activation_breakdown(const std::map<std::string, int64_t>& live, int64_t residual_row_bytes) {
  ActivationBreakdown out;
  out.per_microbatch.push_back({kStageOutput, 0, 0});
  for (const auto& [name, bytes] : live) {
    if (starts_with(name, "layer slot ")) {
      out.layers += bytes;
      continue;
    }
    const std::string slot_name = slot_buffer_name(name);
    if (slot_name.empty()) {
      add(out.shared, name, bytes);
    } else if (slot_name == "residual stream (per layer input)") {
      // (layers + 1) rows: each layer's input, then what the stage hands on.
      out.layers += bytes - residual_row_bytes;
      add(out.per_microbatch, kStageOutput, residual_row_bytes);
    } else {
      add(out.per_microbatch, slot_name, bytes);
    }
  }
  if (out.per_microbatch.front().count == 0) out.per_microbatch.erase(out.per_microbatch.begin());
  return out;
}

std::string format_activation_rest(const ActivationBreakdown& b, const std::string& indent) {
  std::string s = fmt::format("{}the rest, outside the layers: {:.1f} MiB\n", indent, mib(b.rest()));
  auto group = [&](const char* title, std::vector<NamedBuffer> list) {
    if (list.empty()) return;
    std::stable_sort(list.begin(), list.end(),
                     [](const NamedBuffer& x, const NamedBuffer& y) { return x.bytes > y.bytes; });
    s += fmt::format("{}  {}\n", indent, title);
    for (const NamedBuffer& n : list)
      s += fmt::format("{}    {:<52} {:>14}{}\n", indent, n.name, size_text(n.bytes),
                       n.count > 1 ? fmt::format(" ({} x {})", n.count, size_text(n.bytes / n.count)) : "");
  };
  group("each in-flight micro-batch's buffers:", b.per_microbatch);
  group("one each, shared by all layers (backward workspace, recompute buffer, residual gradients):", b.shared);
  return s;
}

}  // namespace mtrain::plan
