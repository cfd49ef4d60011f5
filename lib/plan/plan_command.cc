#include "plan/plan_command.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "common/errors.h"
#include "common/progress.h"
#include "config/cli.h"
#include "config/profiles.h"
#include "plan/dry_run.h"
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

// --memory_margin's value: a share of the HBM in [0, 1) ("0.1"), or a percentage ("10%").
static double margin_share(const std::string& v) {
  const bool percent = !v.empty() && v.back() == '%';
  const std::string digits = percent ? v.substr(0, v.size() - 1) : v;
  double x = -1;
  const auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), x);
  if (ec != std::errc() || p != digits.data() + digits.size() || digits.empty()) x = -1;
  if (percent) x /= 100;
  if (!(x >= 0 && x < 1))
    throw UsageError(
        fmt::format("--memory_margin {}: expected a share of the HBM from 0 to below 1, or a percentage", v),
        "e.g. --memory_margin 0.05 or --memory_margin 5% keeps 5% of each device free");
  return x;
}

// "--nproc-per-node=8" -> "--nproc_per_node": the flag's name in either spelling.
static std::string flag_name(const std::string& token) {
  std::string name = token.substr(0, token.find('='));
  if (name.rfind("--", 0) == 0) std::replace(name.begin() + 2, name.end(), '-', '_');
  return name;
}

// Flags that choose the layout: the plan chooses it, so a value given would
// be overridden (or, printed with the plan, contradict it).
static bool layout_flag(const std::string& name) {
  for (const char* f : {"--dry_run", "--tensor_model_parallel_size", "--pipeline_model_parallel_size",
                        "--virtual_pipeline_model_parallel_size", "--num_layers_per_virtual_pipeline_stage",
                        "--decoder_first_pipeline_num_layers", "--decoder_last_pipeline_num_layers",
                        "--context_parallel_size", "--context_parallel_algo", "--expert_model_parallel_size",
                        "--expert_tensor_parallel_size", "--moe_token_dispatcher_type"})
    if (name == f) return true;
  return false;
}

PlanOptions parse_plan_args(const std::vector<std::string>& args, int nnodes, int nproc_per_node) {
  PlanOptions o;
  o.nnodes = nnodes;
  o.nproc_per_node = nproc_per_node;
  size_t first = 0;
  if (!args.empty() && (args[0] == "sft" || args[0] == "pt" || args[0] == "pretrain")) {
    o.command = args[0] == "sft" ? "sft" : "pt";
    first = 1;
  }
  for (size_t i = first; i < args.size(); ++i) {
    const std::string& a = args[i];
    const std::string name = flag_name(a);
    if (a == "--help" || a == "-h") {
      o.help = true;
    } else if (a == "--json") {
      o.json = true;
    } else if (name == "--nnodes" || name == "--nproc_per_node" || name == "--top") {
      const size_t eq = a.find('=');
      if (eq == std::string::npos && i + 1 >= args.size()) throw UsageError(name + " needs a value", kUsage);
      const int n = positive(name, eq == std::string::npos ? args[++i] : a.substr(eq + 1));
      (name == "--nnodes" ? o.nnodes : name == "--top" ? o.top : o.nproc_per_node) = n;
      o.nnodes_given = o.nnodes_given || name == "--nnodes";
      o.nproc_given = o.nproc_given || name == "--nproc_per_node";
    } else if (name == "--memory_margin") {
      const size_t eq = a.find('=');
      if (eq == std::string::npos && i + 1 >= args.size()) throw UsageError(name + " needs a value", kUsage);
      o.memory_margin = margin_share(eq == std::string::npos ? args[++i] : a.substr(eq + 1));
    } else if (name == "--dry_run_lengths" || name == "--dry_run_samples") {
      if (o.command != "sft")
        throw UsageError(fmt::format("{} with mtrain plan plans an sft job on its sample lengths", a),
                         "start the plan's arguments with sft (mtrain plan sft ...); a pt job's rows are "
                         "--seq_length long");
      const size_t eq = a.find('=');
      if (eq == std::string::npos && i + 1 >= args.size()) throw UsageError(name + " needs a value", kUsage);
      o.data_args.push_back(name);
      o.data_args.push_back(eq == std::string::npos ? args[++i] : a.substr(eq + 1));
    } else if (layout_flag(name)) {
      throw UsageError(fmt::format("{} with mtrain plan: the plan chooses the layout itself", a),
                       "drop it; give the model, batch and --nnodes / --nproc_per_node");
    } else {
      o.model_args.push_back(a);
    }
  }
  return o;
}

std::string plan_help() {
  return "mtrain plan [sft|pt] [JOB.yaml] <the job's flags: --model_preset NAME | --model DIR | --num_layers ...,\n"
         "            --global_batch_size N, --seq_length N, --bf16, --dataset ..., --lr ...>\n"
         "            --nnodes N --nproc_per_node N [--top N] [--memory_margin SHARE] [--json]\n"
         "            [sft only: --dry_run_samples N | --dry_run_lengths LENGTH:COUNT,...|FILE]\n"
         "Searches TP (within a node), PP (with a shorter first/last stage), VPP, CP (ring and Ulysses, for\n"
         "sequences of 8192 tokens and more, at least 4096 per CP rank), DP, for an MoE model EP, ETP and the\n"
         "token dispatcher, micro-batch, recompute, the distributed optimizer and sequence parallelism;\n"
         "dry-runs every valid layout and prints the\n"
         "fastest that fit, each as the `mtrain sft|pt` command to paste: the job's flags as given, then the\n"
         "layout's. The job is pt unless the first argument is sft. Exit 6 when none fits.\n"
         "A layout fits when its peak on the device (the allocator's reserve and what the runtime holds beside it:\n"
         "context, collective library buffers, workspaces) leaves --memory_margin of the HBM free (a share, 0.05,\n"
         "or a percentage, 5%; default: the device profile's runtime.memory_margin).\n"
         "An sft job is planned on the lengths of its --dataset's first global batch (--dry_run_samples N: of N\n"
         "samples of each file), on --dry_run_lengths in place of a dataset, else on rows of --max_length; the\n"
         "printed commands leave both flags out.\n";
}

std::string shell_quote(const std::string& token) {
  static constexpr std::string_view kSafe = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+./=:,@%";
  if (!token.empty() && token.find_first_not_of(kSafe) == std::string::npos) return token;
  std::string q = "'";
  for (char c : token) q += c == '\'' ? std::string("'\\''") : std::string(1, c);  // ' -> '\''
  return q + "'";
}

static std::string join_quoted(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) {
    if (!s.empty()) s += ' ';
    s += shell_quote(x);
  }
  return s;
}

static double gib(int64_t b) { return static_cast<double>(b) / (1LL << 30); }

// The job's own arguments as given, the layout, then the world as flags
// (they win over the variables and over the job's YAML, so the line is the plan).
static std::string launch_line(const PlanOptions& o, const PlanResult& p) {
  return fmt::format("mtrain {} {} {} --nnodes {} --nproc_per_node {}", o.command, join_quoted(o.model_args), p.flags,
                     o.nnodes, o.nproc_per_node);
}

// "-" for an even split, else the layers of the first / last stage ("7/9").
static std::string edge_layers(const Layout& l, int num_layers) {
  if (!l.first_stage_layers && !l.last_stage_layers) return "-";
  const int edges = (l.first_stage_layers ? 1 : 0) + (l.last_stage_layers ? 1 : 0);
  const int middle = l.pp == edges ? 0 : (num_layers - l.first_stage_layers - l.last_stage_layers) / (l.pp - edges);
  return fmt::format("{}/{}", l.first_stage_layers ? l.first_stage_layers : middle,
                     l.last_stage_layers ? l.last_stage_layers : middle);
}

// The CP column ("2 ring", "4 ulysses") when the search tried CP; the EP, ETP
// and dispatcher columns for an MoE model.
static std::string axis_columns(const SearchSummary& s, const Layout* l) {
  std::string c;
  if (s.cp_searched) {
    const std::string cp = !l ? std::string("CP")
                           : l->cp == 1
                               ? std::string("1")
                               : fmt::format("{} {}", l->cp, l->cp_algo == "ulysses_cp_algo" ? "ulysses" : "ring");
    c += fmt::format(" {:>9}", cp);
  }
  if (s.moe)
    c += l ? fmt::format(" {:>3} {:>3} {:>9}", l->ep, l->etp, l->dispatcher)
           : fmt::format(" {:>3} {:>3} {:>9}", "EP", "ETP", "dispatch");
  return c;
}

static void print_table(const PlanOptions& o, const SearchSummary& s, std::ostream& out) {
  out << fmt::format(
      "{} candidates: {} invalid (Megatron's validation), {} pruned (states alone exceed HBM), {} pruned (a "
      "miss of the same split rules it out), {} dry-run, {} fit ({} more had the memory and time of a "
      "simpler layout: listed once, as that one)\n\n",
      s.candidates, s.invalid, s.pruned, s.pruned_after_miss, s.dry_run, s.fitting.size(), s.same_as_simpler);
  if (!s.fitting.empty())
    out << fmt::format(
        "A layout fits when its peak on the device stays within {:.2f} GiB: the {:.2f} GiB of HBM less "
        "the {:g}% margin (--memory_margin {:g}).\n\n",
        gib(s.fitting.front().usable_bytes), gib(s.fitting.front().capacity_bytes), 100 * o.margin, o.margin);
  out << fmt::format("{:>4} {:>3} {:>3} {:>8} {:>3}{} {:>3} {:>4} {:>9} {:>7} {:>5} {:>17} {:>9} {:>9} {:>13} {:>6}\n",
                     "rank", "TP", "PP", "1st/last", "VPP", axis_columns(s, nullptr), "DP", "MBS", "recompute",
                     "distopt", "SP", "peak GiB / cap", "free GiB", "step s", "tokens/s/dev", "MFU");
  const size_t n = std::min<size_t>(o.top, s.fitting.size());
  for (size_t i = 0; i < n; ++i) {
    const PlanResult& p = s.fitting[i];
    const Layout& l = p.layout;
    out << fmt::format(
        "{:>4} {:>3} {:>3} {:>8} {:>3}{} {:>3} {:>4} {:>9} {:>7} {:>5} {:>8.2f} / {:<6.2f} {:>9.2f} {:>9.3f} "
        "{:>13.1f} {:>5.1f}%\n",
        i + 1, l.tp, l.pp, edge_layers(l, p.num_layers), l.vpp, axis_columns(s, &l), p.dp, l.mbs, l.recompute,
        l.distopt ? "on" : "off", l.sp ? "on" : "off", gib(p.peak_bytes), gib(p.capacity_bytes),
        gib(p.capacity_bytes - p.peak_bytes), p.step_s, p.tokens_per_s_per_device, 100 * p.mfu);
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
                    {"first_stage_layers", l.first_stage_layers},  // 0: the even share
                    {"last_stage_layers", l.last_stage_layers},
                    {"dp", p.dp},
                    {"mbs", l.mbs},
                    {"recompute", l.recompute},
                    {"distributed_optimizer", l.distopt},
                    {"sequence_parallel", l.sp},
                    {"cp", l.cp},
                    {"cp_algo", l.cp_algo},
                    {"ep", l.ep},
                    {"etp", l.etp},
                    {"moe_token_dispatcher_type", l.moe ? nlohmann::json(l.dispatcher) : nlohmann::json()},
                    {"tp_comm_s", p.tp_comm_s},  // the micro-batch communication, split as the dry run's report
                    {"cp_comm_s", p.cp_comm_s},
                    {"ep_comm_s", p.ep_comm_s},
                    {"peak_bytes", p.peak_bytes},
                    {"capacity_bytes", p.capacity_bytes},
                    {"usable_bytes", p.usable_bytes},  // capacity less --memory_margin
                    {"headroom_bytes", p.capacity_bytes - p.peak_bytes},
                    {"step_s", p.step_s},
                    {"tokens_per_s_per_device", p.tokens_per_s_per_device},
                    {"mfu", p.mfu},
                    {"flags", p.flags},
                    {"command", launch_line(o, p)}});
  }
  out << rows.dump(2) << "\n";
}

// `mtrain <command> <the job's arguments>`, with one iteration when the job
// has no length yet (the plan measures one; a real run needs one chosen).
static std::vector<std::string> job_command_line(const PlanOptions& o) {
  std::vector<std::string> tokens = {"mtrain", o.command};
  tokens.insert(tokens.end(), o.model_args.begin(), o.model_args.end());
  bool length = false;
  for (const std::string& t : o.model_args)
    for (const char* f : {"--train_iters", "--num_train_epochs", "--max_epochs"}) length = length || t.rfind(f, 0) == 0;
  if (!length) tokens.insert(tokens.end(), {"--train_iters", "1"});
  return tokens;
}

// The job's YAML may set the world (nnodes: / nproc_per_node:): it wins over
// the variables, plan's own flags win over it (as in a launch).
static void world_from_job(int argc, const char* const* argv, PlanOptions& o) {
  const std::optional<config::Args> job = config::peek_args(argc, argv);
  if (!job) return;
  if (job->nnodes && !o.nnodes_given) o.nnodes = positive("nnodes (job YAML)", std::to_string(*job->nnodes));
  if (job->nproc_per_node && !o.nproc_given)
    o.nproc_per_node = positive("nproc_per_node (job YAML)", std::to_string(*job->nproc_per_node));
}

// When nothing fits on the world asked for: the smallest world of whole
// nodes (twice, four times, ... up to 64 times the nodes) on which a layout
// fits, searched as the plan searches (dry-run checked); 0 when none does.
static int smallest_fitting_nodes(const config::Args& job, SearchOptions so) {
  so.progress = nullptr;
  so.prune = true;
  so.data = nullptr;  // memory alone decides: rows of --max_length are enough
  for (int nodes = so.nnodes * 2; nodes <= so.nnodes * 64; nodes *= 2) {
    SearchOptions at = so;
    at.nnodes = nodes;
    if (!search_layouts(job, at).fitting.empty()) return nodes;
  }
  return 0;
}

// The job parsed and validated. Each candidate layout is validated on the
// world by the search; the job itself is validated on it only where its own
// layout fits it. Where not (global batch 8 on 16 ranks at TP 1 is DP 16,
// which TP 2 x DP 8 is not), on the world of its own layout alone (DP 1),
// and the first error stands when that fails too.
static config::Invocation parse_job(const std::vector<const char*>& argv, int world) {
  config::ParseOptions po;
  po.world_size = world;
  const int argc = static_cast<int>(argv.size());
  try {
    return config::parse_command_line(argc, argv.data(), po);
  } catch (const ConfigError& at_world) {
    const std::optional<config::Args> job = config::peek_args(argc, argv.data());
    if (!job) throw;
    po.world_size = job->tensor_model_parallel_size * job->pipeline_model_parallel_size * job->context_parallel_size;
    if (po.world_size == world) throw;
    try {
      return config::parse_command_line(argc, argv.data(), po);
    } catch (const ConfigError&) {
      throw at_world;
    }
  }
}

int run_plan_command(const PlanOptions& given, std::ostream& out) {
  PlanOptions o = given;
  const std::vector<std::string> tokens = job_command_line(o);
  std::vector<const char*> argv;
  for (const std::string& t : tokens) argv.push_back(t.c_str());
  world_from_job(static_cast<int>(argv.size()), argv.data(), o);
  const int world = o.nnodes * o.nproc_per_node;
  const config::Invocation inv = parse_job(argv, world);
  // One rank per NPU: a node of the profile holds devices_per_node ranks, as a launch checks.
  const config::DeviceProfileSpec node = config::load_device_profile(inv.args.device_profile);
  if (o.nproc_per_node > node.devices_per_node)
    throw DistributedError(
        fmt::format("--nproc_per_node {}: a node of {} has {} NPUs (one rank per NPU)", o.nproc_per_node, node.name,
                    node.devices_per_node),
        fmt::format("plan at most {} ranks per node and more nodes (--nnodes)", node.devices_per_node));
  o.margin = o.memory_margin.value_or(node.runtime.memory_margin);
  SearchOptions so{o.nproc_per_node, o.nnodes, true, stdout_progress_sink()};
  so.memory_margin = o.margin;
  // An sft job's dataset is read once (or its --dry_run_samples, or samples of its --dry_run_lengths);
  // every candidate steps its real rows' lengths. The data flags are checked as a dry run checks them.
  std::optional<config::Invocation> with_data;
  if (!o.data_args.empty()) {
    std::vector<const char*> data_argv = argv;
    data_argv.push_back("--dry_run");
    for (const std::string& t : o.data_args) data_argv.push_back(t.c_str());
    with_data = parse_job(data_argv, world);
  }
  std::optional<data::DataPipeline> data = read_sft_data(with_data ? with_data->args : inv.args);
  if (with_data && with_data->args.dry_run_samples && !data)
    throw ConfigError("--dry_run_samples: a file of the job's --dataset is not there to sample",
                      "plan on the data once it exists, or on --dry_run_lengths in place of --dataset");
  so.data = data ? &*data : nullptr;
  const SearchSummary s = search_layouts(inv.args, so);
  if (s.fitting.empty()) {
    const int nodes = smallest_fitting_nodes(inv.args, so);
    const std::string more =
        nodes ? fmt::format("the smallest world that fits is {} node{} of {} ({} ranks): plan it with --nnodes {}",
                            nodes, nodes == 1 ? "" : "s", o.nproc_per_node, nodes * o.nproc_per_node, nodes)
              : fmt::format("no world up to {} nodes of {} fits either: a smaller model or --seq_length", o.nnodes * 64,
                            o.nproc_per_node);
    if (s.misses.empty())
      throw OutOfMemoryError(fmt::format("no layout of {} ranks fits: of {} candidates, {} are invalid and the "
                                         "parameter states alone of the other {} exceed the HBM",
                                         world, s.candidates, s.invalid, s.candidates - s.invalid),
                             more);
    const PlanResult& m = s.misses.front();
    throw OutOfMemoryError(
        fmt::format("no layout of {} ranks fits; the nearest miss ({}) needs {:.2f} GiB of {:.2f} GiB ({:.2f} GiB "
                    "of HBM less the {:g}% --memory_margin), short by {:.2f} GiB",
                    world, m.flags, gib(m.peak_bytes), gib(m.usable_bytes), gib(m.capacity_bytes), 100 * o.margin,
                    gib(m.peak_bytes - m.usable_bytes)),
        more);
  }
  if (o.json)
    print_json(o, s, out);
  else
    print_table(o, s, out);
  return 0;
}

}  // namespace mtrain::plan
