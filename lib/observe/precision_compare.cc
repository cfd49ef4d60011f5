#include "observe/precision_compare.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <tuple>

#include "common/errors.h"
#include "config/flags.h"
#include "observe/precision_dump_json.h"

namespace mtrain::observe {

namespace fs = std::filesystem;
using profiler::TensorStats;

namespace {

constexpr const char* kUsage = "mtrain compare DUMP_A DUMP_B [--step N] [--rtol R] [--atol A] [--show N]";

[[noreturn]] void usage(const std::string& what) { throw UsageError(what, std::string("usage: ") + kUsage); }

template <typename T>
T parse_value(const std::string& name, const std::string& text) {
  T v{};
  const char* end = text.data() + text.size();
  const auto [p, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || p != end) usage(fmt::format("--{}: '{}' is not a number", name, text));
  return v;
}

// The number N of a directory named <prefix>N, or -1.
int64_t numbered(const fs::path& p, const char* prefix) {
  const std::string n = p.filename().string();
  const size_t len = std::char_traits<char>::length(prefix);
  if (n.size() <= len || n.compare(0, len, prefix) != 0) return -1;
  int64_t v = -1;
  const auto [ptr, ec] = std::from_chars(n.data() + len, n.data() + n.size(), v);
  return ec == std::errc() && ptr == n.data() + n.size() ? v : -1;
}

std::map<int64_t, fs::path> numbered_dirs(const fs::path& dir, const char* prefix) {
  std::map<int64_t, fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_directory() && numbered(e.path(), prefix) >= 0) out[numbered(e.path(), prefix)] = e.path();
  return out;
}

// A dump argument: its step directories by iteration.
std::map<int64_t, fs::path> dump_steps(const std::string& arg) {
  const fs::path p(arg);
  std::error_code ec;
  if (!fs::is_directory(p, ec)) usage(fmt::format("mtrain compare: {}: no such directory", arg));
  std::map<int64_t, fs::path> steps = numbered_dirs(p, "step");
  if (!steps.empty()) return steps;
  if (!numbered_dirs(p, "rank").empty() && numbered(p, "step") >= 0) return {{numbered(p, "step"), p}};
  throw DataError(fmt::format("{}: not a precision dump (no step<N>/rank<R>/dump.json inside)", arg),
                  "pass the --precision_dump_path of a run, or one of its step<N> directories");
}

std::vector<DumpFile> load_step(const fs::path& step_dir) {
  std::vector<DumpFile> files;
  for (const auto& [rank, dir] : numbered_dirs(step_dir, "rank")) {
    const fs::path jf = dir / "dump.json";
    std::ifstream in(jf);
    if (!in) continue;
    nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) throw DataError(fmt::format("{}: not valid JSON", jf.string()));
    files.push_back(dump_file_from_json(j, jf.string()));
  }
  if (files.empty())
    throw DataError(fmt::format("{}: not a precision dump (no rank<R>/dump.json inside)", step_dir.string()));
  // The merge needs every tensor-parallel shard of every stage of
  // data-parallel rank 0: a missing one would give wrong full statistics.
  const DumpRankInfo& l = files.front().info;
  std::set<std::pair<int, int>> have;
  for (const DumpFile& f : files)
    if (f.info.dp == 0) have.insert({f.info.pp, f.info.tp});
  for (int pp = 0; pp < l.pp_size; ++pp)
    for (int tp = 0; tp < l.tp_size; ++tp)
      if (!have.count({pp, tp}))
        throw DataError(fmt::format("{}: no dump of the rank at tensor-parallel rank {}, pipeline stage {} of "
                                    "data-parallel rank 0 (tp {}, pp {}); compare merges all of them",
                                    step_dir.string(), tp, pp, l.tp_size, l.pp_size),
                        "dump every rank of data-parallel group 0: leave --precision_dump_ranks empty or list them");
  return files;
}

// A record seen as on one device: TP shards merged, stages joined.
struct Merged {
  DumpRecord rec;  // TP rank 0's, with merged statistics
  int pp = 0;
  int64_t seq = 0;  // position in its rank's file
  std::tuple<int64_t, int, int, int, int64_t> order() const {
    const bool bwd = rec.pass == "backward";
    return {rec.micro_batch, bwd ? 1 : 0, bwd ? -rec.chunk : rec.chunk, bwd ? -pp : pp, seq};
  }
};

struct View {
  std::vector<Merged> records;  // canonical order
  std::map<std::string, size_t> by_name;
  DumpFile head;  // DP rank 0, TP 0, PP 0 file: sizes, level, dtype
  std::string first_nonfinite;
};

void merge_tensors(std::vector<DumpTensor>& into, const std::vector<DumpTensor>& shard) {
  for (DumpTensor& t : into) {
    if (!t.tp_shard) continue;
    for (const DumpTensor& s : shard)
      if (s.role == t.role) t.stats = profiler::merge_stats(t.stats, s.stats);
  }
}

View make_view(std::vector<DumpFile> files) {
  std::sort(files.begin(), files.end(), [](const DumpFile& x, const DumpFile& y) {
    return std::tie(x.info.dp, x.info.pp, x.info.tp) < std::tie(y.info.dp, y.info.pp, y.info.tp);
  });
  View v;
  v.head = files.front();
  v.head.records.clear();
  std::map<std::string, int> stage_of;
  for (const DumpFile& f : files) {
    if (f.info.dp != 0) continue;
    for (size_t i = 0; i < f.records.size(); ++i) {
      const DumpRecord& r = f.records[i];
      auto it = v.by_name.find(r.name);
      if (it == v.by_name.end()) {
        v.by_name[r.name] = v.records.size();
        v.records.push_back({r, f.info.pp, static_cast<int64_t>(i)});
      } else if (v.records[it->second].pp == f.info.pp && f.info.tp != 0) {
        merge_tensors(v.records[it->second].rec.inputs, r.inputs);
        merge_tensors(v.records[it->second].rec.outputs, r.outputs);
      }
    }
  }
  std::stable_sort(v.records.begin(), v.records.end(),
                   [](const Merged& x, const Merged& y) { return x.order() < y.order(); });
  v.by_name.clear();
  for (size_t i = 0; i < v.records.size(); ++i) v.by_name[v.records[i].rec.name] = i;
  // The first NaN/Inf in canonical order among the ranks' own findings.
  std::vector<NonFiniteFinding> found;
  for (const DumpFile& f : files)
    if (f.info.dp == 0 && f.first_nonfinite) found.push_back(*f.first_nonfinite);
  size_t best = v.records.size();
  for (const NonFiniteFinding& n : found) {
    auto it = v.by_name.find(n.record);
    const size_t pos = it == v.by_name.end() ? v.records.size() - 1 : it->second;
    if (pos < best || v.first_nonfinite.empty()) {
      best = pos;
      v.first_nonfinite = fmt::format("{} ({}: {} NaN, {} Inf)", n.record, n.role, n.nan, n.inf);
    }
  }
  return v;
}

double stat_value(const TensorStats& s, const std::string& stat) {
  if (stat == "max") return s.max;
  if (stat == "min") return s.min;
  if (stat == "mean") return s.mean();
  if (stat == "l2_norm") return s.l2_norm();
  if (stat == "nan") return static_cast<double>(s.nan);
  return static_cast<double>(s.inf);
}

double rms(const TensorStats& s) { return s.finite > 0 ? std::sqrt(s.sum_sq / static_cast<double>(s.finite)) : 0; }

void compare_tensors(const Merged& ma, const std::vector<DumpTensor>& ta, const std::vector<DumpTensor>& tb,
                     const CompareOptions& o, CompareReport& rep) {
  for (const DumpTensor& x : ta) {
    const auto y = std::find_if(tb.begin(), tb.end(), [&](const DumpTensor& t) { return t.role == x.role; });
    if (y == tb.end()) continue;
    for (const char* stat : {"max", "min", "mean", "l2_norm", "nan", "inf"}) {
      StatDiff d{ma.rec.name, ma.rec.module, x.role, stat, stat_value(x.stats, stat), stat_value(y->stats, stat)};
      const bool nan_a = std::isnan(d.a), nan_b = std::isnan(d.b);
      const double diff = std::fabs(d.a - d.b);
      double scale = std::max(std::fabs(d.a), std::fabs(d.b));
      d.rel = nan_a || nan_b ? (nan_a == nan_b ? 0 : INFINITY) : scale > 0 ? diff / scale : 0;
      if (d.stat == "mean") scale = std::max({scale, rms(x.stats), rms(y->stats)});
      if (d.stat == "nan" || d.stat == "inf") {
        d.diverged = d.a != d.b;
        d.over = d.diverged ? INFINITY : 0;
      } else {
        const double tol = o.atol + o.rtol * scale;
        d.over = nan_a != nan_b ? INFINITY : nan_a ? 0 : tol > 0 ? diff / tol : (diff > 0 ? INFINITY : 0);
        d.diverged = d.over > 1;
      }
      if (d.diverged && !rep.first_divergence) rep.first_divergence = d;
      rep.diffs.push_back(std::move(d));
    }
  }
}

std::string describe(const View& v) {
  const DumpFile& h = v.head;
  return fmt::format("tp {}, pp {}, dp {}, level {}, {}", h.info.tp_size, h.info.pp_size, h.info.dp_size, h.level,
                     h.info.dtype);
}

}  // namespace

CompareOptions parse_compare_args(const std::vector<std::string>& args) {
  CompareOptions o;
  std::vector<std::string> positional;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      o.help = true;
      continue;
    }
    if (a.rfind("--", 0) != 0) {
      positional.push_back(a);
      continue;
    }
    const size_t eq = a.find('=');
    const std::string name = config::normalize_flag_name(a.substr(2, eq == std::string::npos ? a.npos : eq - 2));
    std::string value;
    if (eq != std::string::npos) {
      value = a.substr(eq + 1);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      usage(fmt::format("--{} needs a value", name));
    }
    if (name == "step") {
      o.step = parse_value<int64_t>(name, value);
    } else if (name == "rtol") {
      o.rtol = parse_value<double>(name, value);
    } else if (name == "atol") {
      o.atol = parse_value<double>(name, value);
    } else if (name == "show") {
      o.show = parse_value<int>(name, value);
    } else {
      std::string msg = fmt::format("unknown option --{} for mtrain compare", name);
      if (const std::string s = config::suggest_name(name, {"step", "rtol", "atol", "show", "help"}); !s.empty())
        msg += fmt::format("; did you mean --{}?", s);
      usage(msg);
    }
  }
  if (o.help) return o;
  if (positional.size() != 2)
    usage(fmt::format("mtrain compare takes two dump directories, got {}", positional.size()));
  o.a = positional[0];
  o.b = positional[1];
  if (!(o.rtol >= 0) || !(o.atol >= 0)) usage("--rtol and --atol must be >= 0");
  if (o.show < 0) usage("--show must be >= 0");
  return o;
}

std::string compare_help() {
  return fmt::format(
      "usage: {}\n\n"
      "Compares two precision dumps (--precision_dump_path) step by step and names the first module or op\n"
      "whose statistics (max, min, mean, L2 norm, NaN/Inf counts) differ beyond tolerance.\n"
      "  DUMP_A, DUMP_B  a dump root or one of its step<N> directories; TP and PP sizes may differ\n"
      "  --step N        the iteration to compare (default: the first both hold)\n"
      "  --rtol R        relative tolerance (default 1e-3, for fp32 runs; use ~1e-2 for bf16)\n"
      "  --atol A        absolute tolerance (default 1e-6)\n"
      "  --show N        rows of the table (default 20)\n"
      "Exit codes: 0 no divergence, {} a divergence, 2 bad options / missing directory or step,\n"
      "4 not a dump / unequal levels or data-parallel sizes.\n",
      kUsage, kExitDiverged);
}

CompareReport compare_dumps(const CompareOptions& o) {
  const std::map<int64_t, fs::path> sa = dump_steps(o.a), sb = dump_steps(o.b);
  int64_t step = -1;
  if (o.step) {
    if (!sa.count(*o.step) || !sb.count(*o.step))
      usage(fmt::format("mtrain compare: step {} is not in {}", *o.step, !sa.count(*o.step) ? o.a : o.b));
    step = *o.step;
  } else {
    for (const auto& [s, dir] : sa)
      if (sb.count(s)) {
        step = s;
        break;
      }
    if (step < 0) usage(fmt::format("mtrain compare: {} and {} hold no common step", o.a, o.b));
  }
  const View va = make_view(load_step(sa.at(step))), vb = make_view(load_step(sb.at(step)));
  if (va.head.info.dp_size != vb.head.info.dp_size)
    throw DataError(fmt::format("mtrain compare: data-parallel sizes differ: {} in {}, {} in {}", va.head.info.dp_size,
                                o.a, vb.head.info.dp_size, o.b),
                    "compare runs with the same data-parallel size (TP and PP may differ)");
  if (va.head.level != vb.head.level)
    throw DataError(
        fmt::format("mtrain compare: dump levels differ: {} in {}, {} in {}", va.head.level, o.a, vb.head.level, o.b),
        "dump both runs with the same --precision_dump_level");
  CompareReport rep;
  rep.step = step;
  rep.layout_a = describe(va);
  rep.layout_b = describe(vb);
  for (const Merged& m : va.records) {
    auto it = vb.by_name.find(m.rec.name);
    if (it == vb.by_name.end()) {
      rep.only_a.push_back(m.rec.name);
      continue;
    }
    ++rep.compared;
    const Merged& mb = vb.records[it->second];
    compare_tensors(m, m.rec.inputs, mb.rec.inputs, o, rep);
    compare_tensors(m, m.rec.outputs, mb.rec.outputs, o, rep);
  }
  for (const Merged& m : vb.records)
    if (!va.by_name.count(m.rec.name)) rep.only_b.push_back(m.rec.name);
  if (rep.compared == 0)
    throw DataError(fmt::format("mtrain compare: {} and {} share no record at step {}", o.a, o.b, step),
                    "dump both runs of the same model with the same --precision_dump_level");
  rep.first_nonfinite_a = va.first_nonfinite;
  rep.first_nonfinite_b = vb.first_nonfinite;
  return rep;
}

namespace {

void print_skipped(std::ostream& out, const std::vector<std::string>& names, const std::string& where) {
  if (names.empty()) return;
  out << fmt::format("skipped {} record{} only in {}:", names.size(), names.size() == 1 ? "" : "s", where);
  for (size_t i = 0; i < std::min<size_t>(names.size(), 8); ++i) out << "\n  " << names[i];
  if (names.size() > 8) out << fmt::format("\n  ... and {} more", names.size() - 8);
  out << "\n";
}

}  // namespace

int run_compare(const CompareOptions& o, std::ostream& out) {
  const CompareReport rep = compare_dumps(o);
  out << fmt::format("mtrain compare: {} vs {}, step {}, rtol {:g}, atol {:g}\n", o.a, o.b, rep.step, o.rtol, o.atol);
  out << fmt::format("a: {}\nb: {}\ncompared {} records\n", rep.layout_a, rep.layout_b, rep.compared);
  print_skipped(out, rep.only_a, o.a);
  print_skipped(out, rep.only_b, o.b);
  // The diverged rows in execution order, or without any the closest calls.
  std::vector<StatDiff> rows;
  for (const StatDiff& d : rep.diffs)
    if (d.diverged) rows.push_back(d);
  const bool diverged = !rows.empty();
  if (!diverged) {
    rows = rep.diffs;
    std::stable_sort(rows.begin(), rows.end(), [](const StatDiff& x, const StatDiff& y) { return x.over > y.over; });
  }
  if (rows.size() > static_cast<size_t>(o.show)) rows.resize(o.show);
  if (!rows.empty()) {
    out << (diverged ? "diverged statistics, in execution order:\n"
                     : "closest to the tolerance (difference / tolerance):\n");
    out << fmt::format("  {:<64} {:<12} {:<8} {:>14} {:>14} {:>9} {:>8}\n", "record", "role", "stat", "a", "b",
                       "rel err", "/tol");
    for (const StatDiff& d : rows)
      out << fmt::format("  {:<64} {:<12} {:<8} {:>14.7g} {:>14.7g} {:>9.3g} {:>8.3g}{}\n", d.record, d.role, d.stat,
                         d.a, d.b, d.rel, d.over, d.diverged ? " *" : "");
  }
  out << "first NaN/Inf: a: " << (rep.first_nonfinite_a.empty() ? "none" : rep.first_nonfinite_a)
      << "; b: " << (rep.first_nonfinite_b.empty() ? "none" : rep.first_nonfinite_b) << "\n";
  if (!rep.first_divergence) {
    out << "no divergence beyond tolerance\n";
    return 0;
  }
  const StatDiff& d = *rep.first_divergence;
  out << fmt::format("first divergence: {} (module {}): {} {} a={:.7g} b={:.7g} rel err {:.3g}\n", d.record, d.module,
                     d.role, d.stat, d.a, d.b, d.rel);
  return kExitDiverged;
}

}  // namespace mtrain::observe
