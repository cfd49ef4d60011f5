#include "observe/precision_dump_json.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "common/errors.h"

namespace mtrain::observe {

using nlohmann::json;

namespace {

// JSON has no NaN: a statistic without a value (max of no finite element) is null.
json number(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }
double number_of(const json& j) { return j.is_null() ? std::numeric_limits<double>::quiet_NaN() : j.get<double>(); }

json tensor_json(const DumpTensor& t) {
  const profiler::TensorStats& s = t.stats;
  return {{"role", t.role},
          {"shape", t.shape},
          {"dtype", t.dtype},
          {"partition", t.tp_shard ? "tp_shard" : "replicated"},
          {"count", s.count},
          {"finite", s.finite},
          {"nan", s.nan},
          {"inf", s.inf},
          {"max", number(s.max)},
          {"min", number(s.min)},
          {"mean", number(s.mean())},
          {"l2_norm", number(s.l2_norm())},
          {"sum", s.sum},
          {"sum_sq", s.sum_sq}};
}

DumpTensor tensor_of(const json& j) {
  DumpTensor t;
  t.role = j.at("role").get<std::string>();
  t.shape = j.at("shape").get<std::vector<int64_t>>();
  t.dtype = j.at("dtype").get<std::string>();
  t.tp_shard = j.at("partition").get<std::string>() == "tp_shard";
  profiler::TensorStats& s = t.stats;
  s.count = j.at("count").get<int64_t>();
  s.finite = j.at("finite").get<int64_t>();
  s.nan = j.at("nan").get<int64_t>();
  s.inf = j.at("inf").get<int64_t>();
  s.max = number_of(j.at("max"));
  s.min = number_of(j.at("min"));
  s.sum = j.at("sum").get<double>();
  s.sum_sq = j.at("sum_sq").get<double>();
  return t;
}

json tensors_json(const std::vector<DumpTensor>& ts) {
  json a = json::array();
  for (const DumpTensor& t : ts) a.push_back(tensor_json(t));
  return a;
}

std::vector<DumpTensor> tensors_of(const json& j) {
  std::vector<DumpTensor> out;
  for (const json& t : j) out.push_back(tensor_of(t));
  return out;
}

}  // namespace

json dump_file_to_json(const DumpFile& f) {
  const DumpRankInfo& i = f.info;
  json records = json::array();
  for (const DumpRecord& r : f.records) {
    records.push_back({{"name", r.name},
                       {"module", r.module},
                       {"kind", r.kind},
                       {"pass", r.pass},
                       {"call", r.call},
                       {"micro_batch", r.micro_batch},
                       {"chunk", r.chunk},
                       {"fused_by", r.fused_by.empty() ? json(nullptr) : json(r.fused_by)},
                       {"inputs", tensors_json(r.inputs)},
                       {"outputs", tensors_json(r.outputs)}});
  }
  json bad = nullptr;
  if (f.first_nonfinite) {
    const NonFiniteFinding& b = *f.first_nonfinite;
    bad = {{"record", b.record}, {"role", b.role}, {"nan", b.nan}, {"inf", b.inf}};
  }
  return {{"format", kDumpFormat},
          {"version", kDumpVersion},
          {"iteration", f.iteration},
          {"rank", i.rank},
          {"world_size", i.world_size},
          {"coords", {{"tp", i.tp}, {"pp", i.pp}, {"dp", i.dp}}},
          {"sizes", {{"tp", i.tp_size}, {"pp", i.pp_size}, {"dp", i.dp_size}}},
          {"level", f.level},
          {"dtype", i.dtype},
          {"fused_ops", f.fused_ops},
          {"first_nonfinite", bad},
          {"records", records}};
}

DumpFile dump_file_from_json(const json& j, const std::string& path) {
  const auto format = j.is_object() ? j.find("format") : j.end();
  if (!j.is_object() || format == j.end() || !format->is_string() || format->get<std::string>() != kDumpFormat)
    throw DataError(fmt::format("{}: not an mtrain precision dump", path),
                    "pass a directory written with --precision_dump_path");
  try {
    DumpFile f;
    f.iteration = j.at("iteration").get<int64_t>();
    DumpRankInfo& i = f.info;
    i.rank = j.at("rank").get<int>();
    i.world_size = j.at("world_size").get<int>();
    i.tp = j.at("coords").at("tp").get<int>();
    i.pp = j.at("coords").at("pp").get<int>();
    i.dp = j.at("coords").at("dp").get<int>();
    i.tp_size = j.at("sizes").at("tp").get<int>();
    i.pp_size = j.at("sizes").at("pp").get<int>();
    i.dp_size = j.at("sizes").at("dp").get<int>();
    i.dtype = j.at("dtype").get<std::string>();
    f.level = j.at("level").get<std::string>();
    f.fused_ops = j.at("fused_ops").get<std::map<std::string, std::vector<std::string>>>();
    if (const json& b = j.at("first_nonfinite"); !b.is_null())
      f.first_nonfinite = NonFiniteFinding{b.at("record").get<std::string>(), b.at("role").get<std::string>(),
                                           b.at("nan").get<int64_t>(), b.at("inf").get<int64_t>()};
    for (const json& r : j.at("records")) {
      DumpRecord d;
      d.name = r.at("name").get<std::string>();
      d.module = r.at("module").get<std::string>();
      d.kind = r.at("kind").get<std::string>();
      d.pass = r.at("pass").get<std::string>();
      d.call = r.at("call").get<int64_t>();
      d.micro_batch = r.at("micro_batch").get<int64_t>();
      d.chunk = r.at("chunk").get<int>();
      if (!r.at("fused_by").is_null()) d.fused_by = r.at("fused_by").get<std::string>();
      d.inputs = tensors_of(r.at("inputs"));
      d.outputs = tensors_of(r.at("outputs"));
      f.records.push_back(std::move(d));
    }
    return f;
  } catch (const json::exception& e) {
    throw DataError(fmt::format("{}: malformed precision dump: {}", path, e.what()));
  }
}

}  // namespace mtrain::observe
