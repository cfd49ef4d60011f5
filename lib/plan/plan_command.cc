#include "plan/plan_command.h"

#include <fmt/format.h>

#include <charconv>
#include <nlohmann/json.hpp>

#include "common/errors.h"
#include "config/cli.h"
#include "plan/search.h"

namespace mtrain::plan {

static constexpr const char* kUsage = "`mtrain plan --help` shows the flags";

static int positive(const std::string& name, const std::string& v) {
  int n = 0;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || p != v.data() + v.size() || n < 1)
    throw UsageError(fmt::format("{} {}: not a positive integer", name, v), kUsage);
  return n;
}

PlanOptions parse_plan_args(const std::vector<std::string>& args, int nnodes, int nproc_per_node) {
  PlanOptions o;
  o.nnodes = nnodes;
  o.nproc_per_node = nproc_per_node;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h")
      o.help = true;
    else if (a == "--json")
      o.json = true;
    else if (a == "--nnodes" || a == "--nproc_per_node" || a == "--top") {
      if (i + 1 >= args.size()) throw UsageError(a + " needs a value", kUsage);
      const int n = positive(a, args[++i]);
      (a == "--nnodes" ? o.nnodes : a == "--top" ? o.top : o.nproc_per_node) = n;
    } else if (a == "--dry_run" || a.rfind("--tensor_model_parallel_size", 0) == 0 ||
               a.rfind("--pipeline_model_parallel_size", 0) == 0) {
      throw UsageError(fmt::format("{} with mtrain plan: the plan chooses the layout itself", a),
                       "drop it; give the model, batch and --nnodes / --nproc_per_node");
    } else {
      o.model_args.push_back(a);
    }
  }
  return o;
}

std::string plan_help() {
  return "mtrain plan <model flags: --model_preset NAME | --model DIR | --num_layers ...> --global_batch_size N\n"
         "            --seq_length N [--bf16] --nnodes N --nproc_per_node N [--top N] [--json]\n"
         "Searches TP (within a node), PP, VPP, DP, micro-batch, recompute, the distributed optimizer and\n"
         "sequence parallelism; dry-runs every valid layout and prints the fastest that fit, each with the\n"
         "flags to paste. Exit 6 when none fits.\n";
}

static std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : " ") + x;
  return s;
}

static double gib(int64_t b) { return static_cast<double>(b) / (1LL << 30); }

static std::string launch_line(const PlanOptions& o, const PlanResult& p) {
  return fmt::format("NNODES={} NPROC_PER_NODE={} mtrain pt {} {}", o.nnodes, o.nproc_per_node, join(o.model_args),
                     p.flags);
}

static void print_table(const PlanOptions& o, const SearchSummary& s, std::ostream& out) {
  out << fmt::format(
      "{} candidates: {} invalid (Megatron's validation), {} pruned (states alone exceed HBM), "
      "{} dry-run, {} fit\n\n",
      s.candidates, s.invalid, s.pruned, s.dry_run, s.fitting.size());
  out << fmt::format("{:>4} {:>3} {:>3} {:>3} {:>3} {:>4} {:>9} {:>7} {:>5} {:>17} {:>9} {:>13} {:>6}\n", "rank", "TP",
                     "PP", "VPP", "DP", "MBS", "recompute", "distopt", "SP", "peak GiB / cap", "step s", "tokens/s/dev",
                     "MFU");
  const size_t n = std::min<size_t>(o.top, s.fitting.size());
  for (size_t i = 0; i < n; ++i) {
    const PlanResult& p = s.fitting[i];
    const Layout& l = p.layout;
    out << fmt::format(
        "{:>4} {:>3} {:>3} {:>3} {:>3} {:>4} {:>9} {:>7} {:>5} {:>8.2f} / {:<6.2f} {:>9.3f} {:>13.1f} {:>5.1f}%\n",
        i + 1, l.tp, l.pp, l.vpp, p.dp, l.mbs, l.recompute, l.distopt ? "on" : "off", l.sp ? "on" : "off",
        gib(p.peak_bytes), gib(p.capacity_bytes), p.step_s, p.tokens_per_s_per_device, 100 * p.mfu);
  }
  out << "\n";
  for (size_t i = 0; i < n; ++i) out << fmt::format("{}: {}\n", i + 1, launch_line(o, s.fitting[i]));
}

// nlohmann::json escapes the strings (a --model path may hold any character).
static void print_json(const PlanOptions& o, const SearchSummary& s, std::ostream& out) {
  nlohmann::json rows = nlohmann::json::array();
  const size_t n = std::min<size_t>(o.top, s.fitting.size());
  for (size_t i = 0; i < n; ++i) {
    const PlanResult& p = s.fitting[i];
    const Layout& l = p.layout;
    rows.push_back({{"rank", i + 1},
                    {"tp", l.tp},
                    {"pp", l.pp},
                    {"vpp", l.vpp},
                    {"dp", p.dp},
                    {"mbs", l.mbs},
                    {"recompute", l.recompute},
                    {"distributed_optimizer", l.distopt},
                    {"sequence_parallel", l.sp},
                    {"peak_bytes", p.peak_bytes},
                    {"capacity_bytes", p.capacity_bytes},
                    {"step_s", p.step_s},
                    {"tokens_per_s_per_device", p.tokens_per_s_per_device},
                    {"mfu", p.mfu},
                    {"flags", p.flags},
                    {"command", launch_line(o, p)}});
  }
  out << rows.dump(2) << "\n";
}

int run_plan_command(const PlanOptions& o, std::ostream& out) {
  const int world = o.nnodes * o.nproc_per_node;
  std::vector<std::string> tokens = {"mtrain", "pt"};
  tokens.insert(tokens.end(), o.model_args.begin(), o.model_args.end());
  // The plan measures one iteration: a length the user has not chosen yet is not required.
  bool length = false;
  for (const std::string& t : o.model_args)
    for (const char* f : {"--train_iters", "--num_train_epochs", "--max_epochs"}) length = length || t.rfind(f, 0) == 0;
  if (!length) tokens.insert(tokens.end(), {"--train_iters", "1"});
  std::vector<const char*> argv;
  for (const std::string& t : tokens) argv.push_back(t.c_str());
  config::ParseOptions po;
  po.world_size = world;
  const config::Invocation inv = config::parse_command_line(static_cast<int>(argv.size()), argv.data(), po);
  const SearchSummary s = search_layouts(inv.args, {o.nproc_per_node, o.nnodes, true});
  if (s.fitting.empty()) {
    if (s.misses.empty())
      throw OutOfMemoryError(
          fmt::format("no layout of {} ranks fits: all {} candidates are invalid or pruned", world, s.candidates),
          "plan with more nodes (--nnodes) or a smaller model / --seq_length");
    const PlanResult& m = s.misses.front();
    throw OutOfMemoryError(
        fmt::format("no layout of {} ranks fits; the nearest miss ({}) needs {:.2f} GiB of {:.2f} GiB, short by "
                    "{:.2f} GiB",
                    world, m.flags, gib(m.peak_bytes), gib(m.capacity_bytes), gib(m.peak_bytes - m.capacity_bytes)),
        "plan with more nodes (--nnodes) or a smaller --global_batch_size / --seq_length");
  }
  if (o.json)
    print_json(o, s, out);
  else
    print_table(o, s, out);
  return 0;
}

}  // namespace mtrain::plan
